"""LayerNorm (Ba et al., 2016): per node (transformer style) or per graph (PyG ``mode="graph"``)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from graphnorm.checks import check_choice, check_positive
from graphnorm.norms.ops.graph_stats import graph_center_scale, graph_centered_sq_sum, graph_reduce, graph_sizes
from graphnorm.norms.ops.input_checks import check_norm_inputs
from graphnorm.norms.ops.parameters import register_affine, reset_affine
from graphnorm.norms.ops.precision import cast, upcast
from graphnorm.norms.registry import register_norm


@register_norm("layernorm")
class LayerNorm(nn.Module):
    r"""Layer normalization, from `"Layer Normalization" <https://arxiv.org/abs/1607.06450>`_ (Ba et al., 2016).

    ``mode="node"`` (transformer style), over the :math:`C` channels of each node:

    .. math::
        \mathbf{x}'_i = \boldsymbol\gamma \odot \frac{\mathbf{x}_i - \mu_i}{\sqrt{\sigma_i^2 + \epsilon}}
        + \boldsymbol\beta, \qquad \mu_i = \frac{1}{C}\sum_c x_{ic},\;
        \sigma_i^2 = \frac{1}{C}\sum_c (x_{ic} - \mu_i)^2

    ``mode="graph"`` (:class:`torch_geometric.nn.norm.LayerNorm`'s ``mode="graph"``), one mean and variance over all
    nodes and channels of each graph :math:`g`:

    .. math::
        \mathbf{x}'_i = \boldsymbol\gamma \odot \frac{\mathbf{x}_i - \mu_g}{\sqrt{\sigma_g^2 + \epsilon}}
        + \boldsymbol\beta, \qquad \mu_g = \frac{1}{|\mathcal{V}_g| C}\sum_{j \in \mathcal{V}_g}\sum_c x_{jc},\;
        \sigma_g^2 = \frac{1}{|\mathcal{V}_g| C}\sum_{j \in \mathcal{V}_g}\sum_c (x_{jc} - \mu_g)^2

    Unlike PyG, which divides by ``std + eps`` when ``batch`` is None but by ``sqrt(var + eps)`` otherwise, it is
    always ``sqrt(var + eps)``: a lone graph gives the same output with or without a batch vector.

    Args:
        channels: features per node.
        mode: ``"node"`` (default) or ``"graph"``.
        eps: added to the variance (default 1e-5).
        affine: learn the gain :math:`\boldsymbol\gamma` (init 1) and bias :math:`\boldsymbol\beta` (init 0)
            (default True).

    Raises:
        ValueError: an unknown ``mode``, or ``eps`` not a finite number > 0.
    """

    def __init__(self, channels: int, mode: str = "node", eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__()
        self.channels = channels
        self.mode = check_choice(mode, ("node", "graph"), "mode", "layernorm")
        self.eps = check_positive(eps, "eps", "layernorm")
        self.affine = affine
        register_affine(self, channels, affine)

    def reset_parameters(self) -> None:
        reset_affine(self)

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_norm_inputs(x, batch, batch_size, self.channels, "layernorm", per_graph=self.mode == "graph")
        if x.size(0) == 0:
            return x.clone()
        wide = upcast(x)  # float32 for half precision: half sums of squares overflow past 65504
        weight, bias = cast(self.weight, wide.dtype), cast(self.bias, wide.dtype)
        if self.mode == "node":
            return F.layer_norm(wide, (self.channels,), weight, bias, self.eps).to(x.dtype)
        # Mean over a graph's nodes, then over channels, is the mean over all its entries (equal weights).
        mean = graph_reduce(wide, batch, batch_size, "mean").mean(dim=1, keepdim=True)  # [num_graphs, 1]
        # Two-pass variance around mu_g, accumulated over row chunks (no [N, C] temporary).
        sq_sum = graph_centered_sq_sum(wide, mean, batch, batch_size).sum(dim=1, keepdim=True)  # [num_graphs, 1]
        scale = (sq_sum / (graph_sizes(wide, batch, batch_size) * x.size(1)) + self.eps).rsqrt()  # [num_graphs, 1]
        if self.affine:
            scale = scale * weight  # gamma folded in per graph ([num_graphs, C]), not per node
        # (x - mu_g) * scale + beta in one pass that allocates only the output
        return graph_center_scale(wide, mean, scale, batch, bias).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, mode={self.mode!r}, eps={self.eps}, affine={self.affine}"
