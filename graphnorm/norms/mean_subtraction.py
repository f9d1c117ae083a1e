"""MeanSubtraction (Yang et al., 2020)."""

from __future__ import annotations

from torch import Tensor, nn

from graphnorm.norms.ops.graph_stats import broadcast_to_nodes, graph_reduce
from graphnorm.norms.ops.input_checks import check_norm_inputs
from graphnorm.norms.ops.precision import upcast
from graphnorm.norms.registry import register_norm


@register_norm("meansubtraction")
class MeanSubtraction(nn.Module):
    r"""Mean subtraction, per graph, from `"Revisiting Over-smoothing in Deep GCNs"
    <https://arxiv.org/abs/2003.13663>`_ (Yang et al., 2020):

    .. math::
        \mathbf{x}'_i = \mathbf{x}_i - \frac{1}{|\mathcal{V}_g|} \sum_{j \in \mathcal{V}_g} \mathbf{x}_j

    where :math:`\mathcal{V}_g` are the nodes of the graph that holds node :math:`i`. No parameters.

    Args:
        channels: features per node.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_norm_inputs(x, batch, batch_size, self.channels, "meansubtraction", per_graph=True)
        if x.size(0) == 0:
            return x.clone()
        wide = upcast(x)  # float32 for half precision: a half sum of rows rounds at 8 or 11 bits
        return (wide - broadcast_to_nodes(graph_reduce(wide, batch, batch_size, "mean"), batch)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}"
