"""LayerNorm-simple (Xu et al., 2019): LayerNorm without gain and bias."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import check_batch, check_features, check_positive, upcast


@register_norm("layernorm_simple")
class LayerNormSimple(nn.Module):
    r"""LayerNorm-simple per node, from `"Understanding and Improving Layer Normalization"
    <https://arxiv.org/abs/1911.07013>`_ (Xu et al., NeurIPS 2019): LayerNorm with the gain and bias removed,

    .. math::
        \mathbf{x}'_i = \frac{\mathbf{x}_i - \mu_i}{\sqrt{\sigma_i^2 + \epsilon}}, \qquad
        \mu_i = \frac{1}{C}\sum_c x_{ic},\; \sigma_i^2 = \frac{1}{C}\sum_c (x_{ic} - \mu_i)^2 .

    float16 / bfloat16 input is computed in float32 and returned in its own dtype.
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.eps = check_positive(eps, "eps", "layernorm_simple")

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_features(x, self.channels, "layernorm_simple")
        check_batch(x, batch, "layernorm_simple")
        if x.size(0) == 0:
            return x.clone()
        return F.layer_norm(upcast(x), (self.channels,), None, None, self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}"
