"""The one check of a graph's ``edge_index`` (and ``batch`` vector) that models and preprocessing share."""

from __future__ import annotations

from torch import Tensor


def check_edge_index(edge_index: Tensor, num_nodes: int, batch: Tensor | None = None, where: str = "") -> None:
    """``ValueError`` for an ``edge_index`` that is not ``[2, num_edges]`` or holds node ids outside
    ``[0, num_nodes)``, or a ``batch`` that is not ``[num_nodes]``; ``where`` prefixes the message."""
    prefix = f"{where}: " if where else ""
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{prefix}edge_index must have shape [2, num_edges], got {tuple(edge_index.shape)}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(
            f"{prefix}edge_index holds node ids in [{int(edge_index.min())}, {int(edge_index.max())}], outside "
            f"[0, {num_nodes}) for a graph of {num_nodes} nodes"
        )
    if batch is not None and (batch.dim() != 1 or batch.numel() != num_nodes):
        raise ValueError(f"{prefix}batch must have shape [num_nodes] = [{num_nodes}], got {tuple(batch.shape)}")
