"""MeanSubtraction (Yang et al., 2020)."""

from __future__ import annotations

from torch import Tensor, nn

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import broadcast_to_nodes, check_batch, check_features, check_graph_ids, graph_reduce, upcast


@register_norm("meansubtraction")
class MeanSubtraction(nn.Module):
    r"""Mean subtraction per graph, from `"Revisiting Over-smoothing in Deep GCNs"
    <https://arxiv.org/abs/2003.13663>`_ (Yang et al., 2020):

    .. math::
        \mathbf{x}'_i = \mathbf{x}_i - \frac{1}{|\mathcal{V}_g|} \sum_{j \in \mathcal{V}_g} \mathbf{x}_j

    where :math:`\mathcal{V}_g` are the nodes of the graph that holds node :math:`i`.

    float16 / bfloat16 input is computed in float32 and returned in its own dtype.
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
        check_features(x, self.channels, "meansubtraction")
        check_batch(x, batch, "meansubtraction")
        check_graph_ids(batch, batch_size, "meansubtraction")
        if x.size(0) == 0:
            return x.clone()
        wide = upcast(x)  # float32 for half precision: a half sum of rows rounds at 8 or 11 bits
        return (wide - broadcast_to_nodes(graph_reduce(wide, batch, batch_size, "mean"), batch)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}"
