"""The rows and edges every layer of one call shares, validated and built once: which rows are node or token rows,
the graph of every node row, and the edges between node rows (:class:`_RowStructure`); and the checks of a layer's
shape."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from graphnorm.analysis.metrics import check_matrix
from graphnorm.checks import check_edge_index
from graphnorm.edges import symmetric_upward_keys


def _numpy(tensor: Tensor | None) -> np.ndarray | None:
    """A NumPy view of a CPU tensor (None stays None)."""
    return None if tensor is None else tensor.numpy()


@dataclass
class _RowStructure:
    """Validated context of one probe, computed once for all layers: which rows are node / token rows, the
    graph of every node row, and the edge structure between node rows."""

    num_rows: int
    node_rows: Tensor | None  # indices of node rows in x (None: all rows)
    token_rows: Tensor | None  # indices of token rows (None: no token rows)
    batch: Tensor | None  # graph id per node row (None: one graph, stat "value")
    num_graphs: int
    node_counts: Tensor | None  # [num_graphs] float64
    # Edges between node rows (node-row indices), self-loops dropped (they add nothing to either edge metric).
    # When the edge multiset is symmetric (undirected graphs stored both ways) only one direction of each pair
    # is kept and edge_both_ways is set: every sum over edges then counts each kept edge for both directions.
    edge_source: Tensor | None
    edge_target: Tensor | None
    edge_graph: Tensor | None  # graph of each kept edge (batched input)
    edge_both_ways: bool

    # NumPy views for the edge metrics (set from the fields above): endpoints, graphs, node rows per graph.
    edge_source_np: np.ndarray | None = field(init=False)
    edge_target_np: np.ndarray | None = field(init=False)
    edge_graph_np: np.ndarray | None = field(init=False)
    batch_np: np.ndarray | None = field(init=False)
    node_counts_np: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.edge_source_np, self.edge_target_np = _numpy(self.edge_source), _numpy(self.edge_target)
        self.edge_graph_np, self.batch_np = _numpy(self.edge_graph), _numpy(self.batch)
        counts = self.node_counts if self.node_counts is not None else torch.tensor([float(self.num_node_rows)])
        self.node_counts_np = counts.to(torch.float64).numpy()

    @property
    def num_edges(self) -> int:
        """Kept edges (one direction per pair when edge_both_ways)."""
        return 0 if self.edge_source is None else self.edge_source.numel()

    @property
    def num_node_rows(self) -> int:
        """Rows that are not token rows."""
        return self.num_rows if self.node_rows is None else int(self.node_rows.numel())


def _row_structure(n: int, edge_index: Tensor | None, batch: Tensor | None, token_mask: Tensor | None) -> _RowStructure:
    """Validate the probe's context (``edge_index``, ``batch``, ``token_mask`` over ``n`` rows) and build the
    :class:`_RowStructure` every layer shares."""
    if edge_index is not None:
        check_edge_index(edge_index, n, where="collapse_metrics")
        edge_index = edge_index.to("cpu", torch.long)
    if batch is not None:
        _check_row_vector(batch, n, "batch")
        if batch.is_floating_point() or (batch.numel() and int(batch.min()) < 0):
            raise ValueError("collapse_metrics: batch must hold non-negative integer graph ids")
        batch = batch.to("cpu", torch.long)
    node_rows = token_rows = None
    if token_mask is not None:
        _check_row_vector(token_mask, n, "token_mask")
        token_mask = token_mask.to("cpu", torch.bool)
        if token_mask.any():
            token_rows, node_rows, batch, edge_index = _without_token_rows(token_mask, batch, edge_index)
    num_node_rows = n if node_rows is None else int(node_rows.numel())
    num_graphs, node_counts = 1, None
    if batch is not None:
        num_graphs = int(batch.max()) + 1 if batch.numel() else 0
        node_counts = torch.bincount(batch, minlength=num_graphs).to(torch.float64)
    edge_source = edge_target = edge_graph = None
    both_ways = False
    if edge_index is not None:
        edge_source, edge_target, both_ways = _kept_edges(edge_index, num_node_rows)
        if batch is not None:
            edge_graph = batch.index_select(0, edge_source)
    return _RowStructure(
        n, node_rows, token_rows, batch, num_graphs, node_counts, edge_source, edge_target, edge_graph, both_ways
    )


def _check_row_vector(value: object, n: int, name: str) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a tensor of shape [n] (one entry per row)."""
    if not isinstance(value, Tensor) or value.dim() != 1 or value.numel() != n:
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"collapse_metrics: {name} must have shape [n] = [{n}], got {shape}")


def _without_token_rows(
    token_mask: Tensor, batch: Tensor | None, edge_index: Tensor | None
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """The token rows and node rows of ``token_mask`` [n], and ``batch`` and ``edge_index`` over the node rows alone
    (node-row indices; the edges touching a token row dropped)."""
    n = token_mask.numel()
    token_rows = token_mask.nonzero().flatten()
    keep = ~token_mask
    node_rows = keep.nonzero().flatten()
    if batch is not None:
        batch = batch[keep]
    if edge_index is not None:
        new_index = torch.full((n,), -1, dtype=torch.long)
        new_index[node_rows] = torch.arange(node_rows.numel())
        edge_index = new_index[edge_index[:, keep[edge_index[0]] & keep[edge_index[1]]]]
    return token_rows, node_rows, batch, edge_index


def _kept_edges(edge_index: Tensor, num_node_rows: int) -> tuple[Tensor, Tensor, bool]:
    """Source and target of the edges the edge metrics sum over, self-loops dropped, and whether the edges are
    symmetric: then only the upward direction of each pair is kept (see :class:`_RowStructure`)."""
    off_diagonal = edge_index[0] != edge_index[1]
    edge_source, edge_target = edge_index[0, off_diagonal], edge_index[1, off_diagonal]
    # The kept upward edges come out sorted by source, so the edge metrics read the source rows in order (fewer
    # cache misses on large graphs; the sums only change order).
    upward_keys = symmetric_upward_keys(edge_source, edge_target, num_node_rows)
    if upward_keys is not None:
        edge_source, edge_target = upward_keys // num_node_rows, upward_keys % num_node_rows
    return edge_source.contiguous(), edge_target.contiguous(), upward_keys is not None


def _check_layer(x: Tensor, n: int | None, position: int | None) -> None:
    """``TypeError`` / ``ValueError`` naming layer ``position`` unless ``x`` is a real [n, d] tensor with rows and
    columns (``n`` rows when given)."""
    where = "" if position is None else f" (layer {position})"
    check_matrix(x, "collapse_metrics", where)
    if n is not None and x.size(0) != n:
        raise ValueError(f"collapse_metrics: every layer must have the same {n} rows, got {x.size(0)}{where}")
