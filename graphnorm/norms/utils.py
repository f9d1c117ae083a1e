"""Shared helpers for per-graph statistics in mini-batches (PyG ``batch`` vector convention)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter


def check_features(x: Tensor, channels: int | None = None, name: str = "norm") -> None:
    """Validate a node-major feature matrix ``[num_nodes, channels]``; clear errors instead of deep torch ones."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name}: x must have shape [num_nodes, channels], got shape {tuple(x.shape)}")
    if channels is not None and x.size(1) != channels:
        raise ValueError(f"{name}: built for {channels} channels but x has {x.size(1)} (shape {tuple(x.shape)})")
    if not x.is_floating_point():
        raise TypeError(f"{name}: x must be a floating-point tensor, got {x.dtype}")


def check_batch(x: Tensor, batch: Tensor | None, name: str = "norm") -> None:
    """``batch`` must be a 1-D integer vector with one entry per row of ``x``."""
    if batch is None:
        return
    if batch.dim() != 1 or batch.numel() != x.size(0):
        raise ValueError(f"{name}: batch must have shape [num_nodes] = [{x.size(0)}], got shape {tuple(batch.shape)}")
    if batch.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(f"{name}: batch must be an integer tensor, got {batch.dtype}")


def num_graphs(batch: Tensor | None, batch_size: int | None = None) -> int:
    """Number of graphs described by ``batch`` (``batch_size`` wins when given, as in PyG)."""
    if batch_size is not None:
        return int(batch_size)
    if batch is None:
        return 1
    return int(batch.max()) + 1 if batch.numel() > 0 else 0


def graph_reduce(x: Tensor, batch: Tensor | None, batch_size: int | None = None, reduce: str = "mean") -> Tensor:
    """Per-graph reduction of node rows: ``[num_nodes, C] -> [num_graphs, C]``.

    Without ``batch`` all rows form one graph. Graphs with no nodes give 0.
    """
    if batch is None:
        if reduce == "mean":
            return x.mean(dim=0, keepdim=True) if x.size(0) > 0 else x.new_zeros(1, x.size(1))
        if reduce == "sum":
            return x.sum(dim=0, keepdim=True)
        raise ValueError(f"unsupported reduce {reduce!r}")
    return scatter(x, batch, dim=0, dim_size=num_graphs(batch, batch_size), reduce=reduce)


def broadcast_to_nodes(per_graph: Tensor, batch: Tensor | None) -> Tensor:
    """Gather per-graph rows ``[num_graphs, C]`` back to nodes ``[num_nodes, C]`` (or broadcastable ``[1, C]``)."""
    if batch is None:
        return per_graph
    return per_graph.index_select(0, batch)
