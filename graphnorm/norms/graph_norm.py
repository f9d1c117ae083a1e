"""GraphNorm (Cai et al., 2021), per graph."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphnorm.checks import check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.graph_stats import graph_center_scale, graph_reduce, graph_variance
from graphnorm.norms.ops.parameters import UnwrappedPyGNorm, register_affine, reset_affine
from graphnorm.norms.ops.precision import cast
from graphnorm.norms.registry import register_norm


@register_norm("graphnorm")
class GraphNorm(UnwrappedPyGNorm, NormBase):
    r"""GraphNorm, per graph, from `"GraphNorm: A Principled Approach to Accelerating Graph Neural Network Training"
    <https://arxiv.org/abs/2009.03294>`_ (Cai et al., ICML 2021), for each graph :math:`g` and channel:

    .. math::
        \boldsymbol\mu_{g} = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g} \mathbf{x}_j, \quad
        \boldsymbol\sigma^2_{g} = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g}
        (\mathbf{x}_j - \boldsymbol\alpha \odot \boldsymbol\mu_g)^2, \quad
        \mathbf{x}'_i = \boldsymbol\gamma \odot \frac{\mathbf{x}_i - \boldsymbol\alpha \odot \boldsymbol\mu_g}
        {\sqrt{\boldsymbol\sigma^2_g + \epsilon}} + \boldsymbol\beta

    with learnable mean shift :math:`\boldsymbol\alpha` (``mean_scale``, init 1), gain :math:`\boldsymbol\gamma`
    (``weight``, init 1) and bias :math:`\boldsymbol\beta` (``bias``, init 0); the same statistics in train and eval
    mode. The variance is taken around the shifted mean, as in the paper's Eq. 8 and
    :class:`torch_geometric.nn.norm.GraphNorm` (same parameters and outputs; tested against it); state dicts with the
    keys of a wrapped PyG module (``module.weight``, ...) load too. The statistics are accumulated over row chunks
    (:mod:`graphnorm.norms.ops.graph_stats`), so the forward allocates one full-size tensor, the output.

    Args:
        channels: features per node.
        eps: added to the variance (default 1e-5).

    Raises:
        ValueError: ``eps`` is not a finite number > 0.
    """

    per_graph = True

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.eps = check_positive(eps, "eps", "graphnorm")
        register_affine(self, channels, affine=True)
        self.mean_scale = nn.Parameter(torch.empty(channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self)
        nn.init.ones_(self.mean_scale)

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        weight, bias, mean_scale = (cast(p, x.dtype) for p in (self.weight, self.bias, self.mean_scale))
        center = graph_reduce(x, batch, batch_size, "mean") * mean_scale  # alpha * mu_g, [num_graphs, C]
        var = graph_variance(x, center, batch, batch_size)
        # gamma / sqrt(var + eps) folded per graph ([num_graphs, C]) before it meets the [N, C] rows
        return graph_center_scale(x, center, weight * (var + self.eps).rsqrt(), batch, bias)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}"
