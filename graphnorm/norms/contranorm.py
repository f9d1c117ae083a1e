"""ContraNorm (Guo et al., ICLR 2023), per graph and in memory linear in the number of nodes.

:class:`ContraNorm` subtracts from each node a softmax-weighted mean of its graph's negatives, ``P x``, computed by one
of the exact kernels of :mod:`graphnorm.norms.ops.contranorm_exact` (padded dense blocks for runs of small graphs,
streaming row blocks for one large graph) or, when the excluded pairs are symmetric, the one on half of the tiles
(:mod:`graphnorm.norms.ops.contranorm_symmetric_tiles`); this module applies, graph by graph, the choice among them
that :mod:`graphnorm.norms.ops.contranorm_kernel_choice` makes from the graph's size, the device and its free memory.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphnorm.checks import check_count, check_edge_index, check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops import contranorm_exact, contranorm_random_features, contranorm_symmetric_tiles
from graphnorm.norms.ops.contranorm_kernel_choice import (
    DENSE_MAX_NODES,
    dense_node_limit,
    free_device_memory,
    large_graph_kernel,
)
from graphnorm.norms.ops.precision import cast
from graphnorm.norms.registry import register_norm

# DENSE_MAX_NODES (from contranorm_kernel_choice, read here at each call): the dense limit off CUDA.
# Padded dense chunks hold at most this many similarity entries (graphs * max_nodes^2): 16 MB per float32 tensor.
DENSE_CHUNK_ELEMENTS = 1 << 22


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
        dense_max_nodes: the largest graph computed through padded dense ``n x n`` blocks, on every device; larger
            ones go through the tiled or streaming kernels. All are exact: a huge value gives the reference's dense
            computation (to compare time and memory), 0 streams every graph. ``None`` (default): the rule of
            :func:`~graphnorm.norms.ops.contranorm_kernel_choice.dense_node_limit`, ``DENSE_MAX_NODES`` (256) off
            CUDA; on CUDA every graph whose dense blocks, with those of the call's other graphs, fit in a quarter of
            the free device memory (Cora's 2,708 nodes in float32 take about 130 MB), the streaming kernel beyond.
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
        if self.random_features is not None:
            return self._random_feature_mix(x, x_hat, batch, edge_index, inv_tau, mask_self)

        if batch is None:
            return self._single_graph_mix(x, x_hat, inv_tau, edge_index, mask_self, self._dense_limit(x, [n]))
        batch, x, x_hat, edge_index, inverse = _group_nodes_by_graph(batch.long(), x, x_hat, edge_index)
        edge_rows, edge_cols = _row_sorted_edges(edge_index, batch, n)
        graph_sizes = torch.unique_consecutive(batch, return_counts=True)[1].tolist()
        dense_limit = self._dense_limit(x, graph_sizes)
        pieces = [
            _segment_negative_mix(segment, x, x_hat, batch, inv_tau, edge_rows, edge_cols, mask_self)
            for segment in _graph_segments(graph_sizes, dense_limit)
        ]
        mixed = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=0)  # [n, d]
        return mixed if inverse is None else mixed[inverse]

    def _dense_limit(self, x: Tensor, graph_sizes: list[int]) -> int:
        """The largest graph of this call that takes the dense kernel
        (:func:`~graphnorm.norms.ops.contranorm_kernel_choice.dense_node_limit`)."""
        free = free_device_memory(x.device) if self.dense_max_nodes is None else None
        return dense_node_limit(
            graph_sizes, x.size(1), x.device.type, free, x.dtype, dense_max_nodes=self.dense_max_nodes,
            fixed_limit=DENSE_MAX_NODES,
        )  # fmt: skip

    def _single_graph_mix(
        self, x: Tensor, x_hat: Tensor, inv_tau: float, edge_index: Tensor | None, mask_self: bool, dense_limit: int
    ) -> Tensor:
        """One graph (no ``batch``): as few small ops as possible, since each costs a thread sync on a busy CPU."""
        n = x.size(0)
        edge_rows = edge_cols = None
        if edge_index is not None and edge_index.numel() > 0:
            edge_rows, edge_cols = edge_index[0].long(), edge_index[1].long()
            # row blocks need the edges sorted by row
            if n * n > contranorm_exact.SINGLE_BLOCK_ELEMENTS and n > dense_limit:
                sort = torch.argsort(edge_rows * n + edge_cols)
                edge_rows, edge_cols = edge_rows[sort], edge_cols[sort]
        if n <= dense_limit:
            local_batch = torch.zeros(n, dtype=torch.long, device=x.device)
            return contranorm_exact.dense_negative_mix(
                x_hat, x, local_batch, 1, inv_tau, edge_rows, edge_cols, mask_self
            )
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
    (undirected edges) and no weight can underflow, except on CUDA, else through the row-block kernel
    (:func:`~graphnorm.norms.ops.contranorm_kernel_choice.large_graph_kernel`). Both are exact."""

    def tiles_apply() -> bool:
        return contranorm_symmetric_tiles.fits(inv_tau, x_hat.dtype) and contranorm_symmetric_tiles.is_symmetric(
            edge_rows, edge_cols, x_hat.size(0)
        )

    if large_graph_kernel(x_hat.device.type, tiles_apply) == "tiled":
        return contranorm_symmetric_tiles.SymmetricNegativeMix.apply(
            x_hat, values, inv_tau, edge_rows, edge_cols, mask_self
        )
    return contranorm_exact.StreamingNegativeMix.apply(x_hat, values, inv_tau, edge_rows, edge_cols, mask_self)


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
    return contranorm_exact.dense_negative_mix(
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
