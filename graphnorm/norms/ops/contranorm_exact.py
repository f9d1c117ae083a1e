"""ContraNorm's exact kernels for ``P v`` (``P`` the softmax over a graph's negatives of the similarities of its
row-normalized features): padded dense blocks for a run of small graphs (:func:`dense_negative_mix`, plain
autograd), and streaming row blocks for one large graph (:class:`StreamingNegativeMix`: one block ``[b, n]`` at a
time, ``P`` recomputed in backward past one block, so memory stays linear in ``n``).
:class:`~graphnorm.norms.contranorm.ContraNorm` chooses among these and the symmetric-tiles kernel
(:mod:`~graphnorm.norms.ops.contranorm_symmetric_tiles`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable
from torch_geometric.utils import to_dense_batch

# The streaming kernel holds one row block [block_rows, n] at a time (two in backward), block_rows =
# BLOCK_ELEMENTS // n: 16 MB in float32. Larger blocks mean fewer, larger matmuls, and backward's [n, d]-accumulating
# products (P^T g, dS^T q) read and write their output once per block; but peak memory grows with the block (three
# live at once). Smaller blocks were clearly slower, larger ones barely faster and heavier. Past
# n = BLOCK_ELEMENTS / MIN_BLOCK_ROWS the blocks are MIN_BLOCK_ROWS rows, so memory stays linear in n.
BLOCK_ELEMENTS = 1 << 22
# A graph whose whole n x n fits in this many entries (n <= 1024: 4 MB) is one block, and its P is kept for backward
# instead of recomputed (saves a matmul, the mask and an exponential). Larger graphs recompute, so a deep model's
# memory stays linear in n (Cora's P, 2708^2 float32 entries = 29 MB, kept in each of 31 layers would add 0.9 GB).
SINGLE_BLOCK_ELEMENTS = 1 << 20
MIN_BLOCK_ROWS = 32


def block_bounds(num_rows: int, num_cols: int) -> list[int]:
    """Row-block boundaries ``[0, b, 2b, ..., num_rows]`` so that a block ``[b, num_cols]`` has ~BLOCK_ELEMENTS."""
    if num_rows * num_cols <= SINGLE_BLOCK_ELEMENTS:
        return [0, num_rows]
    rows = max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // max(num_cols, 1))
    return list(range(0, num_rows, rows)) + [num_rows]


def mask_block(logits: Tensor, row_start: int, rows: Tensor | None, cols: Tensor | None, mask_self: bool) -> None:
    """Set the excluded entries of a row block ``[b, n]`` (rows ``row_start..``) to ``-inf`` in place.

    ``rows``/``cols`` are the block's neighbour pairs (global row ids, sorted by row), ``None`` for none.
    """
    if mask_self:
        # entries (i, row_start + i): the node itself
        logits.diagonal(offset=row_start).fill_(-math.inf)
    if rows is not None and rows.numel() > 0:
        logits.index_put_((rows - row_start, cols), logits.new_tensor(-math.inf))


class StreamingNegativeMix(torch.autograd.Function):
    r"""``P @ v`` with ``P = softmax_masked(x_hat x_hat^T / tau)`` for ONE graph, one row block at a time.

    Memory is O(n * block_rows + n * d): the ``n x n`` similarity is never stored. Forward keeps the row-wise
    log-sum-exp; backward recomputes each block of ``P`` from it (as FlashAttention does) and uses
    ``dS_ij = P_ij (dP_ij - g_i . y_i)`` with ``y = P v``, so no row reduction over ``n`` is needed in backward.
    Masking is exact (entries set to ``-inf`` before the exponential), so there is no cancellation even when
    neighbours carry almost all of the softmax mass.

    Elementwise passes over the ``[b, n]`` block dominate after the matmuls on a CPU, so the row shifts and the
    softmax denominator ride along in the matmuls as one extra column: ``[q, -shift] @ [x_hat, 1]^T = S - shift``,
    ``E @ [v, 1] = [E v, sum_j E_ij]`` and ``[g, -delta] @ [v, 1]^T = dP - delta``. Forward shifts every row by the
    bound ``1/tau >= S_ij`` instead of the row max; rows whose shifted sum falls below ``sqrt(tiny)`` (only for
    very small ``tau``, or rows with no negatives) are recomputed with their exact row max.
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
        bounds = block_bounds(n, n)
        edge_ptr = edge_block_ptr(edge_rows, bounds)
        ones = x_hat.new_ones(n, 1)
        keys = torch.cat([x_hat, ones], dim=1)  # [n, d_hat + 1]
        values_ones = torch.cat([values, ones], dim=1)  # [n, d + 1]
        queries = torch.cat([x_hat * inv_tau, x_hat.new_full((n, 1), -inv_tau)], dim=1)  # [n, d_hat + 1]
        out = torch.empty_like(values)  # [n, d]
        lse = torch.empty(n, 1, dtype=x_hat.dtype, device=x_hat.device)  # row log-sum-exp over the negatives
        kept_probs = None
        small = math.sqrt(torch.finfo(x_hat.dtype).tiny)
        for i, (r0, r1) in enumerate(zip(bounds[:-1], bounds[1:])):
            block_rows, block_cols = block_edges(edge_rows, edge_cols, edge_ptr, i)
            weights = torch.mm(queries[r0:r1], keys.t())  # [b, n]: S - 1/tau <= 0
            mask_block(weights, r0, block_rows, block_cols, mask_self)
            weights.exp_()  # masked entries become exactly 0
            sums = torch.mm(weights, values_ones)  # [b, d + 1]: [sum_j E_ij v_j, sum_j E_ij]
            denom = sums[:, d:]
            out[r0:r1] = sums[:, :d] / denom
            lse[r0:r1] = denom.log() + inv_tau
            underflow = (denom.squeeze(1) < small).nonzero().squeeze(1)
            if underflow.numel() > 0:
                _recompute_rows(underflow, r0, x_hat, values, inv_tau, block_rows, block_cols, mask_self, out, lse)
            elif n * n <= SINGLE_BLOCK_ELEMENTS:  # then this is the only block: the whole P [n, n]
                kept_probs = weights.div_(denom)
        # P goes through save_for_backward, so autograd frees it after the last backward and a second backward
        # through a retained graph reuses it (recomputing it would change the gradients by rounding)
        ctx.keeps_probs = kept_probs is not None
        ctx.save_for_backward(x_hat, values, out, lse, edge_rows, edge_cols, kept_probs)
        ctx.inv_tau = inv_tau
        ctx.mask_self = mask_self
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        x_hat, values, out, lse, edge_rows, edge_cols, kept_probs = ctx.saved_tensors
        inv_tau, mask_self = ctx.inv_tau, ctx.mask_self
        n = x_hat.size(0)
        bounds = block_bounds(n, n)
        edge_ptr = edge_block_ptr(edge_rows, bounds)
        grad_out = grad_out.contiguous()
        delta = (grad_out * out).sum(dim=1, keepdim=True)  # [n, 1]: sum_j P_ij dP_ij = g_i . y_i
        ones = x_hat.new_ones(n, 1)
        keys = torch.cat([x_hat, ones], dim=1)  # [n, d_hat + 1]
        values_ones = torch.cat([values, ones], dim=1)  # [n, d + 1]
        queries = torch.cat([x_hat * inv_tau, -lse], dim=1)  # [n, d_hat + 1]: q . k = S - lse
        grads_minus_delta = torch.cat([grad_out, -delta], dim=1)  # [n, d + 1]: . [v, 1] = dP - delta
        grad_x_hat = torch.zeros_like(x_hat)
        grad_values = torch.zeros_like(values)
        for i, (r0, r1) in enumerate(zip(bounds[:-1], bounds[1:])):
            if kept_probs is not None:
                probs = kept_probs
            else:
                probs = torch.mm(queries[r0:r1], keys.t())  # [b, n]: S - lse
                mask_block(probs, r0, *block_edges(edge_rows, edge_cols, edge_ptr, i), mask_self)
                probs.exp_()  # P block, masked entries 0
            grad_values.addmm_(probs.t(), grad_out[r0:r1])
            grad_logits = torch.mm(grads_minus_delta[r0:r1], values_ones.t())  # [b, n]: dP - delta
            grad_logits.mul_(probs)  # dS (w.r.t. the scaled logits)
            # S = (x_hat / tau) x_hat^T: x_hat is both the query and the key side
            grad_x_hat[r0:r1].addmm_(grad_logits, x_hat, alpha=inv_tau)
            grad_x_hat.addmm_(grad_logits.t(), queries[r0:r1, :-1])
        return grad_x_hat, grad_values, None, None, None, None


def _recompute_rows(
    local_rows: Tensor,
    row_start: int,
    x_hat: Tensor,
    values: Tensor,
    inv_tau: float,
    block_rows: Tensor | None,
    block_cols: Tensor | None,
    mask_self: bool,
    out: Tensor,
    lse: Tensor,
) -> None:
    """Redo rows whose fixed-shift softmax sum underflowed, shifting by their exact row max instead (in place)."""
    rows = local_rows + row_start  # [r] global row ids
    logits = torch.mm(x_hat[rows] * inv_tau, x_hat.t())  # [r, n]
    if mask_self:
        logits[torch.arange(rows.numel(), device=rows.device), rows] = -math.inf
    if block_rows is not None and block_rows.numel() > 0:
        position = torch.full((int(local_rows.max()) + 1,), -1, dtype=torch.long, device=rows.device)
        position[local_rows] = torch.arange(rows.numel(), device=rows.device)
        local = block_rows - row_start
        keep = local <= position.numel() - 1
        edge_position = torch.full_like(local, -1)
        edge_position[keep] = position[local[keep]]
        hit = edge_position >= 0
        logits[edge_position[hit], block_cols[hit]] = -math.inf
    row_max = logits.amax(dim=1, keepdim=True)  # [r, 1]; -inf when the row has no negatives
    row_max.masked_fill_(row_max == -math.inf, 0.0)
    weights = logits.sub_(row_max).exp_()
    denom = weights.sum(dim=1, keepdim=True).clamp_min_(1.0)  # >= 1 unless the row has no negatives
    out[rows] = torch.mm(weights, values) / denom
    lse[rows] = row_max + denom.log()


def edge_block_ptr(edge_rows: Tensor | None, bounds: list[int]) -> list[int] | None:
    """Offsets into the row-sorted edge list where each row block starts."""
    if edge_rows is None:
        return None
    if len(bounds) == 2:  # one block takes every edge; the edges need not be sorted then
        return [0, edge_rows.numel()]
    return torch.searchsorted(edge_rows, torch.tensor(bounds, device=edge_rows.device)).tolist()


def block_edges(
    edge_rows: Tensor | None, edge_cols: Tensor | None, edge_ptr: list[int] | None, block: int
) -> tuple[Tensor | None, Tensor | None]:
    """The excluded pairs ``(rows, cols)`` of row block ``block`` (``(None, None)`` for none)."""
    if edge_rows is None or edge_ptr is None:
        return None, None
    lo, hi = edge_ptr[block], edge_ptr[block + 1]
    return edge_rows[lo:hi], edge_cols[lo:hi]


def dense_negative_mix(
    x_hat: Tensor,
    values: Tensor,
    local_batch: Tensor,
    num_local_graphs: int,
    inv_tau: float,
    edge_rows: Tensor | None,
    edge_cols: Tensor | None,
    mask_self: bool,
) -> Tensor:
    """``P @ v`` for a run of small graphs through padded per-graph blocks (plain autograd).

    ``edge_rows``/``edge_cols`` are node ids local to this run of graphs.
    """
    x_hat_dense, node_mask = to_dense_batch(x_hat, local_batch, batch_size=num_local_graphs)  # [G, M, d], [G, M]
    values_dense, _ = to_dense_batch(values, local_batch, batch_size=num_local_graphs)  # [G, M, d]
    num_graphs_here, max_nodes = node_mask.shape
    logits = torch.bmm(x_hat_dense * inv_tau, x_hat_dense.transpose(1, 2))  # [G, M, M]
    excluded = ~node_mask.unsqueeze(1).expand(-1, max_nodes, -1)  # padding columns, [G, M, M]
    if mask_self:
        excluded = excluded | torch.eye(max_nodes, dtype=torch.bool, device=x_hat.device)
    if edge_rows is not None and edge_rows.numel() > 0:
        # position of each node inside its graph's padded block
        ptr = torch.zeros(num_graphs_here + 1, dtype=torch.long, device=x_hat.device)
        ptr[1:] = torch.bincount(local_batch, minlength=num_graphs_here).cumsum(0)
        graph_of_edge = local_batch[edge_rows]
        excluded = excluded.clone()
        excluded[graph_of_edge, edge_rows - ptr[graph_of_edge], edge_cols - ptr[graph_of_edge]] = True
    logits = logits.masked_fill(excluded, -math.inf)
    row_max = logits.amax(dim=2, keepdim=True).detach()  # [G, M, 1]
    row_max = row_max.masked_fill(row_max == -math.inf, 0.0)
    weights = (logits - row_max).exp()
    denom = weights.sum(dim=2, keepdim=True).clamp_min(1.0)  # >= 1 unless the row has no negatives
    mixed = torch.bmm(weights, values_dense) / denom  # [G, M, d]
    return mixed[node_mask]  # [nodes, d]
