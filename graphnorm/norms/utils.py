"""Shared helpers for per-graph statistics in mini-batches (PyG ``batch`` vector convention)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.func import functional_call
from torch_geometric.utils import scatter

# float16 overflows past 65504 (a row of 64 entries of size 40 has a squared norm of 1e5) and bfloat16 keeps 8
# mantissa bits (a sum of squares loses ~0.4% per addition): statistics of these dtypes accumulate in float32.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype a norm computes in: float32 for float16 / bfloat16 ``x`` (as ``F.layer_norm`` does), else ``x``'s."""
    return torch.float32 if x.dtype in HALF_DTYPES else x.dtype


def upcast(x: Tensor) -> Tensor:
    """``x`` in :func:`compute_dtype`: a float32 copy (differentiable) for half precision, ``x`` itself otherwise."""
    return x.float() if x.dtype in HALF_DTYPES else x  # a dtype test: a no-op Tensor.to costs microseconds per call


def cast(tensor: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """A parameter in the compute dtype (differentiable; the tensor itself when it already has it), None stays."""
    return tensor if tensor is None or tensor.dtype == dtype else tensor.to(dtype)


def call_in_dtype(module: nn.Module, dtype: torch.dtype, *args: Tensor) -> Tensor:
    """``module(*args)`` with the module's floating-point parameters and buffers in ``dtype``.

    For a wrapped torch module (e.g. ``BatchNorm1d``) whose parameters are float16 while the statistics are computed
    in float32: the parameters are cast differentiably (gradients reach the originals) and updated running
    statistics are written back into the module's own buffers. Without a cast it is a plain ``module(*args)``.
    Listing the module's tensors costs tens of microseconds: callers test one tensor's dtype first.
    """
    tensors = dict(module.named_parameters()) | dict(module.named_buffers())
    to_cast = {name for name, t in tensors.items() if t.is_floating_point() and t.dtype != dtype}
    if not to_cast:
        return module(*args)
    casted = {name: t.to(dtype) if name in to_cast else t for name, t in tensors.items()}
    out = functional_call(module, casted, args)
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            if name in to_cast:
                buffer.copy_(casted[name])
    return out


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
    """``batch`` must be a 1-D integer vector with one entry per row of ``x`` (its values: :func:`check_graph_ids`)."""
    if batch is None:
        return
    if not isinstance(batch, Tensor):
        raise TypeError(f"{name}: batch must be a torch.Tensor of graph ids, got {type(batch).__name__}")
    if batch.dim() != 1 or batch.numel() != x.size(0):
        raise ValueError(f"{name}: batch must have shape [num_nodes] = [{x.size(0)}], got shape {tuple(batch.shape)}")
    if batch.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(f"{name}: batch must be an integer tensor, got {batch.dtype}")


def check_graph_ids(batch: Tensor | None, batch_size: int | None = None, name: str = "norm") -> None:
    """The values of a (shape-checked) ``batch`` vector: graph ids in ``[0, batch_size)`` (``ValueError`` otherwise).

    For the norms that index per-graph statistics by ``batch``; the ids need not be sorted or contiguous (a graph
    without rows is allowed). ``batch_size`` must be a non-negative integer or None (then ``max(batch) + 1``).
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0):
        raise ValueError(f"{name}: batch_size must be a non-negative integer or None, got {batch_size!r}")
    if batch is None or batch.numel() == 0:
        return
    low, high = (value.item() for value in torch.aminmax(batch))
    if low < 0:
        raise ValueError(f"{name}: batch holds a negative graph id ({low}); graph ids are 0, 1, ..., batch_size - 1")
    if batch_size is not None and high >= batch_size:
        raise ValueError(f"{name}: batch names graph {high} but batch_size is {batch_size} (ids must be < batch_size)")


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


# A [N, C] float32 tensor of 200k x 128 is ~100 MB: every fresh one is a new mmap that page-faults on first write
# and costs about one x.clone(), while a pass that only reads x is ~8x cheaper. The helpers below therefore walk
# x in row chunks small enough to stay in cache (their temporaries come from the heap, reused, not fresh mmaps),
# so a per-graph norm allocates one full-size tensor: its output.
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


def graph_sizes(x: Tensor, batch: Tensor | None, batch_size: int | None = None) -> Tensor:
    """Rows per graph as ``[num_graphs, 1]`` in ``x``'s dtype, at least 1 (an empty graph's sums are 0)."""
    if batch is None:
        return x.new_full((1, 1), max(1, x.size(0)))
    graphs = num_graphs(batch, batch_size)
    counts = torch.bincount(batch, minlength=graphs)[:graphs]
    return counts.clamp_(min=1).to(x.dtype).unsqueeze(1)


def graph_variance(x: Tensor, center: Tensor, batch: Tensor | None, batch_size: int | None = None) -> Tensor:
    """Per graph and channel, the mean over the graph's rows of ``(x - center[g])**2`` (biased): ``[num_graphs, C]``.

    :func:`graph_centered_sq_sum` divided by :func:`graph_sizes` (an empty graph's variance is 0).
    """
    return graph_centered_sq_sum(x, center, batch, batch_size) / graph_sizes(x, batch, batch_size)


def register_affine(module: nn.Module, channels: int, affine: bool) -> None:
    """Register ``module.weight`` (per-channel gain, init 1) and ``module.bias`` (init 0), or both as None."""
    module.register_parameter("weight", nn.Parameter(torch.ones(channels)) if affine else None)
    module.register_parameter("bias", nn.Parameter(torch.zeros(channels)) if affine else None)


def reset_affine(module: nn.Module) -> None:
    """``module.weight`` back to 1 and ``module.bias`` back to 0, each where it is not None."""
    if module.weight is not None:
        nn.init.ones_(module.weight)
    if module.bias is not None:
        nn.init.zeros_(module.bias)


def rename_legacy_keys(state_dict: dict, prefix: str, old_infix: str) -> None:
    """In place, ``prefix + old_infix + name`` -> ``prefix + name``: loads checkpoints saved when a norm wrapped
    a PyG module as ``self.module`` (e.g. ``module.weight``) into the norm that now holds ``weight`` itself."""
    for key in [k for k in state_dict if k.startswith(prefix + old_infix)]:
        state_dict[prefix + key[len(prefix + old_infix) :]] = state_dict.pop(key)
