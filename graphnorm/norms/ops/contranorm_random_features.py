r"""ContraNorm's negative mix ``P x`` in time and memory linear in the number of nodes, by positive random features.

The exact term (:mod:`graphnorm.norms.contranorm`) is a softmax attention of the normalized rows onto each node's
negatives. FAVOR+ (Choromanski et al., ICLR 2021) estimates its kernel with ``m`` positive random features, so every
graph's sums factor through one ``[m, d + 1]`` summary: :math:`O(nmd)` time, no ``n x n``. Neighbours are excluded
by subtracting the estimator's own terms over the excluded pairs (sparse, :math:`O(Em)`), so the denominator stays a
sum of positive terms. The output's bias is of order :math:`1/m`, its standard error of order :math:`1/\sqrt{m}`;
features are drawn in orthogonal blocks, which lowers the variance.

What it estimates, its error, why orthogonal features, the numerics: docs/concepts/contranorm-random-features.md.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from graphnorm.edges import csr_from_edges
from graphnorm.memory import check_fits


def orthogonal_gaussian_features(num_features: int, dim: int, seed: int) -> Tensor:
    """``num_features`` Gaussian rows ``[num_features, dim]`` (float64, CPU) drawn in orthogonal blocks from ``seed``.

    Each block of ``dim`` rows is a Haar-random orthogonal matrix (QR of a Gaussian matrix, signs fixed by
    ``R``'s diagonal) whose rows are rescaled by the norms of independent Gaussian vectors, so every row is marginally
    ``N(0, I_dim)`` while rows within a block are exactly orthogonal (Performer's ORF). The same seed gives the same
    rows on every machine (CPU generator, float64). More rows than the memory available raise
    :class:`graphnorm.memory.InsufficientMemoryError` (a ``ValueError`` too) before anything is drawn.
    """
    check_fits(
        feature_bytes(num_features, dim),
        f"contranorm: random_features={num_features} on {dim} channels",
        "lower random_features",
    )
    generator = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(math.ceil(num_features / dim)):
        gaussian = torch.randn(dim, dim, generator=generator, dtype=torch.float64, device="cpu")
        q, r = torch.linalg.qr(gaussian)
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)  # Haar measure: the QR's sign convention removed
        lengths = torch.randn(dim, dim, generator=generator, dtype=torch.float64, device="cpu").norm(dim=1)  # chi_dim
        blocks.append(q.t() * lengths.unsqueeze(1))  # rows orthogonal, with Gaussian lengths
    return torch.cat(blocks, dim=0)[:num_features]


def feature_bytes(num_features: int, dim: int) -> int:
    """The most memory :func:`orthogonal_gaussian_features` holds at once: its float64 ``dim x dim`` blocks twice
    (the blocks and their concatenation), and one block's draws and QR factors."""
    blocks = -(-num_features // dim) if dim > 0 else 0  # ceil, exact for any int
    return 8 * dim * dim * (2 * blocks + 3)


def positive_features(x_hat: Tensor, inv_tau: float, weights: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Shifted positive features ``(queries, keys, log_scale)``, each ``[n, m]`` but ``log_scale`` ``[n, 1]``.

    ``queries_i * exp(log_scale_i) = phi(u_i)`` and ``keys_j * exp(shift) = phi(u_j)`` up to the common key shift,
    so ``sum_j queries_i . keys_j v_j`` times ``exp(log_scale_i)`` is the unbiased kernel sum (without ``1/m``).
    ``log_scale`` is the query's row shift plus the key shift (both detached: the ratio does not depend on them).
    """
    u_sq = x_hat.square().sum(dim=1, keepdim=True) * inv_tau  # [n, 1]: ||u||^2 (1/tau for non-zero rows)
    logits = torch.mm(x_hat, weights.t()) * math.sqrt(inv_tau) - 0.5 * u_sq  # [n, m]: W u - ||u||^2 / 2
    row_shift = logits.detach().amax(dim=1, keepdim=True)  # [n, 1]
    key_shift = row_shift.max() if row_shift.numel() > 0 else row_shift.new_zeros(())
    queries = torch.exp(logits - row_shift)  # [n, m], max 1 per row
    keys = queries * torch.exp(row_shift - key_shift)  # [n, m], one shift for every key
    return queries, keys, row_shift + key_shift


def random_feature_sums(
    x_hat: Tensor,
    values: Tensor,
    inv_tau: float,
    weights: Tensor,
    graph_sizes: list[int],
    excluded_rows: Tensor | None,
    excluded_cols: Tensor | None,
) -> tuple[Tensor, Tensor]:
    r"""The estimator's shifted sums over each node's negatives, ``(sums [n, d + 1], log_scale [n, 1])``.

    ``sums[:, :d] * exp(log_scale) / m`` estimates :math:`\sum_{j \in N^-(i)} \exp(S_{ij}) x_j` without bias, and
    ``sums[:, d] * exp(log_scale) / m`` the softmax denominator. Graphs are the contiguous runs of ``graph_sizes``
    nodes; ``excluded_rows``/``excluded_cols`` are unique pairs inside a graph (``None``: none).
    """
    queries, keys, log_scale = positive_features(x_hat, inv_tau, weights)
    values_ones = torch.cat([values, values.new_ones(values.size(0), 1)], dim=1)  # [n, d + 1]
    pieces, start = [], 0
    for size in graph_sizes:  # per-graph summaries: no mass crosses graphs
        end = start + size
        summary = torch.mm(keys[start:end].t(), values_ones[start:end])  # [m, d + 1]
        pieces.append(torch.mm(queries[start:end], summary))  # [size, d + 1]
        start = end
    sums = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)
    if excluded_rows is not None and excluded_rows.numel() > 0:
        sums = sums - _ExcludedPairSums.apply(queries, keys, values_ones, excluded_rows, excluded_cols)
    return sums, log_scale


def random_feature_mix(
    x_hat: Tensor,
    values: Tensor,
    inv_tau: float,
    weights: Tensor,
    graph_sizes: list[int],
    edge_rows: Tensor | None,
    edge_cols: Tensor | None,
    mask_self: bool,
) -> Tensor:
    """The estimate of ``P @ values`` ``[n, d]`` with ``m = weights.size(0)`` positive random features, per graph.

    Args:
        x_hat: the row-normalized features ``[n, d_hat]``.
        values: the mixed vectors ``[n, d]`` (the raw features).
        inv_tau: ``1 / tau``.
        weights: the random directions ``[m, d_hat]`` (:func:`orthogonal_gaussian_features`), in ``x_hat``'s dtype.
        graph_sizes: node counts of the graphs, whose nodes are contiguous in this order (sum ``n``).
        edge_rows, edge_cols: the excluded neighbour pairs (int64 node ids, inside one graph each; duplicates and
            self-loops allowed), ``None`` for none.
        mask_self: exclude each node itself too (the negatives form); False keeps it (the transformer form).
    """
    n, d = values.shape
    rows, cols, excluded_per_row = _unique_excluded_pairs(edge_rows, edge_cols, n, mask_self, values.device)
    sums, _ = random_feature_sums(x_hat, values, inv_tau, weights, graph_sizes, rows, cols)
    sizes = torch.tensor(graph_sizes, device=values.device)
    negatives = torch.repeat_interleave(sizes, sizes) - excluded_per_row  # [n] exact count of each row's negatives
    has_negatives = (negatives > 0).unsqueeze(1)  # [n, 1]
    tiny = torch.finfo(sums.dtype).tiny
    denom = torch.where(has_negatives, sums[:, d:].clamp_min(tiny), torch.ones_like(sums[:, d:]))
    return sums[:, :d] / denom * has_negatives  # rows without negatives: no repulsive term


def _unique_excluded_pairs(
    edge_rows: Tensor | None, edge_cols: Tensor | None, num_nodes: int, mask_self: bool, device: torch.device
) -> tuple[Tensor | None, Tensor | None, Tensor]:
    """The excluded pairs once each, ``(rows, cols)`` (``None`` for none), and how many each row has ``[n]``.

    The exact kernel masks a pair once however often it is listed, so duplicates must be subtracted once too."""
    pieces = []
    if edge_rows is not None and edge_rows.numel() > 0:
        pieces.append(edge_rows * num_nodes + edge_cols)
    if mask_self:
        self_ids = torch.arange(num_nodes, device=device)
        pieces.append(self_ids * num_nodes + self_ids)
    if not pieces:
        return None, None, torch.zeros(num_nodes, dtype=torch.long, device=device)
    keys = torch.unique(torch.cat(pieces))  # sorted row-major
    rows, cols = keys // num_nodes, keys % num_nodes
    return rows, cols, torch.bincount(rows, minlength=num_nodes)


class _ExcludedPairSums(torch.autograd.Function):
    r"""``C_i = sum_{(i, j) excluded} (q_i . k_j) [v_j, 1]`` ``[n, d + 1]`` through sparse kernels, no gathers.

    The pair weights ``e_ij = q_i . k_j`` are a sampled dense-dense product on the pairs' CSR pattern
    (``torch.sparse.sampled_addmm``), and ``C = E [v, 1]`` a sparse-dense product; autograd through gathered
    ``[E, m]`` rows would keep them alive until backward and run memory-bound (measured several times slower).
    Backward, with ``h = dC``: ``de_ij = h_i . [v_j, 1]`` (sampled again), ``dq = dE k``, ``dk = dE^T q``,
    ``d[v, 1] = E^T h``; the transposed pattern is built once in forward.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, queries: Tensor, keys: Tensor, values_ones: Tensor, rows: Tensor, cols: Tensor):
        n = queries.size(0)
        pattern = _csr(rows, cols, queries.new_zeros(rows.numel()), n)
        pair_weights = torch.sparse.sampled_addmm(pattern, queries, keys.t()).values()  # [E]: q_i . k_j
        out = torch.mm(_csr(rows, cols, pair_weights, n), values_ones)  # [n, d + 1]
        ctx.save_for_backward(queries, keys, values_ones, rows, cols, pair_weights)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        queries, keys, values_ones, rows, cols, pair_weights = ctx.saved_tensors
        n = queries.size(0)
        grad_out = grad_out.contiguous()
        by_col = torch.argsort(cols * n + rows)  # the transposed pattern, row-major
        rows_t, cols_t = cols[by_col], rows[by_col]
        grad_q = grad_k = grad_v = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            pattern = _csr(rows, cols, grad_out.new_zeros(rows.numel()), n)
            grad_weights = torch.sparse.sampled_addmm(pattern, grad_out, values_ones.t()).values()  # [E]: dL/de
            if ctx.needs_input_grad[0]:
                grad_q = torch.mm(_csr(rows, cols, grad_weights, n), keys)
            if ctx.needs_input_grad[1]:
                grad_k = torch.mm(_csr(rows_t, cols_t, grad_weights[by_col], n), queries)
        if ctx.needs_input_grad[2]:
            grad_v = torch.mm(_csr(rows_t, cols_t, pair_weights[by_col], n), grad_out)
        return grad_q, grad_k, grad_v, None, None


def _csr(rows: Tensor, cols: Tensor, values: Tensor, num_nodes: int) -> Tensor:
    """An ``[n, n]`` sparse CSR matrix from row-major sorted unique ``(rows, cols)`` pairs and their values."""
    return csr_from_edges(rows, cols, values, (num_nodes, num_nodes), presorted=True)
