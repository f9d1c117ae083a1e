"""Per-graph and per-row reductions of node features, in PyG's ``batch`` vector convention.

A mini-batch holds several graphs' node rows; ``batch[i]`` is the graph of row ``i`` (without ``batch`` all rows are
one graph). The per-graph sums that must not allocate a full-size temporary are in :mod:`graphnorm.norms.chunked_ops`.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter


def num_graphs(batch: Tensor | None, batch_size: int | None = None) -> int:
    """Number of graphs described by ``batch`` (``batch_size`` wins when given, as in PyG; 1 without ``batch``)."""
    if batch_size is not None:
        return int(batch_size)
    if batch is None:
        return 1
    return int(batch.max()) + 1 if batch.numel() > 0 else 0


def graph_reduce(x: Tensor, batch: Tensor | None, batch_size: int | None = None, reduce: str = "mean") -> Tensor:
    """Per-graph ``reduce`` (``"mean"``, ``"sum"``; with ``batch`` any of PyG's ``scatter``) of the node rows:
    ``[num_nodes, C] -> [num_graphs, C]``. A graph with no nodes gives 0.

    Raises:
        ValueError: ``batch`` is None and ``reduce`` is neither ``"mean"`` nor ``"sum"``.
    """
    if batch is None:
        if reduce == "mean":
            return x.mean(dim=0, keepdim=True) if x.size(0) > 0 else x.new_zeros(1, x.size(1))
        if reduce == "sum":
            return x.sum(dim=0, keepdim=True)
        raise ValueError(f"unsupported reduce {reduce!r}")
    return scatter(x, batch, dim=0, dim_size=num_graphs(batch, batch_size), reduce=reduce)


def broadcast_to_nodes(per_graph: Tensor, batch: Tensor | None) -> Tensor:
    """Per-graph rows ``[num_graphs, C]`` gathered back to the nodes: ``[num_nodes, C]`` (without ``batch``, the
    ``[1, C]`` input itself, which broadcasts)."""
    if batch is None:
        return per_graph
    return per_graph.index_select(0, batch)


def graph_sizes(x: Tensor, batch: Tensor | None, batch_size: int | None = None) -> Tensor:
    """Rows per graph as ``[num_graphs, 1]`` in ``x``'s dtype, at least 1 (an empty graph's sums are 0)."""
    if batch is None:
        return x.new_full((1, 1), max(1, x.size(0)))
    graphs = num_graphs(batch, batch_size)
    counts = torch.bincount(batch, minlength=graphs)[:graphs]
    return counts.clamp_(min=1).to(x.dtype).unsqueeze(1)


def row_mean_var(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row mean and population variance, ``[N, C] -> ([N, 1], [N, 1])``.

    Two-pass (centered) like ``torch.var``, but built from ``mean`` and ``vector_norm``, which are faster than
    ``torch.var(dim=1)`` on CPU for tall wide matrices (the element-wise norms call it at every layer).
    """
    mean = x.mean(dim=1, keepdim=True)
    var = torch.linalg.vector_norm(x - mean, dim=1, keepdim=True).square() / x.size(1)
    return mean, var
