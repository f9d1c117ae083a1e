"""Per-graph statistics and the centre-and-scale step of the per-graph norms, over row chunks that stay in cache.

A fresh ``[N, C]`` tensor is a new memory mapping that page-faults on its first write, and costs about as much as a
copy of ``x``, while a pass that only reads ``x`` is much cheaper. These helpers therefore walk ``x`` in row chunks
(their temporaries come from the heap, reused) and are custom ``torch.autograd.Function`` s with chunked backwards,
so a per-graph norm (GraphNorm, InstanceNorm, PairNorm, LayerNorm ``mode="graph"``) allocates one full-size tensor:
its output. The plain reductions are in :mod:`graphnorm.norms.reductions`.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from graphnorm.norms.reductions import graph_reduce, graph_sizes, num_graphs

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
