"""MeanSubtraction (Yang et al., 2020)."""

from __future__ import annotations

from torch import Tensor

from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.graph_stats import broadcast_to_nodes, graph_reduce
from graphnorm.norms.registry import register_norm


@register_norm("meansubtraction")
class MeanSubtraction(NormBase):
    r"""Mean subtraction, per graph, from `"Revisiting Over-smoothing in Deep GCNs"
    <https://arxiv.org/abs/2003.13663>`_ (Yang et al., 2020):

    .. math::
        \mathbf{x}'_i = \mathbf{x}_i - \frac{1}{|\mathcal{V}_g|} \sum_{j \in \mathcal{V}_g} \mathbf{x}_j

    where :math:`\mathcal{V}_g` are the nodes of the graph that holds node :math:`i`. No parameters.

    Args:
        channels: features per node.
    """

    per_graph = True
    centers_each_graph = True

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        return x - broadcast_to_nodes(graph_reduce(x, batch, batch_size, "mean"), batch)

    def extra_repr(self) -> str:
        return f"{self.channels}"
