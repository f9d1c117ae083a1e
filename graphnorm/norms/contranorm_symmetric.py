r"""ContraNorm's negative mix ``P v`` for one graph whose exclusion mask is symmetric, from half of the ``n x n`` tiles.

With every row shifted by the same bound ``1/tau`` (instead of its own maximum), the unnormalized weights
``E = exp(S - 1/tau)`` are a symmetric matrix whenever the excluded pairs are (the node itself, and an undirected
edge set, as for Cora and every graph PyG makes undirected). Then ``P = D^-1 E`` with ``D = diag(E 1)``, and one
tile ``E[I, J]`` (``I <= J``) serves both triangles:

.. math::
    (E V)_I \mathrel{+}= E_{IJ} V_J, \quad (E V)_J \mathrel{+}= E_{IJ}^\top V_I, \qquad
    \frac{\partial L}{\partial \hat X} = \tfrac{1}{\tau} (dS + dS^\top) \hat X, \quad
    (dS + dS^\top)_{IJ} = E_{IJ} \circ (\tilde G_I \tilde V_J^\top + \tilde V_I \tilde G_J^\top)

with ``G~ = [g / d, -delta / d]``, ``V~ = [v, 1]``, ``delta_i = g_i . y_i`` and ``y = P v``. Per unit ``n^2 d``,
forward + backward cost 5 matmul-units instead of the row-block kernel's 7, and half the exponentials; memory stays
linear in ``n`` (one tile at a time, recomputed in backward unless the graph is a single tile).
Bit-for-bit the results differ from the row-block kernel only by float rounding (tests compare both to the dense
reference).

The fixed shift is safe when no weight can underflow: every kept ``S_ij >= -1/tau``, so ``E_ij >= exp(-2/tau)``,
which :func:`fits` checks against the dtype's smallest normal number. Rows with no negatives get ``P_i = 0``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

# Tiles are [TILE_ROWS, TILE_ROWS]. Smaller tiles cover the triangle more tightly (k tiles per side compute
# k(k+1)/2 of k^2) and stay in cache; each costs a few Python-level ops. Measured at Cora size: see the README of
# the benchmarks (experiments/benchmarks/bench_contranorm_model.py).
TILE_ROWS = 512


def is_symmetric(edge_rows: Tensor | None, edge_cols: Tensor | None, num_nodes: int) -> bool:
    """Whether the pair set ``{(r, c)}`` equals its transpose (duplicates ignored)."""
    if edge_rows is None or edge_rows.numel() == 0:
        return True
    forward = torch.unique(edge_rows * num_nodes + edge_cols)
    backward = torch.unique(edge_cols * num_nodes + edge_rows)
    return forward.numel() == backward.numel() and bool(torch.equal(forward, backward))


def fits(inv_tau: float, dtype: torch.dtype) -> bool:
    """Whether ``exp(-2 / tau)``, the smallest kept weight, stays a normal number of ``dtype`` (with margin)."""
    return 2.0 * inv_tau < -math.log(torch.finfo(dtype).tiny) / 2


def _tile_bounds(n: int) -> list[int]:
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


def _keys_and_queries(x_hat: Tensor, inv_tau: float) -> tuple[Tensor, Tensor]:
    """``[x_hat, 1]`` and ``[x_hat / tau, -1/tau]`` ``[n, d_hat + 1]``: their products are ``S - 1/tau``."""
    ones = x_hat.new_ones(x_hat.size(0), 1)
    return torch.cat([x_hat, ones], dim=1), torch.cat([x_hat * inv_tau, -inv_tau * ones], dim=1)


def _tile_weights(keys: Tensor, queries: Tensor, bounds: list[int], i: int, j: int, edges: dict, mask_self: bool):
    """``E[I, J] = exp(S[I, J] - 1/tau)`` with excluded pairs (and, on diagonal tiles, their transposes) 0."""
    weights = torch.mm(queries[bounds[i] : bounds[i + 1]], keys[bounds[j] : bounds[j + 1]].t())  # [bI, bJ]
    if mask_self and i == j:
        weights.fill_diagonal_(-math.inf)
    pairs = edges.get((i, j))
    if pairs is not None:
        weights.index_put_(pairs, weights.new_tensor(-math.inf))
        if i == j:
            weights.index_put_((pairs[1], pairs[0]), weights.new_tensor(-math.inf))
    return weights.exp_()


class SymmetricNegativeMix(torch.autograd.Function):
    """``P @ v`` for ONE graph with a symmetric exclusion mask (see the module docstring); inputs as
    ``_StreamingNegativeMix`` in ``contranorm.py``: ``x_hat`` row-normalized, edges global to the graph."""

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
        keys, queries = _keys_and_queries(x_hat, inv_tau)  # [n, d_hat + 1] each
        values_ones = torch.cat([values, x_hat.new_ones(n, 1)], dim=1)  # [n, d + 1]
        sums = torch.zeros(n, d + 1, dtype=values.dtype, device=values.device)  # [E v, E 1]
        kept = None
        for i, j in _upper_tiles(bounds):
            weights = _tile_weights(keys, queries, bounds, i, j, edges, mask_self)  # [bI, bJ]
            rows_i, rows_j = slice(bounds[i], bounds[i + 1]), slice(bounds[j], bounds[j + 1])
            sums[rows_i].addmm_(weights, values_ones[rows_j])
            if i != j:
                sums[rows_j].addmm_(weights.t(), values_ones[rows_i])
            elif len(bounds) == 2:
                kept = weights  # the whole E: kept for backward (only a single-tile graph)
        denom = sums[:, d:]  # [n, 1]; 0 for rows without negatives
        inverse_denom = torch.where(denom > 0, 1.0 / denom, torch.zeros_like(denom))
        out = sums[:, :d] * inverse_denom
        ctx.kept, ctx.tile_edges = kept, edges  # the tiles' excluded pairs, not recomputed in backward
        ctx.save_for_backward(x_hat, values, out, inverse_denom)
        ctx.inv_tau, ctx.mask_self = inv_tau, mask_self
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        x_hat, values, out, inverse_denom = ctx.saved_tensors
        inv_tau = ctx.inv_tau
        n = x_hat.size(0)
        bounds = _tile_bounds(n)
        edges, ctx.tile_edges = ctx.tile_edges, None
        keys, queries = _keys_and_queries(x_hat, inv_tau)
        grad_out = grad_out.contiguous()
        d = values.size(1)
        delta = (grad_out * out).sum(dim=1, keepdim=True)  # [n, 1]
        scaled_grads = grad_out * inverse_denom  # [n, d]: g_i / D_i
        # left = [G~, V~] and right = [V~, G~] [n, 2d + 2], with G~ = [g / D, -delta / D] and V~ = [v, 1], written in
        # place: no [n, d + 1] intermediates beside them (the backward's peak, 2 x 5 MB at n = 20,000, d = 64)
        left = scaled_grads.new_empty(n, 2 * d + 2)
        left[:, :d] = scaled_grads
        left[:, d : d + 1] = -delta * inverse_denom
        left[:, d + 1 : 2 * d + 1] = values
        left[:, 2 * d + 1] = 1.0
        right = torch.empty_like(left)  # left_I . right_J = G~_I V~_J + V~_I G~_J
        right[:, : d + 1] = left[:, d + 1 :]
        right[:, d + 1 :] = left[:, : d + 1]
        grad_x_hat = torch.zeros_like(x_hat)
        grad_values = torch.zeros_like(values)
        kept, ctx.kept = ctx.kept, None
        for i, j in _upper_tiles(bounds):
            weights = kept if kept is not None else _tile_weights(keys, queries, bounds, i, j, edges, ctx.mask_self)
            rows_i, rows_j = slice(bounds[i], bounds[i + 1]), slice(bounds[j], bounds[j + 1])
            grad_values[rows_j].addmm_(weights.t(), scaled_grads[rows_i])  # P^T g = E (g / D)
            both = torch.mm(left[rows_i], right[rows_j].t()).mul_(weights)  # (dS + dS^T)[I, J]
            grad_x_hat[rows_i].addmm_(both, x_hat[rows_j], alpha=inv_tau)
            if i != j:
                grad_values[rows_i].addmm_(weights, scaled_grads[rows_j])
                grad_x_hat[rows_j].addmm_(both.t(), x_hat[rows_i], alpha=inv_tau)
        return grad_x_hat, grad_values, None, None, None, None


def _upper_tiles(bounds: list[int]) -> list[tuple[int, int]]:
    tiles = len(bounds) - 1
    return [(i, j) for i in range(tiles) for j in range(i, tiles)]
