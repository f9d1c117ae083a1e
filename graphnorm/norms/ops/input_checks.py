"""The checks of a norm's forward inputs: features ``x``, the ``batch`` vector and its graph ids
(:func:`check_norm_inputs`, where every norm's forward starts), and SepNorm's ``token_mask``.

Each raises ``TypeError`` for a wrong type and ``ValueError`` for a wrong shape or value, prefixed with ``where`` (the
norm's registry name); the constructors' argument checks are in :mod:`graphnorm.checks`. NaN and Inf in ``x`` are not
checked (that would synchronize the device at every layer): they propagate to the outputs that depend on them (the
row, the graph or its channel, or the batch, depending on the norm), and so do entries whose squares overflow the
compute dtype (above ~1e154 in float64, ~1e19 in float32) in the norms that square them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphnorm.checks import check_count
from graphnorm.norms.ops.graph_stats import num_graphs


def check_norm_inputs(
    x: Tensor, batch: Tensor | None, batch_size: int | None, channels: int, where: str, per_graph: bool = False
) -> None:
    """The checks every norm's forward starts with: ``x`` is a floating-point tensor ``[num_nodes, channels]`` and
    ``batch`` (when given) a 1-D int32 / int64 vector with one entry per row of ``x``. With ``per_graph`` (the norms
    that index per-graph statistics by ``batch``), ``batch_size`` is a non-negative integer or None and ``batch``
    holds graph ids in ``[0, batch_size)``, not necessarily sorted or contiguous (a graph without rows is allowed).

    Raises:
        TypeError: ``x`` is not a floating-point tensor, or ``batch`` not an int32 / int64 tensor.
        ValueError: ``x`` is not 2-D or has another number of columns than ``channels``, ``batch`` is not
            ``[num_nodes]``; with ``per_graph``, a bad ``batch_size`` or graph id.
    """
    _check_features(x, channels, where)
    _check_batch(x, batch, where)
    if per_graph:
        _check_graph_ids(batch, batch_size, where)


def _check_features(x: Tensor, channels: int, where: str) -> None:
    """``x`` must be a floating-point tensor ``[num_nodes, channels]``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{where}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{where}: x must have shape [num_nodes, channels], got shape {tuple(x.shape)}")
    if x.size(1) != channels:
        raise ValueError(f"{where}: built for {channels} channels but x has {x.size(1)} (shape {tuple(x.shape)})")
    if not x.is_floating_point():
        raise TypeError(f"{where}: x must be a floating-point tensor, got {x.dtype}")


def _check_batch(x: Tensor, batch: Tensor | None, where: str) -> None:
    """``batch`` (when given) must be a 1-D int32 / int64 vector with one entry per row of ``x``."""
    if batch is None:
        return
    if not isinstance(batch, Tensor):
        raise TypeError(f"{where}: batch must be a torch.Tensor of graph ids, got {type(batch).__name__}")
    if batch.dim() != 1 or batch.numel() != x.size(0):
        raise ValueError(f"{where}: batch must have shape [num_nodes] = [{x.size(0)}], got shape {tuple(batch.shape)}")
    if batch.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(f"{where}: batch must be an integer tensor, got {batch.dtype}")


def _check_graph_ids(batch: Tensor | None, batch_size: int | None, where: str) -> None:
    """``batch_size`` must be a non-negative integer or None, and a (shape-checked) ``batch`` hold graph ids in
    ``[0, batch_size)``."""
    if batch_size is not None:
        check_count(batch_size, "batch_size", where, 0, "a non-negative integer or None")
    if batch is None or batch.numel() == 0:
        return
    if batch.device.type == "meta":
        raise ValueError(f"{where}: batch is on the meta device (it has no graph ids); pass CPU or GPU tensors")
    low, high = (value.item() for value in torch.aminmax(batch))
    if low < 0:
        raise ValueError(f"{where}: batch holds a negative graph id ({low}); graph ids are 0, 1, ..., batch_size - 1")
    if batch_size is not None and high >= batch_size:
        raise ValueError(f"{where}: batch names graph {high} but batch_size is {batch_size} (ids must be < batch_size)")


def check_token_mask(
    x: Tensor, batch: Tensor | None, token_mask: Tensor | None, batch_size: int | None = None, where: str = "norm"
) -> None:
    """``token_mask`` must be a bool vector ``[num_nodes]`` marking exactly one row per graph.

    Raises:
        TypeError: ``token_mask`` is not a bool tensor.
        ValueError: it is missing, has the wrong shape, or a graph has no token row or several.
    """
    if token_mask is None:
        raise ValueError(f"{where}: token_mask is required (a bool vector marking one graph-token row per graph)")
    if not isinstance(token_mask, Tensor) or token_mask.dtype != torch.bool:
        got = token_mask.dtype if isinstance(token_mask, Tensor) else type(token_mask).__name__
        raise TypeError(f"{where}: token_mask must be a bool tensor, got {got}")
    if token_mask.dim() != 1 or token_mask.numel() != x.size(0):
        raise ValueError(
            f"{where}: token_mask must have shape [num_nodes] = [{x.size(0)}], got shape {tuple(token_mask.shape)}"
        )
    if token_mask.device.type == "meta":
        raise ValueError(f"{where}: token_mask is on the meta device (it has no values); pass CPU or GPU tensors")
    graphs = num_graphs(batch, batch_size)
    if batch is None:
        token_graph = torch.zeros(int(token_mask.sum()), dtype=torch.long, device=x.device)
    else:
        token_graph = batch[token_mask]  # graph id of each token row
    if token_graph.numel() > 0 and int(token_graph.max()) >= graphs:
        raise ValueError(f"{where}: batch names graph {int(token_graph.max())} but batch_size is {graphs}")
    tokens_per_graph = torch.bincount(token_graph, minlength=graphs)  # [num_graphs]
    bad = (tokens_per_graph != 1).nonzero().flatten()
    if bad.numel() > 0:
        g = int(bad[0])
        raise ValueError(
            f"{where}: token_mask must mark exactly one token row per graph; graph {g} has "
            f"{int(tokens_per_graph[g])} ({bad.numel()} of {graphs} graphs are malformed)"
        )
