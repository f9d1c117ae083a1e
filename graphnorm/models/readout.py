"""The graph-level readout that the message-passing models share: the batch vector of a graph-level call and the
``"mean"`` / ``"sum"`` pooling of each graph's rows, used by :mod:`graphnorm.models.gcn`,
:mod:`~graphnorm.models.gcnii` and :mod:`~graphnorm.models.gin`. DeepGCN's ``"virtual"`` readout (the virtual-node
row) and the linear heads are in the models themselves."""

from __future__ import annotations

from torch import Tensor
from torch_geometric.nn import global_add_pool, global_mean_pool


def graph_level_batch(readout: str | None, batch: Tensor | None, edge_index: Tensor, num_nodes: int) -> Tensor | None:
    """``batch`` as given; a graph-level model (``readout`` set) called without one reads all rows as one graph."""
    if readout is not None and batch is None:
        return edge_index.new_zeros(num_nodes)
    return batch


def pool_graphs(h: Tensor, batch: Tensor, batch_size: int | None, readout: str) -> Tensor:
    """The ``"mean"`` or ``"sum"`` readout of the rows of each graph: ``[N, C] -> [num_graphs, C]``."""
    pool = global_mean_pool if readout == "mean" else global_add_pool
    return pool(h, batch, batch_size)
