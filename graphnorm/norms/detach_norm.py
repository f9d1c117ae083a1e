"""DetachNorm (Xu et al., 2019): LayerNorm-simple with mean and std detached from the gradient."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphnorm.checks import check_positive
from graphnorm.norms.ops.graph_stats import row_mean_var
from graphnorm.norms.ops.input_checks import check_norm_inputs
from graphnorm.norms.ops.precision import upcast
from graphnorm.norms.registry import register_norm


@register_norm("detachnorm")
class DetachNorm(nn.Module):
    r"""DetachNorm, per node, from `"Understanding and Improving Layer Normalization"
    <https://arxiv.org/abs/1911.07013>`_ (Xu et al., NeurIPS 2019): the paper's probe showing that the gradients
    through the mean and variance matter. The forward is LayerNorm-simple's,

    .. math::
        \mathbf{x}'_i = \frac{\mathbf{x}_i - [\mu_i]_{\text{detach}}}{[\sigma_i]_{\text{detach}}}, \qquad
        \sigma_i = \sqrt{\tfrac{1}{C}\textstyle\sum_c (x_{ic} - \mu_i)^2 + \epsilon},

    but :math:`\mu_i` and :math:`\sigma_i` are constants for back-propagation, so
    :math:`\partial \mathbf{x}'_i / \partial \mathbf{x}_i = I / \sigma_i`. No gain or bias.

    Args:
        channels: features per node.
        eps: added to the variance (default 1e-5).

    Raises:
        ValueError: ``eps`` is not a finite number > 0.
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.eps = check_positive(eps, "eps", "detachnorm")

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_norm_inputs(x, batch, batch_size, self.channels, "detachnorm")
        if x.size(0) == 0:
            return x.clone()
        wide = upcast(x)  # float32 for half precision: a half sum of squares overflows past 65504
        # Statistics from a detached view: no graph is built through them at all.
        mean, var = row_mean_var(wide.detach())  # [num_nodes, 1] each
        inv_std = (var + self.eps).rsqrt()
        # (x - mean) * inv_std as one fused pass: x * inv_std + (-mean * inv_std)
        return torch.addcmul(-mean * inv_std, wide, inv_std).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}"
