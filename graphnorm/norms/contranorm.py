"""ContraNorm (Guo et al., ICLR 2023), per graph and in memory linear in the number of nodes.

:class:`ContraNorm` subtracts from each node a softmax-weighted mean of its graph's negatives, ``P x``, computed by one
of three exact kernels: padded dense blocks for runs of small graphs (:func:`_dense_negative_mix`, plain autograd),
a streaming row-block kernel for one large graph (:class:`_StreamingNegativeMix`), and, when the excluded pairs are
symmetric, one on half of the tiles (:mod:`graphnorm.norms.ops.contranorm_symmetric_tiles`).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable
from torch_geometric.utils import to_dense_batch

from graphnorm.checks import check_count, check_edge_index, check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops import contranorm_random_features, contranorm_symmetric_tiles
from graphnorm.norms.ops.precision import cast
from graphnorm.norms.registry import register_norm

# Graphs with at most this many nodes go through padded dense blocks [graphs, max_nodes, max_nodes] (plain autograd,
# a handful of batched ops for a whole mini-batch of molecules); larger ones through the streaming kernels, whose
# per-graph Python loop would dominate for many small graphs. Both are exact; the cut only moves time.
DENSE_MAX_NODES = 256
# Padded dense chunks hold at most this many similarity entries (graphs * max_nodes^2): 16 MB per float32 tensor.
DENSE_CHUNK_ELEMENTS = 1 << 22
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


def _block_bounds(num_rows: int, num_cols: int) -> list[int]:
    """Row-block boundaries ``[0, b, 2b, ..., num_rows]`` so that a block ``[b, num_cols]`` has ~BLOCK_ELEMENTS."""
    if num_rows * num_cols <= SINGLE_BLOCK_ELEMENTS:
        return [0, num_rows]
    rows = max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // max(num_cols, 1))
    return list(range(0, num_rows, rows)) + [num_rows]


def _mask_block(logits: Tensor, row_start: int, rows: Tensor | None, cols: Tensor | None, mask_self: bool) -> None:
    """Set the excluded entries of a row block ``[b, n]`` (rows ``row_start..``) to ``-inf`` in place.

    ``rows``/``cols`` are the block's neighbour pairs (global row ids, sorted by row), ``None`` for none.
    """
    if mask_self:
        # entries (i, row_start + i): the node itself
        logits.diagonal(offset=row_start).fill_(-math.inf)
    if rows is not None and rows.numel() > 0:
        logits.index_put_((rows - row_start, cols), logits.new_tensor(-math.inf))


class _StreamingNegativeMix(torch.autograd.Function):
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
        bounds = _block_bounds(n, n)
        edge_ptr = _edge_block_ptr(edge_rows, bounds)
        ones = x_hat.new_ones(n, 1)
        keys = torch.cat([x_hat, ones], dim=1)  # [n, d_hat + 1]
        values_ones = torch.cat([values, ones], dim=1)  # [n, d + 1]
        queries = torch.cat([x_hat * inv_tau, x_hat.new_full((n, 1), -inv_tau)], dim=1)  # [n, d_hat + 1]
        out = torch.empty_like(values)  # [n, d]
        lse = torch.empty(n, 1, dtype=x_hat.dtype, device=x_hat.device)  # row log-sum-exp over the negatives
        kept_probs = None
        small = math.sqrt(torch.finfo(x_hat.dtype).tiny)
        for i, (r0, r1) in enumerate(zip(bounds[:-1], bounds[1:])):
            block_rows, block_cols = _block_edges(edge_rows, edge_cols, edge_ptr, i)
            weights = torch.mm(queries[r0:r1], keys.t())  # [b, n]: S - 1/tau <= 0
            _mask_block(weights, r0, block_rows, block_cols, mask_self)
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
        bounds = _block_bounds(n, n)
        edge_ptr = _edge_block_ptr(edge_rows, bounds)
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
                _mask_block(probs, r0, *_block_edges(edge_rows, edge_cols, edge_ptr, i), mask_self)
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


def _edge_block_ptr(edge_rows: Tensor | None, bounds: list[int]) -> list[int] | None:
    """Offsets into the row-sorted edge list where each row block starts."""
    if edge_rows is None:
        return None
    if len(bounds) == 2:  # one block takes every edge; the edges need not be sorted then
        return [0, edge_rows.numel()]
    return torch.searchsorted(edge_rows, torch.tensor(bounds, device=edge_rows.device)).tolist()


def _block_edges(
    edge_rows: Tensor | None, edge_cols: Tensor | None, edge_ptr: list[int] | None, block: int
) -> tuple[Tensor | None, Tensor | None]:
    """The excluded pairs ``(rows, cols)`` of row block ``block`` (``(None, None)`` for none)."""
    if edge_rows is None or edge_ptr is None:
        return None, None
    lo, hi = edge_ptr[block], edge_ptr[block + 1]
    return edge_rows[lo:hi], edge_cols[lo:hi]


def _dense_negative_mix(
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


class NeighborsNotExcludedWarning(UserWarning):
    """ContraNorm with ``exclude_neighbors=True`` was called without ``edge_index`` and took all nodes as negatives."""


@register_norm("contranorm")
class ContraNorm(NormBase):
    r"""ContraNorm, per graph, from `"ContraNorm: A Contrastive Learning Perspective on Oversmoothing and Beyond"
    <https://arxiv.org/abs/2303.06562>`_ (Guo et al., ICLR 2023), the graph version of the official code
    (``gnn/layers.py``, ``NormLayer`` mode ``'CN'``):

    .. math::
        \hat{\mathbf{x}}_i = \mathbf{x}_i / \|\mathbf{x}_i\|_2, \qquad
        S_{ij} = \hat{\mathbf{x}}_i^\top \hat{\mathbf{x}}_j / \tau, \qquad
        P_{ij} = \frac{\exp S_{ij}}{\sum_{k \in \mathcal{N}^-(i)} \exp S_{ik}} \ (j \in \mathcal{N}^-(i)),

    .. math::
        \mathbf{x}'_i = \mathrm{LayerNorm}\Big((1 + s)\,\mathbf{x}_i - s \sum_{j} P_{ij} \mathbf{x}_j\Big)

    where the negatives :math:`\mathcal{N}^-(i)` are the nodes of node :math:`i`'s graph that are neither :math:`i` nor
    a neighbour of :math:`i` (pairs ``(edge_index[0], edge_index[1])`` are excluded, as the reference's
    ``sim[adj[0], adj[1]] = -inf``, whose adjacency carries self-loops). As in the official code, the mixed vectors are
    the raw features (``x_neg = sim @ x``); only the similarity uses the normalized ones.

    Args:
        channels: features per node.
        scale: :math:`s`, any finite number (default 1.0).
        tau: the temperature :math:`\tau` (default 1.0).
        exclude_neighbors: the negatives as above (default True); False gives the transformer form, a softmax over all
            nodes of the graph with the node itself included, and needs no ``edge_index``. With True, a call without
            ``edge_index`` computes that all-nodes form too, with a :class:`NeighborsNotExcludedWarning` at the
            first such call of the instance (see below).
        identity: the :math:`(1 + s)\,\mathbf{x}_i` term (default True); False gives :math:`\mathbf{x} - sP\mathbf{x}`.
        layer_norm: the trailing ``LayerNorm(channels)`` (default True: the official training scripts always use it,
            ``use_layer_norm``).
        dense_max_nodes: the largest graph computed through padded dense ``n x n`` blocks (``None``:
            ``DENSE_MAX_NODES``); larger ones go through the streaming kernels. Both are exact: a huge value gives the
            reference's dense computation (to compare time and memory), 0 streams every graph.
        random_features: ``None`` (default) computes ``P x`` exactly; a positive int ``m`` switches every graph to
            the linear-time estimator of :mod:`~graphnorm.norms.ops.contranorm_random_features` with ``m`` positive
            random features (FAVOR+; time ``O(n m d + E m)``, memory linear in ``n``): numerator and denominator
            unbiased, their ratio biased by ``O(1/m)``, standard error ``O(1/sqrt(m))``. For graphs too large for the
            exact kernels' ``n^2`` time; ``dense_max_nodes`` does not apply then.
        feature_seed: seeds the random features' draw, made once when the module is built (fixed for its life, so
            the same seed and input give the same output, in training and evaluation alike; default 0).

    Differences from the reference, on purpose: a node with no negatives (adjacent to every other node, or alone in its
    graph) gets no repulsive term (:math:`P_{i\cdot} = 0`) where the reference returns NaN; the softmax is per graph in
    mini-batches (the reference's GIN builds one adjacency over the whole batch, so negatives leak across graphs); and
    a graph above ``dense_max_nodes`` never materializes its ``n x n`` similarity: a streaming row-block kernel with a
    recomputing backward keeps memory linear in ``n``, on half of the tiles when the excluded pairs are symmetric
    (:mod:`~graphnorm.norms.ops.contranorm_symmetric_tiles`). Backward runs again through a retained graph with the
    same gradients; double backward (a gradient of the gradient) is not supported. Half-precision input is computed
    in float32 throughout, the LayerNorm included (in half, the softmax sums and ``P x`` would keep 8 or 11 bits).

    Inside a model that calls its norms without ``edge_index`` (PyG's ``GCN``, ``GAT``, ``GraphSAGE``, ``GIN`` call
    ``norm(x, batch, batch_size)``, ``GPSConv`` calls ``norm(x, batch=batch)``), the default form has no neighbours
    to leave out: it then takes every node of the graph as a negative, exactly as ``exclude_neighbors=False``, and
    warns once per instance with :class:`NeighborsNotExcludedWarning`. One call after building the model,
    :func:`graphnorm.norms.pass_edge_index` ``(model)``, hands the model's ``edge_index`` to its norms, and the
    neighbours are left out again; building with ``exclude_neighbors=False`` keeps the all-nodes form and silences
    the warning.

    Raises:
        ValueError: ``tau`` not a finite number > 0, ``scale`` not finite, ``dense_max_nodes`` not a non-negative int,
            ``random_features`` not a positive int or ``None``, ``feature_seed`` not an int;
            in forward, a malformed ``edge_index`` or one joining two graphs, or an input on the meta device (the
            negatives depend on values it does not have).
        TypeError: ``edge_index`` is not an integer tensor.
    """

    per_graph = True

    def __init__(
        self,
        channels: int,
        scale: float = 1.0,
        tau: float = 1.0,
        exclude_neighbors: bool = True,
        identity: bool = True,
        layer_norm: bool = True,
        dense_max_nodes: int | None = None,
        random_features: int | None = None,
        feature_seed: int = 0,
    ) -> None:
        super().__init__()
        if not (isinstance(scale, (int, float)) and math.isfinite(scale)):
            raise ValueError(f"contranorm: scale must be a finite number, got {scale!r}")
        if dense_max_nodes is not None:
            dense_max_nodes = check_count(dense_max_nodes, "dense_max_nodes", "contranorm", 0, "a non-negative int")
        self.channels = channels
        self.dense_max_nodes = dense_max_nodes
        self.use_random_features(random_features, feature_seed)
        self.scale = float(scale)
        self.tau = check_positive(tau, "tau", "contranorm")
        self.exclude_neighbors = bool(exclude_neighbors)
        self.identity = bool(identity)
        self.layer_norm = nn.LayerNorm(channels) if layer_norm else None

    def _check_inputs(self, x: Tensor, batch: Tensor | None, batch_size: int | None, edge_index: Tensor | None) -> None:
        _reject_meta(x=x, batch=batch, edge_index=edge_index)
        super()._check_inputs(x, batch, batch_size, edge_index)
        if self.exclude_neighbors and edge_index is None:
            self._warn_all_nodes()
        if self.exclude_neighbors and edge_index is not None:
            check_edge_index(edge_index, x.size(0), where="contranorm")

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None, edge_index: Tensor | None) -> Tensor:
        # the pairs left out of the negatives, as int64 (the index ops below need it)
        excluded = edge_index.long() if self.exclude_neighbors and edge_index is not None else None
        mixed = self.negative_mix(x, batch, excluded)
        start = (1.0 + self.scale) * x if self.identity else x
        out = start - self.scale * mixed
        return self._final_norm(out) if self.layer_norm is not None else out

    @property
    def needs_edge_index(self) -> bool:
        """Whether the negatives leave neighbours out (then a call without ``edge_index`` takes all nodes)."""
        return self.exclude_neighbors

    def _warn_all_nodes(self) -> None:
        """:class:`NeighborsNotExcludedWarning`, once per instance: a call without ``edge_index`` took all nodes."""
        if self.__dict__.get("_warned_all_nodes", False):
            return
        self.__dict__["_warned_all_nodes"] = True
        warnings.warn(
            "contranorm: called without edge_index (as PyG's GCN, GAT, GraphSAGE, GIN and GPSConv call their norms), "
            "so its negatives are all nodes of each graph (the form of exclude_neighbors=False), not the "
            "non-neighbours. To leave neighbours out, call graphnorm.norms.pass_edge_index(model) once after building "
            "the model; to keep the all-nodes form without this warning, build with exclude_neighbors=False",
            NeighborsNotExcludedWarning,
            stacklevel=3,
        )

    def _final_norm(self, x: Tensor) -> Tensor:
        """The trailing LayerNorm, its parameters cast to ``x``'s dtype (``nn.LayerNorm`` needs them equal)."""
        norm = self.layer_norm
        return F.layer_norm(x, norm.normalized_shape, cast(norm.weight, x.dtype), cast(norm.bias, x.dtype), norm.eps)

    def negative_mix(self, x: Tensor, batch: Tensor | None, edge_index: Tensor | None) -> Tensor:
        """``P x`` ``[num_nodes, channels]``: each node's softmax-weighted mean over its negatives (per graph)."""
        n = x.size(0)
        mask_self = edge_index is not None  # the transformer form keeps the node itself
        inv_tau = 1.0 / self.tau
        x_hat = F.normalize(x, dim=1)  # row L2, eps 1e-12 as in the reference
        dense_limit = DENSE_MAX_NODES if self.dense_max_nodes is None else self.dense_max_nodes
        if self.random_features is not None:
            return self._random_feature_mix(x, x_hat, batch, edge_index, inv_tau, mask_self)

        if batch is None:
            return self._single_graph_mix(x, x_hat, inv_tau, edge_index, mask_self, dense_limit)
        batch, x, x_hat, edge_index, inverse = _group_nodes_by_graph(batch.long(), x, x_hat, edge_index)
        edge_rows, edge_cols = _row_sorted_edges(edge_index, batch, n)
        graph_sizes = torch.unique_consecutive(batch, return_counts=True)[1].tolist()
        pieces = [
            _segment_negative_mix(segment, x, x_hat, batch, inv_tau, edge_rows, edge_cols, mask_self)
            for segment in _graph_segments(graph_sizes, dense_limit)
        ]
        mixed = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)  # [n, d]
        return mixed if inverse is None else mixed[inverse]

    def _single_graph_mix(
        self, x: Tensor, x_hat: Tensor, inv_tau: float, edge_index: Tensor | None, mask_self: bool, dense_limit: int
    ) -> Tensor:
        """One graph (no ``batch``): as few small ops as possible, since each costs a thread sync on a busy CPU."""
        n = x.size(0)
        edge_rows = edge_cols = None
        if edge_index is not None and edge_index.numel() > 0:
            edge_rows, edge_cols = edge_index[0].long(), edge_index[1].long()
            if n * n > SINGLE_BLOCK_ELEMENTS and n > dense_limit:  # row blocks need the edges sorted by row
                sort = torch.argsort(edge_rows * n + edge_cols)
                edge_rows, edge_cols = edge_rows[sort], edge_cols[sort]
        if n <= dense_limit:
            local_batch = torch.zeros(n, dtype=torch.long, device=x.device)
            return _dense_negative_mix(x_hat, x, local_batch, 1, inv_tau, edge_rows, edge_cols, mask_self)
        return _large_graph_mix(x_hat, x, inv_tau, edge_rows, edge_cols, mask_self)

    def _random_feature_mix(
        self, x: Tensor, x_hat: Tensor, batch: Tensor | None, edge_index: Tensor | None, inv_tau: float, mask_self: bool
    ) -> Tensor:
        """The linear-time estimate of ``P x`` (:mod:`~graphnorm.norms.ops.contranorm_random_features`), graph by
        graph."""
        n = x.size(0)
        weights = self.feature_weights.to(device=x.device, dtype=x.dtype)
        if batch is None:
            rows, cols = (None, None) if edge_index is None else (edge_index[0], edge_index[1])
            return contranorm_random_features.random_feature_mix(x_hat, x, inv_tau, weights, [n], rows, cols, mask_self)
        batch, x, x_hat, edge_index, inverse = _group_nodes_by_graph(batch.long(), x, x_hat, edge_index)
        rows, cols = _row_sorted_edges(edge_index, batch, n)  # also rejects edges between graphs
        sizes = torch.unique_consecutive(batch, return_counts=True)[1].tolist()
        mixed = contranorm_random_features.random_feature_mix(x_hat, x, inv_tau, weights, sizes, rows, cols, mask_self)
        return mixed if inverse is None else mixed[inverse]

    def use_random_features(self, random_features: int | None, feature_seed: int = 0) -> None:
        """Switch this module's ``P x`` to the estimator with ``random_features`` features drawn from
        ``feature_seed``, or back to the exact form (``None``), as if built with them: the weights do not change
        (the features are not parameters), so a trained network can be scored with either form. ``ValueError`` as
        the constructor's."""
        self.random_features, self.feature_seed = _check_random_features(random_features, feature_seed)
        # float64 on the CPU, cast where used; a plain attribute, so checkpoints and state dicts do not change
        self.feature_weights = (
            None
            if self.random_features is None
            else contranorm_random_features.orthogonal_gaussian_features(
                self.random_features, self.channels, self.feature_seed
            )
        )

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, scale={self.scale}, tau={self.tau}, exclude_neighbors={self.exclude_neighbors}, "
            f"identity={self.identity}, layer_norm={self.layer_norm is not None}, "
            f"dense_max_nodes={self.dense_max_nodes}"
            + (
                ""
                if self.random_features is None
                else f", random_features={self.random_features}, feature_seed={self.feature_seed}"
            )
        )


def _check_random_features(random_features: object, feature_seed: object) -> tuple[int | None, int]:
    """``(random_features, feature_seed)`` checked: a positive int or ``None``, and an int."""
    if random_features is not None:
        random_features = check_count(random_features, "random_features", "contranorm", 1, "a positive int or None")
    return random_features, check_count(feature_seed, "feature_seed", "contranorm", -(2**63), "an int")


def _reject_meta(**tensors: Tensor | None) -> None:
    """``ValueError`` naming the first input on the meta device: the negatives, the graph sizes and the kernel
    choice depend on the values (edges, graph ids), which a meta tensor does not have."""
    for name, tensor in tensors.items():
        if isinstance(tensor, Tensor) and tensor.device.type == "meta":
            raise ValueError(
                f"contranorm: {name} is on the meta device (it has no values, and the negatives depend on them); "
                "pass CPU or GPU tensors"
            )


def _large_graph_mix(
    x_hat: Tensor, values: Tensor, inv_tau: float, edge_rows: Tensor | None, edge_cols: Tensor | None, mask_self: bool
) -> Tensor:
    """``P @ v`` for one graph above the dense limit: from half of the tiles when the exclusion mask is symmetric
    (undirected edges) and no weight can underflow, else through the row-block kernel. Both are exact."""
    if contranorm_symmetric_tiles.fits(inv_tau, x_hat.dtype) and contranorm_symmetric_tiles.is_symmetric(
        edge_rows, edge_cols, x_hat.size(0)
    ):
        return contranorm_symmetric_tiles.SymmetricNegativeMix.apply(
            x_hat, values, inv_tau, edge_rows, edge_cols, mask_self
        )
    return _StreamingNegativeMix.apply(x_hat, values, inv_tau, edge_rows, edge_cols, mask_self)


def _group_nodes_by_graph(
    batch: Tensor, x: Tensor, x_hat: Tensor, edge_index: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """Nodes reordered so each graph's are contiguous: ``(batch, x, x_hat, edge_index, inverse)``.

    ``inverse`` maps the reordered rows back (``None`` when the nodes already were in order, as in PyG batches).
    """
    n = x.size(0)
    if not (n > 1 and bool((batch[1:] < batch[:-1]).any())):
        return batch, x, x_hat, edge_index, None
    # per-graph slices need each graph's nodes contiguous; a stable sort keeps their order inside a graph
    order = torch.argsort(batch, stable=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(n, device=x.device)
    if edge_index is not None:
        edge_index = inverse[edge_index]
    return batch[order], x[order], x_hat[order], edge_index, inverse


def _row_sorted_edges(edge_index: Tensor | None, batch: Tensor, num_nodes: int) -> tuple[Tensor | None, Tensor | None]:
    """The excluded pairs as ``(rows, cols)`` sorted row-major (``None`` for none); rejects cross-graph edges."""
    if edge_index is None or edge_index.numel() == 0:
        return None, None
    edge_rows, edge_cols = edge_index[0].long(), edge_index[1].long()
    if bool((batch[edge_rows] != batch[edge_cols]).any()):
        raise ValueError("contranorm: edge_index connects nodes of different graphs in the batch")
    sort = torch.argsort(edge_rows * num_nodes + edge_cols)  # row-major, so each row block's edges are a slice
    return edge_rows[sort], edge_cols[sort]


class _GraphSegment(NamedTuple):
    """Nodes ``[start, end)`` of a batch computed in one call: a run of ``num_graphs`` small graphs through padded
    dense blocks (``dense``), or one large graph through the tiled kernels."""

    start: int
    end: int
    num_graphs: int
    dense: bool


def _graph_segments(graph_sizes: list[int], dense_limit: int) -> list[_GraphSegment]:
    """Consecutive graphs grouped into segments: small graphs (at most ``dense_limit`` nodes) share a padded run
    until ``graphs * max_nodes^2`` would pass DENSE_CHUNK_ELEMENTS; each larger graph is a segment of its own."""
    segments: list[_GraphSegment] = []
    start = 0
    run_start = 0  # first node of the current run of consecutive small graphs
    run_graphs = 0
    run_max = 0
    for size in graph_sizes:
        end = start + size
        if size <= dense_limit:
            new_max = max(run_max, size)
            if run_graphs > 0 and (run_graphs + 1) * new_max * new_max > DENSE_CHUNK_ELEMENTS:
                segments.append(_GraphSegment(run_start, start, run_graphs, True))
                run_graphs, new_max = 0, size
            if run_graphs == 0:
                run_start = start
            run_graphs += 1
            run_max = new_max
        else:
            if run_graphs > 0:
                segments.append(_GraphSegment(run_start, start, run_graphs, True))
            run_graphs, run_max = 0, 0
            segments.append(_GraphSegment(start, end, 1, False))
        start = end
    if run_graphs > 0:
        segments.append(_GraphSegment(run_start, start, run_graphs, True))
    return segments


def _segment_negative_mix(
    segment: _GraphSegment,
    x: Tensor,
    x_hat: Tensor,
    batch: Tensor,
    inv_tau: float,
    edge_rows: Tensor | None,
    edge_cols: Tensor | None,
    mask_self: bool,
) -> Tensor:
    """``P x`` for the nodes of one segment, with its edges renumbered from the segment's first node."""
    start, end = segment.start, segment.end
    rows, cols = _edges_in_range(edge_rows, edge_cols, start, end)
    rows = None if rows is None else rows - start
    cols = None if cols is None else cols - start
    if not segment.dense:
        return _large_graph_mix(x_hat[start:end], x[start:end], inv_tau, rows, cols, mask_self)
    local_batch = torch.unique_consecutive(batch[start:end], return_inverse=True)[1]
    return _dense_negative_mix(
        x_hat[start:end], x[start:end], local_batch, segment.num_graphs, inv_tau, rows, cols, mask_self
    )


def _edges_in_range(
    edge_rows: Tensor | None, edge_cols: Tensor | None, start: int, end: int
) -> tuple[Tensor | None, Tensor | None]:
    """The (row-sorted) edges whose row lies in ``[start, end)``; edges never cross graphs, so columns do too."""
    if edge_rows is None:
        return None, None
    lo, hi = torch.searchsorted(edge_rows, torch.tensor([start, end], device=edge_rows.device)).tolist()
    if lo == hi:
        return None, None
    return edge_rows[lo:hi], edge_cols[lo:hi]
