"""Per-graph and per-row statistics of node features, in PyG's ``batch`` vector convention.

A mini-batch holds several graphs' node rows; ``batch[i]`` is the graph of row ``i`` (without ``batch`` all rows are
one graph). The plain reductions come first; then the per-graph sums and the centre-and-scale step of the per-graph
norms (GraphNorm, InstanceNorm, PairNorm, LayerNorm ``mode="graph"``), which walk ``x`` in row chunks that stay in
cache: a fresh ``[N, C]`` tensor page-faults on its first write and costs about a copy of ``x``, while a pass that only
reads ``x`` is much cheaper. They are custom ``torch.autograd.Function`` s with chunked backwards, so such a norm
allocates one full-size tensor: its output.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
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


# --- chunked per-graph sums: one full-size allocation per norm, the output ---------------------------------------

CHUNK_ELEMENTS = 1 << 16  # 256 KiB of float32 per temporary: stays in L2 and in glibc's reused heap


def row_chunks(x: Tensor) -> list[slice]:
    """Row slices of ``x`` covering it in order, each with about ``CHUNK_ELEMENTS`` entries."""
    rows = max(1, CHUNK_ELEMENTS // max(1, x.size(1)))
    return [slice(start, min(start + rows, x.size(0))) for start in range(0, x.size(0), rows)]


def _graph_rows(per_graph: Tensor, batch: Tensor | None, rows: slice) -> Tensor:
    """Per-graph rows gathered for the nodes ``rows`` (broadcastable ``[1, *]`` without ``batch``)."""
    return per_graph if batch is None else per_graph.index_select(0, batch[rows])


class _GraphCenteredSqSum(torch.autograd.Function):
    """Per graph and channel ``sum_i (x_i - center[g])**2`` over row chunks, with a chunked backward.

    A custom Function because autograd through row-slice views of ``x`` would build a zero-filled full-size
    gradient per chunk in the backward (hundreds of ``[N, C]`` tensors).
    """

    @staticmethod
    def forward(ctx, x, center, batch, graphs):  # noqa: ANN001, ANN205 (autograd.Function signature)
        total = x.new_zeros(graphs, x.size(1))
        for rows in row_chunks(x):
            diff = x[rows] - _graph_rows(center, batch, rows)  # [chunk, C], in cache
            if batch is None:
                total.add_((diff * diff).sum(0, keepdim=True))
            else:
                total.index_add_(0, batch[rows], diff * diff)
        ctx.save_for_backward(x, center, batch)
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_total):  # noqa: ANN001, ANN205
        x, center, batch = ctx.saved_tensors
        need_x, need_center, _, _ = ctx.needs_input_grad
        grad_x = torch.empty_like(x)  # d total / d x_i = 2 (x_i - center[g]) per channel
        for rows in row_chunks(x):
            chunk = grad_x[rows]  # a view: written in place
            torch.sub(x[rows], _graph_rows(center, batch, rows), out=chunk)
            chunk.mul_(_graph_rows(grad_total, batch, rows)).mul_(2.0)
        grad_center = None
        if need_center:  # d total / d center[g] = -sum over the graph's rows of the above
            grad_center = graph_reduce(grad_x, batch, center.size(0), "sum").neg_()
            grad_center = grad_center.sum(1, keepdim=True) if center.size(1) == 1 else grad_center
        return grad_x if need_x else None, grad_center, None, None


def graph_centered_sq_sum(x: Tensor, center: Tensor, batch: Tensor | None, batch_size: int | None = None) -> Tensor:
    """Per graph and channel, the sum over the graph's rows of ``(x - center[g])**2``: ``[num_graphs, C]``.

    ``center`` is ``[num_graphs, C]`` or ``[num_graphs, 1]`` (``[1, *]`` without ``batch``). Two-pass around the
    given center (numerically sound, unlike E[x^2] - E[x]^2), accumulated over row chunks in cache so no
    ``[N, C]`` temporary is allocated; differentiable (hand-written chunked backward).
    """
    graphs = num_graphs(batch, batch_size) if batch is not None else 1
    dtype = torch.promote_types(x.dtype, center.dtype)
    return _GraphCenteredSqSum.apply(x.to(dtype), center.to(dtype), batch, graphs)


class _GraphCenterScale(torch.autograd.Function):
    """``(x - center[batch]) * scale[batch] + bias``, written chunk by chunk into one preallocated output.

    A custom Function because autograd cannot record writes into slices of one output without copying the whole
    gradient per slice, and concatenating chunk results keeps them all alive (a second full-size allocation).
    The backward is chunked the same way and allocates one full-size tensor, the input gradient.
    """

    @staticmethod
    def forward(ctx, x, center, scale, bias, batch):  # noqa: ANN001, ANN205 (autograd.Function signature)
        out = torch.empty_like(x)
        for rows in row_chunks(x):
            chunk = out[rows]  # a view: the ops below write straight into the output
            torch.sub(x[rows], _graph_rows(center, batch, rows), out=chunk)
            chunk.mul_(_graph_rows(scale, batch, rows))
            if bias is not None:
                chunk.add_(bias)
        ctx.save_for_backward(x, center, scale, batch)
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        x, center, scale, batch = ctx.saved_tensors
        need_x, need_center, need_scale, need_bias, _ = ctx.needs_input_grad
        graphs = center.size(0)
        grad_x = torch.empty_like(x) if need_x or need_center else None
        grad_scale = scale.new_zeros(graphs, x.size(1)) if need_scale else None
        for rows in row_chunks(x):
            if grad_x is not None:  # d out / d x = scale[batch]
                torch.mul(grad_out[rows], _graph_rows(scale, batch, rows), out=grad_x[rows])
            if grad_scale is not None:  # d out / d scale = x - center[batch], summed over the graph's rows
                term = (x[rows] - _graph_rows(center, batch, rows)).mul_(grad_out[rows])
                if batch is None:
                    grad_scale.add_(term.sum(0, keepdim=True))
                else:
                    grad_scale.index_add_(0, batch[rows], term)
        grad_center = None
        if need_center:  # d out / d center = -scale[batch]
            grad_center = graph_reduce(grad_x, batch, graphs, "sum").neg_()
            grad_center = grad_center.sum(1, keepdim=True) if center.size(1) == 1 else grad_center
        if grad_scale is not None and scale.size(1) == 1:
            grad_scale = grad_scale.sum(1, keepdim=True)
        grad_bias = grad_out.sum(0) if ctx.has_bias and need_bias else None
        return grad_x if need_x else None, grad_center, grad_scale, grad_bias, None


def graph_center_scale(
    x: Tensor, center: Tensor, scale: Tensor, batch: Tensor | None, bias: Tensor | None = None
) -> Tensor:
    """``(x - center[batch]) * scale[batch] + bias`` with ONE ``[N, C]`` allocation (the output), differentiable.

    ``center`` and ``scale`` are per graph, ``[num_graphs, C]`` or ``[num_graphs, 1]`` (``[1, *]`` without ``batch``);
    ``bias`` is ``[C]`` or None. The rows are processed in chunks that stay in cache (see :func:`row_chunks`).
    """
    if x.size(0) == 0:
        return x.clone()
    dtype = torch.promote_types(x.dtype, torch.promote_types(center.dtype, scale.dtype))
    if bias is not None:
        bias = bias.to(dtype)
    return _GraphCenterScale.apply(x.to(dtype), center.to(dtype), scale.to(dtype), bias, batch)


def graph_variance(x: Tensor, center: Tensor, batch: Tensor | None, batch_size: int | None = None) -> Tensor:
    """Per graph and channel, the mean over the graph's rows of ``(x - center[g])**2`` (biased): ``[num_graphs, C]``.

    :func:`graph_centered_sq_sum` divided by :func:`graph_sizes` (an empty graph's variance is 0).
    """
    return graph_centered_sq_sum(x, center, batch, batch_size) / graph_sizes(x, batch, batch_size)
