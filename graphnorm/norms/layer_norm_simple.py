"""LayerNorm-simple (Xu et al., 2019): LayerNorm without gain and bias."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from graphnorm.checks import check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.registry import register_norm


@register_norm("layernorm_simple")
class LayerNormSimple(NormBase):
    r"""LayerNorm-simple, per node, from `"Understanding and Improving Layer Normalization"
    <https://arxiv.org/abs/1911.07013>`_ (Xu et al., NeurIPS 2019): LayerNorm with the gain and bias removed,

    .. math::
        \mathbf{x}'_i = \frac{\mathbf{x}_i - \mu_i}{\sqrt{\sigma_i^2 + \epsilon}}, \qquad
        \mu_i = \frac{1}{C}\sum_c x_{ic},\; \sigma_i^2 = \frac{1}{C}\sum_c (x_{ic} - \mu_i)^2 .

    Args:
        channels: features per node.
        eps: added to the variance (default 1e-5).

    Raises:
        ValueError: ``eps`` is not a finite number > 0.
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.eps = check_positive(eps, "eps", self._where)

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        return F.layer_norm(x, (self.channels,), None, None, self.eps)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}"
