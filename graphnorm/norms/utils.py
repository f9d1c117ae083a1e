"""Shared helpers for per-graph statistics in mini-batches (PyG ``batch`` vector convention)."""

from __future__ import annotations

import math

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


def check_positive(value: float, what: str, name: str = "norm") -> float:
    """A finite, strictly positive number (hyper-parameters such as ``eps`` or ``scale``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: {what} must be a finite number > 0, got {value!r}")
    return float(value)


def check_choice(value: str, choices: tuple[str, ...], what: str, name: str = "norm") -> str:
    """``value`` must be one of ``choices``; the error lists them."""
    if value not in choices:
        raise ValueError(f"{name}: unknown {what} {value!r}; valid choices: {', '.join(choices)}")
    return value


def check_token_mask(
    x: Tensor, batch: Tensor | None, token_mask: Tensor | None, batch_size: int | None = None, name: str = "norm"
) -> None:
    """``token_mask`` must be a bool vector ``[num_nodes]`` marking exactly one row per graph."""
    if token_mask is None:
        raise ValueError(f"{name}: token_mask is required (a bool vector marking one graph-token row per graph)")
    if not isinstance(token_mask, Tensor) or token_mask.dtype != torch.bool:
        got = token_mask.dtype if isinstance(token_mask, Tensor) else type(token_mask).__name__
        raise TypeError(f"{name}: token_mask must be a bool tensor, got {got}")
    if token_mask.dim() != 1 or token_mask.numel() != x.size(0):
        raise ValueError(
            f"{name}: token_mask must have shape [num_nodes] = [{x.size(0)}], got shape {tuple(token_mask.shape)}"
        )
    graphs = num_graphs(batch, batch_size)
    if batch is None:
        token_graph = torch.zeros(int(token_mask.sum()), dtype=torch.long, device=x.device)
    else:
        token_graph = batch[token_mask]  # graph id of each token row
    if token_graph.numel() > 0 and int(token_graph.max()) >= graphs:
        raise ValueError(f"{name}: batch names graph {int(token_graph.max())} but batch_size is {graphs}")
    tokens_per_graph = torch.bincount(token_graph, minlength=graphs)  # [num_graphs]
    bad = (tokens_per_graph != 1).nonzero().flatten()
    if bad.numel() > 0:
        g = int(bad[0])
        raise ValueError(
            f"{name}: token_mask must mark exactly one token row per graph; graph {g} has "
            f"{int(tokens_per_graph[g])} ({bad.numel()} of {graphs} graphs are malformed)"
        )


def row_mean_var(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row mean and population variance, ``[N, C] -> ([N, 1], [N, 1])``.

    Two-pass (centered) like ``torch.var``, but built from ``mean`` and ``vector_norm``, which are several times
    faster than ``torch.var(dim=1)`` on CPU for wide tall matrices (this matters for the element-wise norms).
    """
    mean = x.mean(dim=1, keepdim=True)
    var = torch.linalg.vector_norm(x - mean, dim=1, keepdim=True).square() / x.size(1)
    return mean, var
