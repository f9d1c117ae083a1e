"""LayerNorm (Ba et al., 2016): per node (transformer style) or per graph (PyG ``mode="graph"``)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from graphnorm.checks import check_choice, check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.graph_stats import graph_center_scale, graph_centered_sq_sum, graph_reduce, graph_sizes
from graphnorm.norms.ops.parameters import register_affine, reset_affine
from graphnorm.norms.ops.precision import cast
from graphnorm.norms.registry import register_norm


@register_norm("layernorm")
class LayerNorm(NormBase):
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

    @property
    def per_graph(self) -> bool:
        """Whether the statistics are per graph (``mode="graph"``), so the graph ids are checked."""
        return self.mode == "graph"

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        weight, bias = cast(self.weight, x.dtype), cast(self.bias, x.dtype)
        if self.mode == "node":
            return F.layer_norm(x, (self.channels,), weight, bias, self.eps)
        # Mean over a graph's nodes, then over channels, is the mean over all its entries (equal weights).
        mean = graph_reduce(x, batch, batch_size, "mean").mean(dim=1, keepdim=True)  # [num_graphs, 1]
        # Two-pass variance around mu_g, accumulated over row chunks (no [N, C] temporary).
        sq_sum = graph_centered_sq_sum(x, mean, batch, batch_size).sum(dim=1, keepdim=True)  # [num_graphs, 1]
        scale = (sq_sum / (graph_sizes(x, batch, batch_size) * x.size(1)) + self.eps).rsqrt()  # [num_graphs, 1]
        if self.affine:
            scale = scale * weight  # gamma folded in per graph ([num_graphs, C]), not per node
        # (x - mu_g) * scale + beta in one pass that allocates only the output
        return graph_center_scale(x, mean, scale, batch, bias)

    def extra_repr(self) -> str:
        return f"{self.channels}, mode={self.mode!r}, eps={self.eps}, affine={self.affine}"
