r"""ContraNorm's negative mix ``P v`` for one graph whose exclusion mask is symmetric, from half of the ``n x n`` tiles.

With every row shifted by the same bound ``1/tau`` (instead of its own maximum), the unnormalized weights
``E = exp(S - 1/tau)`` form a symmetric matrix whenever the excluded pairs do (the node itself, and an undirected edge
set, as for Cora and every graph PyG makes undirected), so one tile ``E[I, J]`` (``I <= J``) serves both triangles:
:class:`SymmetricNegativeMix`. :func:`is_symmetric` (from :mod:`graphnorm.edges`) and :func:`fits` say when it
applies; otherwise ContraNorm uses the streaming kernel of ``contranorm_exact``. The tiles are shared among Python
threads (:func:`_tiles_on_threads`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphnorm.edges import is_symmetric as is_symmetric  # the test of when this kernel applies, with fits
from graphnorm.threads import shared_pool, single_thread

# Tiles are [TILE_ROWS, TILE_ROWS]. Smaller tiles cover the triangle more tightly (k tiles per side compute
# k(k+1)/2 of k^2) and stay in cache, but each costs a few Python-level ops
# (experiments/benchmarks/bench_contranorm_model.py times the kernel).
TILE_ROWS = 512
LOG2_E = 1.0 / math.log(2.0)


def fits(inv_tau: float, dtype: torch.dtype) -> bool:
    """Whether ``exp(-2 / tau)``, the smallest kept weight, stays a normal number of ``dtype`` (with margin)."""
    return 2.0 * inv_tau < -math.log(torch.finfo(dtype).tiny) / 2


def _tile_bounds(n: int) -> list[int]:
    """Tile boundaries ``[0, ..., n]``: as few tiles per side as keep each at most ``TILE_ROWS`` rows, evened out."""
    tiles = max(1, math.ceil(n / TILE_ROWS))
    return [round(i * n / tiles) for i in range(tiles + 1)]


def _tile_edges(edge_rows: Tensor | None, edge_cols: Tensor | None, bounds: list[int]) -> dict:
    """The excluded pairs of each upper tile ``(I, J)``, ``I <= J``, as tile-local ``(rows, cols)``."""
    if edge_rows is None or edge_rows.numel() == 0:
        return {}
    edges = torch.stack([edge_rows, edge_cols])
    edges = edges[:, edges[0] <= edges[1]]  # the mask is symmetric: the upper triangle says it all
    boundaries = torch.tensor(bounds[1:-1], device=edges.device)
    tile_of_row = torch.bucketize(edges[0], boundaries, right=True)
    tile_of_col = torch.bucketize(edges[1], boundaries, right=True)
    tiles = len(bounds) - 1
    key = tile_of_row * tiles + tile_of_col
    order = torch.argsort(key)
    key, edges = key[order], edges[:, order]
    present, counts = torch.unique_consecutive(key, return_counts=True)
    out = {}
    for tile_key, part in zip(present.tolist(), torch.split(edges, counts.tolist(), dim=1)):
        i, j = divmod(tile_key, tiles)
        out[(i, j)] = (part[0] - bounds[i], part[1] - bounds[j])
    return out


def _with_ones(part: Tensor) -> Tensor:
    """``[part, 1]`` ``[b, c + 1]``."""
    return torch.cat([part, part.new_ones(part.size(0), 1)], dim=1)


def _queries(x_hat: Tensor, inv_tau: float, rows: slice) -> Tensor:
    """``log2(e) [x_hat / tau, -1/tau]`` of ``rows`` ``[b, d_hat + 1]``: its products with ``[x_hat, 1]`` are
    ``log2(e) (S - 1/tau)``, whose ``exp2`` is ``E``. Why ``exp2``: on CPU torch's ``exp2`` is cheaper than ``exp``,
    and a tile's exponentials cost about as much as its product. Built per row block, when a thread's tiles move to a
    new block, not for the whole graph: the threads' tiles then cost no more memory than a single loop's."""
    part = x_hat[rows]
    scale = inv_tau * LOG2_E
    return torch.cat([part * scale, part.new_full((part.size(0), 1), -scale)], dim=1)


def _tile_weights(queries_i: Tensor, keys: Tensor, bounds: list[int], i: int, j: int, edges: dict, mask_self: bool):
    """``E[I, J] = exp(S[I, J] - 1/tau)`` with excluded pairs (and, on diagonal tiles, their transposes) 0, from the
    query rows of block ``I`` (:func:`_queries`) and the keys ``[x_hat, 1]`` of the whole graph."""
    weights = torch.mm(queries_i, keys[bounds[j] : bounds[j + 1]].t())  # [bI, bJ]
    if mask_self and i == j:
        weights.fill_diagonal_(-math.inf)
    pairs = edges.get((i, j))
    if pairs is not None:
        weights.index_put_(pairs, weights.new_tensor(-math.inf))
        if i == j:
            weights.index_put_((pairs[1], pairs[0]), weights.new_tensor(-math.inf))
    return weights.exp2_()  # E = exp(S - 1/tau): the queries carry log2(e)


class SymmetricNegativeMix(torch.autograd.Function):
    r"""``P @ v`` for ONE graph with a symmetric exclusion mask, inputs as
    :class:`~graphnorm.norms.ops.contranorm_exact.StreamingNegativeMix` (``x_hat`` row-normalized, edges numbered
    within the graph).

    ``P = D^-1 E`` with ``D = diag(E 1)``, and one upper tile ``E[I, J]`` serves both triangles:

    .. math::
        (E V)_I \mathrel{+}= E_{IJ} V_J, \quad (E V)_J \mathrel{+}= E_{IJ}^\top V_I, \qquad
        \frac{\partial L}{\partial \hat X} = \tfrac{1}{\tau} (dS + dS^\top) \hat X, \quad
        (dS + dS^\top)_{IJ} = E_{IJ} \circ (\tilde G_I \tilde V_J^\top + \tilde V_I \tilde G_J^\top)

    with ``G~ = [g / d, -delta / d]``, ``V~ = [v, 1]``, ``delta_i = g_i . y_i`` and ``y = P v``. Per unit ``n^2 d``,
    forward + backward cost 5 matmul-units instead of the row-block kernel's 7, and half the exponentials; memory
    stays linear in ``n`` (one tile at a time, recomputed in backward unless the graph is a single tile). The results
    differ from the row-block kernel's only by float rounding (tests compare both to the dense reference).

    The fixed shift is safe when no weight can underflow: every kept ``S_ij >= -1/tau``, so
    ``E_ij >= exp(-2/tau)``, which :func:`fits` checks against the dtype's smallest normal number. Rows with no
    negatives get ``P_i = 0``.
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        x_hat: Tensor,
        values: Tensor,
        inv_tau: float,
        edge_rows: Tensor | None,
        edge_cols: Tensor | None,
        mask_self: bool,
    ) -> Tensor:
        n, d = values.shape
        bounds = _tile_bounds(n)
        edges = _tile_edges(edge_rows, edge_cols, bounds)
        keys, values_ones = _with_ones(x_hat), _with_ones(values)  # [n, d_hat + 1], [n, d + 1]
        sums = torch.zeros(n, d + 1, dtype=values.dtype, device=values.device)  # [E v, E 1]

        def forward_tiles(tiles: list[tuple[int, int]], sums: Tensor) -> Tensor | None:
            kept, block, queries_i = None, None, None
            for i, j in tiles:
                rows_i, rows_j = slice(bounds[i], bounds[i + 1]), slice(bounds[j], bounds[j + 1])
                if i != block:
                    block, queries_i = i, _queries(x_hat, inv_tau, rows_i)
                weights = _tile_weights(queries_i, keys, bounds, i, j, edges, mask_self)  # [bI, bJ]
                sums[rows_i].addmm_(weights, values_ones[rows_j])
                if i != j:
                    sums[rows_j].addmm_(weights.t(), values_ones[rows_i])
                elif len(bounds) == 2:
                    kept = weights  # the whole E: kept for backward (only a single-tile graph)
            return kept

        kept = _tiles_on_threads(forward_tiles, _upper_tiles(bounds), sums)
        denom = sums[:, d:]  # [n, 1]; 0 for rows without negatives
        inverse_denom = torch.where(denom > 0, 1.0 / denom, torch.zeros_like(denom))
        out = sums[:, :d] * inverse_denom
        # the kept E and the tiles' excluded pairs (not recomputed in backward) go through save_for_backward, so
        # autograd frees them after the last backward and a retained graph can run backward again
        ctx.tile_keys = list(edges)
        ctx.save_for_backward(x_hat, values, out, inverse_denom, kept, *(t for pair in edges.values() for t in pair))
        ctx.inv_tau, ctx.mask_self = inv_tau, mask_self
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        x_hat, values, out, inverse_denom, kept, *edge_parts = ctx.saved_tensors
        inv_tau, mask_self = ctx.inv_tau, ctx.mask_self
        n = x_hat.size(0)
        bounds = _tile_bounds(n)
        edges = {key: (edge_parts[2 * k], edge_parts[2 * k + 1]) for k, key in enumerate(ctx.tile_keys)}
        grad_out = grad_out.contiguous()
        delta = (grad_out * out).sum(dim=1, keepdim=True)  # [n, 1]
        scaled_grads = grad_out * inverse_denom  # [n, d]: g_i / D_i
        scaled_delta = -delta * inverse_denom  # [n, 1]

        keys = _with_ones(x_hat)  # [n, d_hat + 1]
        # right = [V~, G~] [n, 2d + 2] with G~ = [g / D, -delta / D] and V~ = [v, 1]; the left side [G~, V~] is built
        # per row block as the queries are: left_I . right_J = G~_I V~_J + V~_I G~_J
        right = torch.cat([_with_ones(values), scaled_grads, scaled_delta], dim=1)
        half = values.size(1) + 1

        grad_x_hat = torch.zeros_like(x_hat)
        grad_values = torch.zeros_like(values)

        def backward_tiles(tiles: list[tuple[int, int]], grad_x_hat: Tensor, grad_values: Tensor) -> None:
            block, queries_i, left_i = None, None, None
            for i, j in tiles:
                rows_i, rows_j = slice(bounds[i], bounds[i + 1]), slice(bounds[j], bounds[j + 1])
                if i != block:
                    block, queries_i = i, _queries(x_hat, inv_tau, rows_i)
                    left_i = torch.cat([right[rows_i, half:], right[rows_i, :half]], dim=1)  # [G~_I, V~_I]
                weights = kept if kept is not None else _tile_weights(queries_i, keys, bounds, i, j, edges, mask_self)
                grad_values[rows_j].addmm_(weights.t(), scaled_grads[rows_i])  # P^T g = E (g / D)
                both = torch.mm(left_i, right[rows_j].t()).mul_(weights)  # (dS + dS^T)[I, J]
                grad_x_hat[rows_i].addmm_(both, x_hat[rows_j], alpha=inv_tau)
                if i != j:
                    grad_values[rows_i].addmm_(weights, scaled_grads[rows_j])
                    grad_x_hat[rows_j].addmm_(both.t(), x_hat[rows_i], alpha=inv_tau)

        _tiles_on_threads(backward_tiles, _upper_tiles(bounds), grad_x_hat, grad_values)
        return grad_x_hat, grad_values, None, None, None, None


def _upper_tiles(bounds: list[int]) -> list[tuple[int, int]]:
    """The tiles ``(I, J)`` with ``I <= J``, row by row."""
    tiles = len(bounds) - 1
    return [(i, j) for i in range(tiles) for j in range(i, tiles)]


def _tiles_on_threads(
    work: Callable[..., Tensor | None], tiles: list[tuple[int, int]], *outputs: Tensor
) -> Tensor | None:
    """``work(share, *outputs)`` accumulating into zeroed ``outputs``, over torch's intra-op thread count of Python
    threads: thread ``t`` takes every ``t``-th tile into its own zeroed copies of ``outputs`` (thread 0, the calling
    thread, into ``outputs`` itself), and the copies are added in thread order at the end. Returns thread 0's
    ``work`` result.

    Why not OpenMP inside each product: an OpenMP team splits every op and waits at a barrier for its slowest thread,
    so when another process takes one of the cores, each of the kernel's thousands of small products waits for a
    thread that is off the CPU (beside a CPU-bound neighbour the kernel lost most of its lead over the dense
    reference). Here each thread runs its tiles to the end with no barrier between them. Every copy is filled
    by one thread in a fixed order, so a run gives the same numbers every time for a given thread count (and with
    one thread exactly the single loop it always was); different thread counts differ by float rounding.
    """
    workers = min(torch.get_num_threads(), len(tiles))
    if workers == 1:
        return work(tiles, *outputs)
    copies = [outputs] + [tuple(torch.zeros_like(out) for out in outputs) for _ in range(workers - 1)]
    grad_enabled = torch.is_grad_enabled()  # thread-local: off in an autograd.Function, on in a new thread

    def work_here(share: list[tuple[int, int]], *outputs: Tensor) -> Tensor | None:
        with torch.set_grad_enabled(grad_enabled):  # else the tiles would be recorded into a graph and kept
            return work(share, *outputs)

    with single_thread():  # on this thread: one intra-op thread per Python thread
        pool = shared_pool(workers - 1)
        futures = [pool.submit(work_here, tiles[t::workers], *copies[t]) for t in range(1, workers)]
        try:
            first = work(tiles[0::workers], *outputs)  # share 0 on this thread (its grad mode is the caller's)
        finally:
            for future in futures:
                future.result()  # waits for every thread, and re-raises a thread's exception here
    for copy in copies[1:]:
        for out, part in zip(outputs, copy):
            out.add_(part)
    return first
