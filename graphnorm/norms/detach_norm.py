"""DetachNorm (Xu et al., 2019): LayerNorm-simple with mean and std detached from the gradient."""

from __future__ import annotations

import torch
from torch import Tensor

from graphnorm.norms.layer_norm_simple import LayerNormSimple
from graphnorm.norms.ops.graph_stats import row_mean_var
from graphnorm.norms.registry import register_norm


@register_norm("detachnorm")
class DetachNorm(LayerNormSimple):
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

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        # Statistics from a detached view: no graph is built through them at all.
        mean, var = row_mean_var(x.detach())  # [num_nodes, 1] each
        inv_std = (var + self.eps).rsqrt()
        # (x - mean) * inv_std as one fused pass: x * inv_std + (-mean * inv_std)
        return torch.addcmul(-mean * inv_std, x, inv_std)
