"""All collapse metrics of a representation, per graph in a batch, as tidy records ``{rows, metric, stat, value}``.

:func:`collapse_records` measures one representation and :func:`collapse_metrics` flattens its records to a dict;
:func:`collapse_records_layers` measures many layers over the same rows at once (the probe's path, layers of equal
width stacked) and :class:`LayerStream` does the same one layer at a time. The metrics' definitions are the
one-matrix functions of :mod:`graphnorm.analysis.metrics` and :mod:`graphnorm.analysis.cone`, which the tests hold
this batched path to; :mod:`graphnorm.analysis.probe` feeds it a model's layers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from graphnorm.analysis.cone import ROBUST_CONE_LEVEL, exact_and_robust_cones, layer_cones, stacked_cones
from graphnorm.analysis.magnitude import SAFE_EXPONENT, check_not_too_large, invariant_shift, scale_by_power_of_two
from graphnorm.analysis.metrics import gram_matrix, spectrum_from_gram
from graphnorm.analysis.min_norm_point import WORKING_SIZE
from graphnorm.checks import check_choice, check_edge_index
from graphnorm.compiled import kernel
from graphnorm.threads import single_thread

__all__ = [
    "single_thread",
    "warm_kernels",
    "LayerStream",
    "collapse_records",
    "collapse_records_layers",
    "collapse_metrics",
    "records_to_flat_dict",
    "METRIC_NAMES",
]

# Metrics per graph (and pooled when marked) in the order they appear in tables.
PER_GRAPH_METRICS = (
    "effective_rank",
    "stable_rank",
    "mean_cosine",
    "cone_angle",
    "cone_angle_q90",
    "mad",
    "mad_neighbors",
    "dirichlet_energy",
    "dirichlet_energy_normalized",
    "zero_row_fraction",
)
EDGE_METRICS = ("mad_neighbors", "dirichlet_energy", "dirichlet_energy_normalized")
# Pooled over all rows of a batch: every per-graph metric but the edge ones (edges never cross graphs).
POOLED_METRICS = tuple(metric for metric in PER_GRAPH_METRICS if metric not in EDGE_METRICS)
METRIC_NAMES = PER_GRAPH_METRICS

# How the rows are kept: "float64" copies them to float64 (the reference), "float32" keeps float32 rows (float64
# input is rounded to float32) and widens them in registers; both accumulate every sum in float64.
PRECISIONS = ("float64", "float32")
_ROW_DTYPES = {"float64": torch.float64, "float32": torch.float32}

# Float64 working memory per chunk of stacked layers ([layers, rows, d] a few times and the edge gathers).
_CHUNK_BYTES = 64 * 2**20
# Chunks a background stream lets wait for its second thread before the caller measures one itself.
_QUEUED_CHUNKS = 2
_ROWS_KEY = ("rows",)  # a LayerStream's pool also keeps the edge structure of its last rows under this key


def spectrum_metric_name(index: int) -> str:
    """The metric name of normalized singular value ``index``: ``sv_000``, ``sv_001``, ..."""
    return f"sv_{index:03d}"


def _numpy(tensor: Tensor | None) -> np.ndarray | None:
    """A NumPy view of a CPU tensor (None stays None)."""
    return None if tensor is None else tensor.numpy()


# --- the rows and edges shared by every layer ---------------------------------------------------------------
@dataclass
class _Rows:
    """Validated context of one probe, computed once for all layers: which rows are node / token rows, the
    graph of every node row, and the edge structure between node rows."""

    num_rows: int
    node_rows: Tensor | None  # indices of node rows in x (None: all rows)
    token_rows: Tensor | None  # indices of token rows (None: no token rows)
    batch: Tensor | None  # graph id per node row (None: one graph, stat "value")
    num_graphs: int
    node_counts: Tensor | None  # [num_graphs] float64
    # Edges between node rows (node-row indices), self-loops dropped (they add nothing to either edge metric).
    # When the edge multiset is symmetric (undirected graphs stored both ways) only one direction of each pair
    # is kept and edge_both_ways is set: every sum over edges then counts each kept edge for both directions.
    edge_source: Tensor | None
    edge_target: Tensor | None
    edge_graph: Tensor | None  # graph of each kept edge (batched input)
    edge_both_ways: bool

    # NumPy views for the edge metrics (set from the fields above): endpoints, graphs, node rows per graph.
    edge_source_np: np.ndarray | None = field(init=False)
    edge_target_np: np.ndarray | None = field(init=False)
    edge_graph_np: np.ndarray | None = field(init=False)
    batch_np: np.ndarray | None = field(init=False)
    node_counts_np: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.edge_source_np, self.edge_target_np = _numpy(self.edge_source), _numpy(self.edge_target)
        self.edge_graph_np, self.batch_np = _numpy(self.edge_graph), _numpy(self.batch)
        counts = self.node_counts if self.node_counts is not None else torch.tensor([float(self.num_node_rows)])
        self.node_counts_np = counts.to(torch.float64).numpy()

    @property
    def num_edges(self) -> int:
        """Kept edges (one direction per pair when edge_both_ways)."""
        return 0 if self.edge_source is None else self.edge_source.numel()

    @property
    def num_node_rows(self) -> int:
        """Rows that are not token rows."""
        return self.num_rows if self.node_rows is None else int(self.node_rows.numel())


def _build_rows(n: int, edge_index: Tensor | None, batch: Tensor | None, token_mask: Tensor | None) -> _Rows:
    """Validate the probe's context (``edge_index``, ``batch``, ``token_mask`` over ``n`` rows) and build the
    :class:`_Rows` every layer shares."""
    if edge_index is not None:
        check_edge_index(edge_index, n, where="collapse_metrics")
        edge_index = edge_index.to("cpu", torch.long)
    if batch is not None:
        if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.numel() != n:
            shape = tuple(batch.shape) if isinstance(batch, Tensor) else type(batch).__name__
            raise ValueError(f"collapse_metrics: batch must have shape [n] = [{n}], got {shape}")
        if batch.is_floating_point() or (batch.numel() and int(batch.min()) < 0):
            raise ValueError("collapse_metrics: batch must hold non-negative integer graph ids")
        batch = batch.to("cpu", torch.long)
    node_rows = token_rows = None
    if token_mask is not None:
        if not isinstance(token_mask, Tensor) or token_mask.dim() != 1 or token_mask.numel() != n:
            shape = tuple(token_mask.shape) if isinstance(token_mask, Tensor) else type(token_mask).__name__
            raise ValueError(f"collapse_metrics: token_mask must have shape [n] = [{n}], got {shape}")
        token_mask = token_mask.to("cpu", torch.bool)
        if token_mask.any():
            token_rows = token_mask.nonzero().flatten()
            keep = ~token_mask
            node_rows = keep.nonzero().flatten()
            if batch is not None:
                batch = batch[keep]
            if edge_index is not None:
                new_index = torch.full((n,), -1, dtype=torch.long)
                new_index[node_rows] = torch.arange(node_rows.numel())
                edge_index = new_index[edge_index[:, keep[edge_index[0]] & keep[edge_index[1]]]]
    num_node_rows = n if node_rows is None else int(node_rows.numel())
    num_graphs, node_counts = 1, None
    if batch is not None:
        num_graphs = int(batch.max()) + 1 if batch.numel() else 0
        node_counts = torch.bincount(batch, minlength=num_graphs).to(torch.float64)
    edge_source = edge_target = edge_graph = None
    both_ways = False
    if edge_index is not None:
        off_diagonal = edge_index[0] != edge_index[1]
        edge_source, edge_target = edge_index[0, off_diagonal], edge_index[1, off_diagonal]
        # Symmetric iff the pairs stored upward (source < target) are, as a multiset, the downward ones reversed:
        # two sorts of half the edges. The kept upward edges come out sorted by source, so the edge metrics read the
        # source rows in order (fewer cache misses on large graphs; the sums only change order).
        upward = edge_source < edge_target
        if edge_source.numel() and 2 * int(upward.sum()) == edge_source.numel():
            upward_keys = (edge_source[upward] * num_node_rows + edge_target[upward]).sort().values
            downward_keys = (edge_target[~upward] * num_node_rows + edge_source[~upward]).sort().values
            if torch.equal(upward_keys, downward_keys):
                edge_source, edge_target = upward_keys // num_node_rows, upward_keys % num_node_rows
                both_ways = True
        edge_source, edge_target = edge_source.contiguous(), edge_target.contiguous()
        if batch is not None:
            edge_graph = batch.index_select(0, edge_source)
    return _Rows(
        n, node_rows, token_rows, batch, num_graphs, node_counts, edge_source, edge_target, edge_graph, both_ways
    )


# --- layers' rows: float64 copy, row norms, unit rows ----------------------------------------------------------
def _load_rows(x: Tensor, rows: Tensor | None, out_x: Tensor, out_norms: Tensor, out_units: Tensor) -> int:
    """Copy the given rows of ``x`` into ``out_x`` [m, d] (float64, or float32 for ``precision="float32"``), their
    float64 norms into ``out_norms`` [m] and their unit rows into ``out_units`` [m, d] (one compiled pass,
    :func:`_widen_rows`); rejects NaN / Inf. Returns ``k`` where the rows were scaled by ``2**k`` (0 unless their
    entries are extreme: every metric but the Dirichlet energy is scale-invariant, and the energy is scaled back, see
    :func:`graphnorm.analysis.magnitude.rescale_for_invariant`).

    Validation costs little: the compiled pass also returns the largest norm, whether every norm is finite and the
    sum of squared norms; only a non-finite norm (a NaN or Inf entry: then the element-wise check names the count) or
    an extreme largest norm takes the slower path."""
    if x.device.type == "meta":
        raise ValueError("collapse_metrics: x is on the meta device (it has no values); pass a CPU or GPU tensor")
    x = x.detach().to("cpu")
    if rows is not None:
        x = x.index_select(0, rows)
    if x.dtype not in (torch.float32, torch.float64):  # halves and integers: widened exactly (NumPy has no bfloat16)
        x = x.to(out_x.dtype)
    largest, squared_sum, finite = _widen_rows(
        x.contiguous().numpy(), out_x.numpy(), out_norms.numpy(), out_units.numpy()
    )
    if finite and (out_norms.numel() == 0 or _ordinary_largest(largest)):
        check_not_too_large(squared_sum, out_x.size(0), "collapse_metrics")
        return 0
    norms = out_norms
    shift = 0
    if not _ordinary_scale(norms):  # only then look at every entry: the common case costs one pass over the norms
        shift = _rescale_in_place(out_x)
        if shift:
            _row_norms(out_x, out_norms)
            _unit_rows(out_x, out_norms, out=out_units)
    if not bool(torch.isfinite(norms).all()):
        finite = torch.isfinite(out_x)
        if out_x.dtype != x.dtype and bool(torch.isfinite(x).all()):
            raise ValueError(
                "collapse_metrics: x has entries beyond float32's range (about 3.4e38), which precision='float32' "
                "cannot hold; use precision='float64'"
            )
        if not bool(finite.all()):
            raise ValueError(
                f"collapse_metrics: x contains NaN or Inf ({int((~finite).sum())} of {out_x.numel()} entries)"
            )
    check_not_too_large(float(norms.square().sum()), out_x.size(0), "collapse_metrics")
    return shift


@kernel(nogil=True, fastmath={"reassoc", "contract"})
def _widen_rows(
    x: np.ndarray, out_x: np.ndarray, out_norms: np.ndarray, out_units: np.ndarray
) -> tuple[float, float, bool]:
    """``out_x`` = ``x`` [m, d] in ``out_x``'s dtype, ``out_norms`` [m] the float64 norms of the stored rows and
    ``out_units`` [m, d] the stored rows over their norms (zero rows stay zero), one row at a time while it is in
    cache (as :func:`_row_norms` and :func:`_unit_rows`, up to the order of each norm's sum). Returns the largest
    norm, the sum of squared norms and whether every norm is finite (NaN and Inf carry into the norms)."""
    rows, width = x.shape
    largest, squared_sum, finite = 0.0, 0.0, True
    for i in range(rows):
        squared = 0.0
        for k in range(width):
            out_x[i, k] = x[i, k]
            value = np.float64(out_x[i, k])
            squared += value * value
        norm = math.sqrt(squared)
        out_norms[i] = norm
        finite = finite and math.isfinite(norm)
        largest = max(largest, norm)
        squared_sum += squared
        divisor = norm if norm > 0.0 else 1.0
        for k in range(width):
            out_units[i, k] = np.float64(out_x[i, k]) / divisor
    return largest, squared_sum, finite


def _row_norms(x: Tensor, out: Tensor) -> Tensor:
    """Float64 row norms of ``x`` [m, d] (float64 or float32 rows) into ``out`` [m]: float32 rows are widened
    before their squares are summed, so their norms are those of the same values in float64."""
    if x.dtype == torch.float64:
        return torch.linalg.vector_norm(x, dim=-1, out=out)
    return torch.linalg.vector_norm(x, dim=-1, dtype=torch.float64, out=out)


@kernel()
def _ordinary_largest(largest: float) -> bool:
    """Whether a largest row norm is finite and within ``2**±200``: then no entry is extreme enough to need
    :func:`_rescale_in_place` (an entry is at most its row's norm, and at least the norm over ``sqrt(d)``). Compiled,
    so the loaders in Python and in :func:`_measure_layers` ask the same question."""
    return math.isfinite(largest) and 2.0**-SAFE_EXPONENT <= largest <= 2.0**SAFE_EXPONENT


def _ordinary_scale(norms: Tensor) -> bool:
    """:func:`_ordinary_largest` of the largest of ``norms`` (True for none)."""
    return norms.numel() == 0 or _ordinary_largest(float(norms.max()))


def _rescale_in_place(out_x: Tensor) -> int:
    """Scale ``out_x`` by ``2**k`` in place as :func:`~graphnorm.analysis.magnitude.rescale_for_invariant` does
    (``k = 0`` for ordinary input, and when a NaN or Inf is there for the caller's check) and return ``k``."""
    if out_x.numel() == 0:
        return 0
    low, high = torch.aminmax(out_x)
    largest = max(-float(low), float(high))
    shift = invariant_shift(largest) if math.isfinite(largest) else 0
    if shift != 0:
        out_x.copy_(scale_by_power_of_two(out_x, shift))
    return shift


def _unit_rows(x: Tensor, norms: Tensor, out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Non-zero mask and unit rows of ``x`` [..., m, d] with row norms ``norms`` [..., m] (zero rows stay zero).
    Its test oracle is the one-matrix ``graphnorm.analysis.metrics._unit_rows`` (kept separate on purpose)."""
    nonzero = norms > 0
    return nonzero, torch.div(x, torch.where(nonzero, norms, 1.0).unsqueeze(-1), out=out)


class _StackBuffers:
    """Buffers for a chunk of up to ``capacity`` layers of [m, d] rows: rows (float64, or float32 for
    ``precision="float32"``), float64 row norms and unit rows, filled layer by layer (:meth:`load`, while each layer
    is in cache) and reused by every chunk instead of fresh MB-sized tensors (and their page faults) per chunk."""

    def __init__(self, capacity: int, num_rows: int, width: int, precision: str = "float64") -> None:
        self.x = torch.empty(capacity, num_rows, width, dtype=_ROW_DTYPES[precision])
        self.norms = torch.empty(capacity, num_rows, dtype=torch.float64)
        self.units = torch.empty(capacity, num_rows, width, dtype=torch.float64)
        self.shifts = [0] * capacity  # layer ``slot`` was scaled by 2**shifts[slot] (see _load_rows)
        self.key = (capacity, num_rows, width, precision)  # what buffers of the same shapes share
        self.staging: Tensor | None = None  # [capacity, m, d]: layers copied as they came, loaded later
        self.staged = [False] * capacity  # slot holds a staged layer not loaded yet
        self.in_staging = [False] * capacity  # the staging buffer holds the slot's layer as loaded (not rescaled)

    @property
    def capacity(self) -> int:
        """Layers a chunk holds."""
        return self.x.size(0)

    def load(self, slot: int, x: Tensor, rows: Tensor | None) -> None:
        """Copy the given rows of layer ``x`` into ``slot`` with their norms and unit rows (validated as
        :func:`_load_rows` does)."""
        self.shifts[slot] = _load_rows(x, rows, self.x[slot], self.norms[slot], self.units[slot])
        self.in_staging[slot] = False

    def stage(self, slot: int, x: Tensor) -> None:
        """Copy layer ``x`` into ``slot`` of the staging buffer as it is (one memcpy), to be loaded and validated
        later by :func:`_measure_chunk`; a layer the staging buffer cannot hold as it is (not on the CPU, another dtype
        than float32 / float64 or than the layers staged before it) is loaded at once instead."""
        x = x.detach()
        plain = x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
        if not plain or (self.staging is not None and self.staging.dtype != x.dtype):
            self.load(slot, x, None)
            self.staged[slot] = False
            return
        if self.staging is None:
            self.staging = torch.empty(self.x.shape, dtype=x.dtype)
        self.staging[slot].copy_(x)
        self.staged[slot] = True
        self.in_staging[slot] = True

    def move_up(self, slot: int, count: int) -> None:
        """Drop the layer in ``slot`` of the first ``count`` slots: the later ones move up a slot."""
        for target in (self.x, self.norms, self.units, self.staging):
            if target is not None:
                target[slot : count - 1] = target[slot + 1 : count].clone()
        for flags in (self.shifts, self.staged, self.in_staging):
            flags[slot : count - 1] = flags[slot + 1 : count]

    def stack(self, count: int) -> _Stack:
        """The first ``count`` loaded layers (valid until the buffers are loaded again)."""
        x, norms = self.x[:count], self.norms[:count]
        # The staged rows stand for the loaded ones when they widen to them exactly (float32, or the rows' own dtype).
        exact = self.staging is not None and self.staging.dtype in (torch.float32, self.x.dtype)
        as_given = self.staging.numpy()[:count] if exact and all(self.in_staging[:count]) else None
        return _Stack(x, norms, norms > 0, self.units[:count], self.shifts[:count], as_given)


def _grams(x: Tensor) -> Tensor:
    """X^T X of every [m, d] matrix of ``x`` [L, m, d] as float64 [L, d, d], each as
    :func:`graphnorm.analysis.metrics.gram_matrix` computes it, in one compiled call (:func:`_stacked_grams`).
    Float32 rows are widened first (exactly): a float32 Gram matrix would carry an error of ~1e-7 * s_1^2 in every
    eigenvalue, which moves the effective rank of a layer with small singular values far beyond 1e-5."""
    return torch.from_numpy(_stacked_grams(x.numpy()))


@kernel(nogil=True)
def _stacked_grams(x: np.ndarray) -> np.ndarray:
    """:func:`graphnorm.analysis.metrics.gram_matrix` of every layer of ``x`` [L, m, d] (float32 widened)."""
    grams = np.empty((x.shape[0], x.shape[2], x.shape[2]))
    for layer in range(x.shape[0]):
        grams[layer] = gram_matrix(np.asarray(x[layer], dtype=np.float64))
    return grams


def _singular_values_from(grams: Tensor | None, xs: Tensor | None) -> Tensor:
    """Descending singular values of every layer [L, min(m, d)] (float64): from the stacked d x d Gram matrices
    ``grams`` [L, d, d] (one compiled call) when the layers are tall (m > 2d), as
    :func:`graphnorm.analysis.metrics._singular_values_f64` does for one matrix; else one batched SVD of the (small)
    layers ``xs`` [L, m, d]."""
    if grams is not None:
        return torch.from_numpy(_stacked_spectra(grams.numpy()))
    return torch.linalg.svdvals(xs)


@kernel(nogil=True)
def _stacked_spectra(grams: np.ndarray) -> np.ndarray:
    """:func:`graphnorm.analysis.metrics.spectrum_from_gram` of every Gram matrix of ``grams`` [L, d, d]."""
    sigma = np.empty(grams.shape[:2])
    for layer in range(grams.shape[0]):
        sigma[layer] = spectrum_from_gram(grams[layer])
    return sigma


def _ranks(sigma: Tensor) -> tuple[Tensor, Tensor]:
    """Effective rank exp(H(sigma / sum sigma)) (0 log 0 = 0) and stable rank sum sigma^2 / sigma_1^2 over the
    last dimension; 0 for an all-zero spectrum. Its test oracles are the one-matrix
    ``graphnorm.analysis.metrics.effective_rank`` and ``stable_rank`` (kept separate on purpose)."""
    total = sigma.sum(-1)
    positive = total > 0
    p = sigma / torch.where(positive, total, 1.0).unsqueeze(-1)
    entropy = -torch.where(p > 0, p * torch.where(p > 0, p, 1.0).log(), 0.0).sum(-1)
    effective = torch.where(positive, entropy.exp(), 0.0)
    top = sigma[..., 0] if sigma.size(-1) else torch.zeros(sigma.shape[:-1], dtype=sigma.dtype)
    stable = torch.where(top > 0, sigma.square().sum(-1) / torch.where(top > 0, top, 1.0).square(), 0.0)
    return effective, stable


@dataclass
class _SetSummary:
    """What the edge-free metrics of one row set need from each layer, small enough to keep for every layer."""

    sigma: Tensor  # [min(m, d)] singular values, descending
    units_sum: Tensor  # [d]
    num_nonzero: int
    num_rows: int
    cone: float
    cone_q90: float


def _summarize_sets(stack: _Stack, cone_tol_deg: float) -> list[_SetSummary]:
    """The :class:`_SetSummary` of every stacked layer: singular values from one batched eigvalsh of the Gram
    matrices when tall, else one batched SVD; both cones, the unit rows' sums and the non-zero rows' counts from one
    compiled call (:func:`graphnorm.analysis.cone.stacked_cones`)."""
    num_rows, width = stack.x.shape[1:]
    if num_rows > 2 * width:
        sigma = _singular_values_from(_grams(stack.x), None)
    else:
        sigma = _singular_values_from(None, stack.x.double())
    exact, robust, units_sums, counts = stacked_cones(
        stack.units.numpy(), stack.norms.numpy(), ROBUST_CONE_LEVEL, cone_tol_deg
    )
    return [
        _SetSummary(sigma=s, units_sum=u, num_nonzero=c, num_rows=num_rows, cone=e, cone_q90=r)
        for s, u, c, e, r in zip(
            sigma.unbind(0), torch.from_numpy(units_sums).unbind(0), counts.tolist(), exact.tolist(), robust.tolist()
        )
    ]


def _set_metrics(summaries: list[_SetSummary], num_singular_values: int) -> list[dict[str, float]]:
    """Edge-free metrics of one set of rows for every layer, batched over layers."""
    sigma = torch.stack([s.sigma for s in summaries])
    effective, stable = _ranks(sigma)
    m = torch.tensor([s.num_nonzero for s in summaries], dtype=torch.float64)
    units_sum = torch.stack([s.units_sum for s in summaries])
    mean_cos = torch.where(m >= 2, (units_sum.square().sum(1) - m) / (m * (m - 1)).clamp_min(1.0), torch.nan)
    top = sigma[:, 0] if sigma.size(1) else torch.zeros(len(summaries), dtype=torch.float64)
    count = min(num_singular_values, sigma.size(1)) if num_singular_values > 0 else 0
    spectrum = torch.where((top > 0)[:, None], sigma[:, :count] / torch.where(top > 0, top, 1.0)[:, None], 0.0).tolist()
    result = []
    for layer, (summary, erank, srank, cosine) in enumerate(
        zip(summaries, effective.tolist(), stable.tolist(), mean_cos.tolist())
    ):
        values = {
            "effective_rank": erank,
            "stable_rank": srank,
            "mean_cosine": cosine,
            "cone_angle": summary.cone,
            "cone_angle_q90": summary.cone_q90,
            "mad": 1.0 - cosine,
            "zero_row_fraction": 1.0 - summary.num_nonzero / summary.num_rows,
        }
        values.update({spectrum_metric_name(index): value for index, value in enumerate(spectrum[layer])})
        result.append(values)
    return result


# --- edge metrics over stacked layers ----------------------------------------------------------------------------
@kernel(nogil=True, fastmath={"reassoc", "contract"})
def _edge_sums(
    x: np.ndarray,
    norms: np.ndarray,
    source: np.ndarray,
    target: np.ndarray,
    edge_graph: np.ndarray,
    both_ways: bool,
    energy: np.ndarray,
    cosine_sum: np.ndarray,
    live_count: np.ndarray,
) -> None:
    """For every layer of ``x`` [L, m, d] (row norms ``norms`` [L, m]) and edge (source, target) [E], in one pass
    over each edge's two rows (compiled, in cache): the squared distance of the endpoint rows added to
    ``energy`` [L, G] at the edge's graph (``edge_graph`` [E], empty for one graph), and, where neither row is zero,
    their cosine added to ``cosine_sum`` [L, m] and 1 to ``live_count`` [L, m] at the source (and at the target when
    ``both_ways``). The squared distance sums explicit differences (not squared norms minus cross terms), so an energy
    decaying to 1e-30 is not lost to cancellation; sums over d may run in any order (vectorized), which changes them
    by round-off only. Float32 rows are widened: their products are exact in float64."""
    num_layers, _, width = x.shape
    for layer in range(num_layers):
        rows, row_norms = x[layer], norms[layer]
        for edge in range(source.size):
            head, tail = source[edge], target[edge]
            a, b = rows[head], rows[tail]
            dot, distance = 0.0, 0.0
            for k in range(width):
                left, right = np.float64(a[k]), np.float64(b[k])
                dot += left * right
                difference = left - right
                distance += difference * difference
            energy[layer, edge_graph[edge] if edge_graph.size else 0] += distance
            if row_norms[head] > 0.0 and row_norms[tail] > 0.0:
                cosine = dot / (row_norms[head] * row_norms[tail])
                cosine_sum[layer, head] += cosine
                live_count[layer, head] += 1.0
                if both_ways:
                    cosine_sum[layer, tail] += cosine
                    live_count[layer, tail] += 1.0


@kernel(nogil=True)
def _edge_metrics_kernel(
    x: np.ndarray,
    norms: np.ndarray,
    source: np.ndarray,
    target: np.ndarray,
    edge_graph: np.ndarray,
    batch: np.ndarray,
    node_counts: np.ndarray,
    both_ways: bool,
    out: np.ndarray,
) -> None:
    """:func:`_edge_metrics_stacked` compiled, in one call (the probe's second thread runs it; every short NumPy step
    there would make the forward pass's thread wait for the interpreter lock): the sums of :func:`_edge_sums`, then
    per layer ``l`` and graph ``g`` (``batch`` [m] and ``edge_graph`` [E] empty for one graph) ``out[:, l, g]`` =
    (Dirichlet energy, its normalized form, neighbour MAD) before any rescaling of the energy (NaN for a MAD
    without a live edge). Sums over a graph's nodes run in node order."""
    num_layers, num_rows, _ = x.shape
    num_graphs = node_counts.size
    energy = np.zeros((num_layers, num_graphs))
    cosine_sum, count = np.zeros((num_layers, num_rows)), np.zeros((num_layers, num_rows))
    _edge_sums(x, norms, source, target, edge_graph, both_ways, energy, cosine_sum, count)
    for layer in range(num_layers):
        frobenius_sq, mad_sum, live = np.zeros(num_graphs), np.zeros(num_graphs), np.zeros(num_graphs)
        for row in range(num_rows):
            graph = batch[row] if batch.size else 0
            frobenius_sq[graph] += norms[layer, row] * norms[layer, row]
            # Node i's mean cosine distance to its non-self, non-zero neighbours j: 1 - sum_j cos(x_i, x_j) / #{j};
            # edges touching a zero row (no direction) are left out of both sums.
            if count[layer, row] > 0:
                mad_sum[graph] += 1.0 - cosine_sum[layer, row] / count[layer, row]
                live[graph] += 1.0
        for graph in range(num_graphs):
            total = energy[layer, graph] * 2.0 if both_ways else energy[layer, graph]  # a stored pair is both ways
            per_node = max(node_counts[graph], 1.0)
            out[0, layer, graph] = total / per_node
            out[1, layer, graph] = (total / frobenius_sq[graph] if frobenius_sq[graph] > 0 else 0.0) / per_node
            out[2, layer, graph] = mad_sum[graph] / live[graph] if live[graph] > 0 else np.nan


def _edge_metrics_stacked(stack: _Stack, rows: _Rows) -> dict[str, np.ndarray]:
    """Dirichlet energies and neighbour MAD of stacked layers per graph: {name: [L, num_graphs]} (NaN where
    undefined), from one pass over the endpoint rows of every edge (per-graph squared distances for Dirichlet,
    per-node sums of neighbour cosines for the neighbour MAD; :func:`_edge_sums`) and one over the nodes, in one
    compiled call (:func:`_edge_metrics_kernel`)."""
    x = stack.rows_as_given if stack.rows_as_given is not None else stack.x.numpy()
    out = np.empty((3, x.shape[0], rows.num_graphs))
    no_index = np.empty(0, dtype=np.int64)
    _edge_metrics_kernel(
        x,
        stack.norms.numpy(),
        rows.edge_source_np,
        rows.edge_target_np,
        no_index if rows.edge_graph_np is None else rows.edge_graph_np,
        no_index if rows.batch_np is None else rows.batch_np,
        rows.node_counts_np,
        rows.edge_both_ways,
        out,
    )
    energy, normalized, mad = out
    return {
        "dirichlet_energy": _unscaled_energy(energy, stack.shifts),
        "dirichlet_energy_normalized": normalized,
        "mad_neighbors": mad,
    }


def _unscaled_energy(energy: np.ndarray, shifts: list[int]) -> np.ndarray:
    """The Dirichlet energies [L, G] of layers scaled by ``2**shifts`` [L] scaled back by ``4**-shift`` (the energy
    is not scale-invariant: E(cX) = c^2 E(X)); ``ValueError`` when one overflows float64 (entries ~1e150 and up)."""
    if not any(shifts):
        return energy
    with np.errstate(over="ignore"):
        energy = np.stack([scale_by_power_of_two(torch.from_numpy(e), -2 * k).numpy() for e, k in zip(energy, shifts)])
    if not np.isfinite(energy).all():
        raise ValueError(
            "collapse_metrics: x is too large for its Dirichlet energy in float64 (entries of about 1e150 and up "
            "overflow it); rescale x (e.g. divide by its largest entry)"
        )
    return energy


# --- per-graph metrics over stacked layers: X [L, m, d] float64 (graph-level batches) ---------------------------
@dataclass
class _Stack:
    """Layers of equal width stacked as float64 [L, m, d] with their row norms, non-zero masks and unit rows."""

    x: Tensor
    norms: Tensor  # [L, m]
    nonzero: Tensor  # [L, m] bool
    units: Tensor  # [L, m, d]
    shifts: list[int]  # [L]: layer l was scaled by 2**shifts[l] (0 unless its entries are extreme, see _load_rows)
    # The same rows as they came (float32 for a float32 model), where the chunk has them: the edge metrics gather
    # rows at random, and half the bytes per row keep a layer in the core's own cache (float32 widens exactly).
    rows_as_given: np.ndarray | None = None


def _singular_values_stacked(x: Tensor) -> Tensor:
    """Descending singular values of every matrix in [..., m, d] (float64); through the d x d Gram matrix when
    tall (m > 2d), as :func:`graphnorm.analysis.metrics._singular_values_f64` does for one matrix."""
    if x.size(-2) > 2 * x.size(-1):
        gram = x.transpose(-1, -2) @ x
        return torch.linalg.eigvalsh(gram).clamp_min(0.0).sqrt().flip(-1)
    return torch.linalg.svdvals(x)


def _per_graph_metrics_stacked(stack: _Stack, rows: _Rows, cone_tol_deg: float) -> dict[str, Tensor]:
    """Every per-graph metric as [L, num_graphs] (NaN where undefined), vectorized over layers and graphs
    except the cone angle (one small min-norm-point problem per layer and graph)."""
    x, norms, nonzero, units = stack.x.double(), stack.norms, stack.nonzero, stack.units
    num_layers, num_rows, d = x.shape
    num_graphs, batch = rows.num_graphs, rows.batch
    # Zero padding leaves singular values alone: [m, L*d] -> [G, N, L*d] -> [L, G, N, d].
    dense, _ = to_dense_batch(x.permute(1, 0, 2).reshape(num_rows, num_layers * d), batch, batch_size=num_graphs)
    dense = dense.view(num_graphs, -1, num_layers, d).permute(2, 0, 1, 3)
    effective, stable = _ranks(_singular_values_stacked(dense))
    units_sum = torch.zeros(num_layers, num_graphs, d, dtype=x.dtype).index_add_(1, batch, units)
    nonzero64 = nonzero.to(x.dtype)
    m = torch.zeros(num_layers, num_graphs, dtype=x.dtype).index_add_(1, batch, nonzero64)
    mean_cos = torch.where(m >= 2, (units_sum.square().sum(2) - m) / (m * (m - 1)).clamp_min(1.0), torch.nan)

    # Cone angle per (layer, graph). Certificate for 90 degrees first, vectorized: the unit rows weighted by
    # their norms, sum_i x_i / sum_i ||x_i||, and their plain mean are points of each graph's hull.
    threshold = math.sin(math.radians(cone_tol_deg))
    row_sum = torch.zeros(num_layers, num_graphs, d, dtype=x.dtype).index_add_(1, batch, x)
    norm_sum = torch.zeros(num_layers, num_graphs, dtype=x.dtype).index_add_(1, batch, norms)
    weighted = torch.linalg.vector_norm(row_sum, dim=2) / torch.where(norm_sum > 0, norm_sum, 1.0)
    mean_unit = torch.linalg.vector_norm(units_sum, dim=2) / torch.where(m > 0, m, 1.0)
    certified_90 = ((weighted <= threshold) | (mean_unit <= threshold)) & (m >= 1)
    cones = torch.full((num_layers, num_graphs), torch.nan, dtype=x.dtype)
    cones[certified_90] = 90.0
    order = torch.argsort(batch, stable=True)
    boundaries = [0] + torch.cumsum(rows.node_counts.to(torch.long), 0).tolist()
    sorted_units = units.index_select(1, order).numpy()
    sorted_norms = norms.index_select(1, order).numpy()
    sorted_nonzero = nonzero.index_select(1, order).numpy()
    # The robust cone has its own certificate (no mean direction) and is computed wherever the exact one is.
    robust_cones = torch.where(certified_90 & (mean_unit > threshold), torch.nan, cones)
    todo = ((m >= 1) & ~(certified_90 & (mean_unit <= threshold))).nonzero().tolist()
    for layer, graph in todo:
        start, stop = boundaries[graph], boundaries[graph + 1]
        mask = sorted_nonzero[layer, start:stop]
        graph_units = sorted_units[layer, start:stop]
        graph_norms = sorted_norms[layer, start:stop]
        if not mask.all():
            graph_units, graph_norms = graph_units[mask], graph_norms[mask]
        exact, robust, _ = exact_and_robust_cones(
            np.ascontiguousarray(graph_units),
            np.ascontiguousarray(graph_norms),
            np.arange(graph_norms.size),
            ROBUST_CONE_LEVEL,
            cone_tol_deg,
        )
        if not bool(certified_90[layer, graph]):
            cones[layer, graph] = exact
        robust_cones[layer, graph] = robust

    counts = rows.node_counts
    result = {
        "effective_rank": effective,
        "stable_rank": stable,
        "mean_cosine": mean_cos,
        "cone_angle": cones,
        "cone_angle_q90": robust_cones,
        "mad": 1.0 - mean_cos,
        "zero_row_fraction": (1.0 - m / counts.clamp_min(1.0)).expand(num_layers, -1),
    }
    return result


def _mean_std(values: Tensor) -> tuple[list[float], list[float]]:
    """Mean and population std over the last dimension ignoring NaN (NaN when nothing is left), per layer."""
    finite = ~torch.isnan(values)
    count = finite.sum(-1).to(values.dtype)
    filled = torch.where(finite, values, 0.0)
    mean = filled.sum(-1) / count.clamp_min(1.0)
    variance = torch.where(finite, (values - mean.unsqueeze(-1)).square(), 0.0).sum(-1) / count.clamp_min(1.0)
    mean = torch.where(count > 0, mean, torch.nan)
    std = torch.where(count > 0, variance.sqrt(), torch.nan)
    return mean.tolist(), std.tolist()


def _records_of_set(values: dict[str, float], rows_kind: str, stat: str) -> list[dict]:
    """Tidy records of one row set's ``{metric: value}``."""
    return [dict(rows=rows_kind, metric=k, stat=stat, value=v) for k, v in values.items()]


@kernel(nogil=True)
def _measure_layers(
    staging: np.ndarray,
    staged: np.ndarray,
    staging_exact: bool,
    todo: np.ndarray,
    x: np.ndarray,
    norms: np.ndarray,
    units: np.ndarray,
    edge_rows: np.ndarray,
    with_edges: bool,
    source: np.ndarray,
    target: np.ndarray,
    node_counts: np.ndarray,
    both_ways: bool,
    tol_deg: float,
    widened: np.ndarray,
    sigmas: np.ndarray,
    cones: np.ndarray,
    sums: np.ndarray,
    counts: np.ndarray,
    edges: np.ndarray,
) -> None:
    """Measure the layers ``l`` with ``todo[l]`` of one graph's chunk, each from start to end while its rows are in
    cache: its singular values from its Gram matrix into ``sigmas[l]`` (tall layers, m > 2d), both cones into
    ``cones[:, l]`` with the unit rows' sum ``sums[l]`` and non-zero rows ``counts[l]``
    (:func:`graphnorm.analysis.cone.layer_cones`), and its edge metrics into ``edges[:, l]``
    (:func:`_edge_metrics_kernel`; when ``with_edges``), each the value the stage-at-a-time functions give for the
    same layer.

    A layer already loaded is read from ``x``, ``norms``, ``units`` (its edges from ``edge_rows``). A staged one
    (``staged[l]``) is loaded from ``staging`` [L, m, d] (:func:`_widen_rows`; ``widened[l]`` = its largest norm,
    sum of squares and finiteness) into one layer's scratch rows when tall, reused layer after layer: the chunk's own
    buffers (MBs a layer) would stream through memory and slow the forward pass on the other core, where one layer's
    scratch stays in cache. Its edges read ``staging`` when that widens to the rows exactly (``staging_exact``). A
    staged layer that is not finite or not of ordinary scale is skipped: the caller loads it again (rejecting or
    rescaling it) and measures it then."""
    no_index = np.empty(0, dtype=np.int64)
    num_rows, width = x.shape[1], x.shape[2]
    tall = num_rows > 2 * width
    scratch_x = np.empty((num_rows, width), dtype=x.dtype)
    scratch_norms, scratch_units = np.empty(num_rows), np.empty((num_rows, width))
    for layer in range(todo.size):
        if not todo[layer]:
            continue
        layer_x, layer_norms, layer_units = x[layer], norms[layer], units[layer]
        if staged[layer]:
            if tall:
                layer_x, layer_norms, layer_units = scratch_x, scratch_norms, scratch_units
            largest, squared_sum, finite = _widen_rows(staging[layer], layer_x, layer_norms, layer_units)
            widened[layer, 0], widened[layer, 1], widened[layer, 2] = largest, squared_sum, 1.0 if finite else 0.0
            if not (finite and _ordinary_largest(largest)):
                continue
        if tall:
            sigmas[layer] = spectrum_from_gram(gram_matrix(np.asarray(layer_x, dtype=np.float64)))
        layer_cones(layer_units, layer_norms, ROBUST_CONE_LEVEL, tol_deg, layer, cones[0], cones[1], sums, counts)
        if not with_edges:
            continue
        out = edges[:, layer : layer + 1]
        one_norms = layer_norms.reshape((1, num_rows))
        # One call per source of rows: their dtypes and layouts differ, which numba cannot unify in one variable.
        if not staged[layer]:
            rows = edge_rows[layer : layer + 1]
            _edge_metrics_kernel(rows, one_norms, source, target, no_index, no_index, node_counts, both_ways, out)
        elif staging_exact:
            rows = staging[layer : layer + 1]
            _edge_metrics_kernel(rows, one_norms, source, target, no_index, no_index, node_counts, both_ways, out)
        else:
            rows = layer_x.reshape((1, num_rows, width))
            _edge_metrics_kernel(rows, one_norms, source, target, no_index, no_index, node_counts, both_ways, out)


@dataclass
class _Measured:
    """What :func:`_measure_layers` leaves for a chunk of ``L`` layers of width ``d``."""

    widened: np.ndarray  # [L, 3]: largest norm, sum of squares, finite (staged layers)
    sigmas: np.ndarray  # [L, d]: descending singular values (tall layers)
    cones: np.ndarray  # [2, L]: exact, robust
    sums: np.ndarray  # [L, d]
    counts: np.ndarray  # [L]
    edges: np.ndarray  # [3, L, 1]: Dirichlet energy (scaled rows), its normalized form, neighbour MAD

    @classmethod
    def empty(cls, num_layers: int, width: int) -> _Measured:
        return cls(
            np.zeros((num_layers, 3)),
            np.empty((num_layers, width)),
            np.empty((2, num_layers)),
            np.empty((num_layers, width)),
            np.empty(num_layers, dtype=np.int64),
            np.empty((3, num_layers, 1)),
        )


def _measure_stack(
    stack: _Stack,
    rows: _Rows,
    cone_tol_deg: float,
    measured: _Measured,
    todo: np.ndarray,
    staging: np.ndarray | None = None,
    staged: np.ndarray | None = None,
) -> None:
    """:func:`_measure_layers` of the layers ``todo`` of ``stack`` into ``measured``, the ``staged`` ones loaded
    from ``staging`` first."""
    x = stack.x.numpy()
    no_index = np.empty(0, dtype=np.int64)
    has_edges = rows.edge_source is not None
    _measure_layers(
        x if staging is None else staging,
        np.zeros(todo.size, dtype=np.bool_) if staged is None else staged,
        staging is not None and staging.dtype in (np.float32, x.dtype),  # float32 widens exactly
        todo,
        x,
        stack.norms.numpy(),
        stack.units.numpy(),
        stack.rows_as_given if stack.rows_as_given is not None else x,
        has_edges,
        rows.edge_source_np if has_edges else no_index,
        rows.edge_target_np if has_edges else no_index,
        rows.node_counts_np,
        rows.edge_both_ways,
        cone_tol_deg,
        measured.widened,
        measured.sigmas,
        measured.cones,
        measured.sums,
        measured.counts,
        measured.edges,
    )


def _parts_of(measured: _Measured, stack: _Stack, rows: _Rows) -> list[tuple[_SetSummary, dict | None]]:
    """The set summary and the edge metrics ({name: [1]}) of every layer of ``stack`` from ``measured``."""
    num_rows, width = stack.x.shape[1:]
    tall = num_rows > 2 * width
    sigma = torch.from_numpy(measured.sigmas) if tall else _singular_values_from(None, stack.x.double())
    edges = None
    if rows.edge_source is not None:
        energy, normalized, mad = measured.edges
        edges = {
            "dirichlet_energy": _unscaled_energy(energy, stack.shifts),
            "dirichlet_energy_normalized": normalized,
            "mad_neighbors": mad,
        }
    exact, robust = measured.cones.tolist()
    return [
        (
            _SetSummary(sigma=s, units_sum=u, num_nonzero=c, num_rows=num_rows, cone=e, cone_q90=r),
            None if edges is None else {name: values[index] for name, values in edges.items()},
        )
        for index, (s, u, c, e, r) in enumerate(
            zip(sigma.unbind(0), torch.from_numpy(measured.sums).unbind(0), measured.counts.tolist(), exact, robust)
        )
    ]


def _one_graph_parts(stack: _Stack, rows: _Rows, cone_tol_deg: float) -> list[tuple[_SetSummary, dict | None]]:
    """What each stacked layer's node rows contribute when they form one graph: the set summary and the edge
    metrics ({name: [1]}), measured a layer at a time in one compiled call (:func:`_measure_layers`)."""
    num_layers = stack.x.size(0)
    measured = _Measured.empty(num_layers, stack.x.size(2))
    _measure_stack(stack, rows, cone_tol_deg, measured, np.ones(num_layers, dtype=np.bool_))
    return _parts_of(measured, stack, rows)


def _one_graph_records(parts: list[tuple[_SetSummary, dict | None]], num_singular_values: int) -> list[list[dict]]:
    """Node-row records (stat "value") of layers of one width from their :func:`_one_graph_parts`."""
    records = []
    for (_, edges), values in zip(parts, _set_metrics([summary for summary, _ in parts], num_singular_values)):
        if edges is not None:
            values.update({name: float(edges[name][0]) for name in EDGE_METRICS})
        ordered = [name for name in PER_GRAPH_METRICS if name in values] + [k for k in values if k.startswith("sv_")]
        records.append([dict(rows="node", metric=k, stat="value", value=values[k]) for k in ordered])
    return records


def _chunk_capacity(num_rows: int, num_edges: int, width: int) -> int:
    """Layers per chunk of stacked layers within _CHUNK_BYTES (at least one): float64 rows, unit rows and working
    copies ([rows, width] a few times) and per-edge values ([edges], a few times) of each layer."""
    return max(1, _CHUNK_BYTES // max(1, 8 * (6 * width * num_rows + 8 * num_edges)))


def _stacks(
    xs: Sequence[Tensor], row_index: Tensor | None, num_rows: int, num_edges: int, precision: str = "float64"
) -> Iterator[_Stack]:
    """The given rows of the layers ``xs`` (one width) as float64 stacks of consecutive layers, a chunk at a time
    within _CHUNK_BYTES: rows, unit rows, per-graph working copies and the two edge gathers of each layer."""
    width = xs[0].size(1)
    capacity = min(len(xs), _chunk_capacity(num_rows, num_edges, width))
    buffers = _StackBuffers(capacity, num_rows, width, precision)
    for start in range(0, len(xs), capacity):
        chunk = xs[start : start + capacity]
        for slot, x in enumerate(chunk):
            buffers.load(slot, x, row_index)
        yield buffers.stack(len(chunk))


def _records_one_graph(
    xs: Sequence[Tensor], rows: _Rows, num_singular_values: int, cone_tol_deg: float, precision: str
) -> list:
    """Node-row records of every layer when the rows form one graph (stat "value"), in stacked chunks of layers."""
    parts = []
    for stack in _stacks(xs, rows.node_rows, rows.num_node_rows, rows.num_edges, precision):
        parts += _one_graph_parts(stack, rows, cone_tol_deg)
    return _one_graph_records(parts, num_singular_values)


def _records_per_graph(
    xs: Sequence[Tensor], rows: _Rows, num_singular_values: int, cone_tol_deg: float, precision: str
) -> list:
    """Node-row records of every layer of a batch: per-graph mean / std (stacked passes over chunks of layers of
    bounded memory) and the pooled set metrics."""
    summaries: list[_SetSummary] = []
    parts: list[dict[str, Tensor]] = []
    for stack in _stacks(xs, rows.node_rows, rows.num_node_rows, rows.num_edges, precision):
        summaries += _summarize_sets(stack, cone_tol_deg)
        part = _per_graph_metrics_stacked(stack, rows, cone_tol_deg)
        if rows.edge_source is not None:
            part.update({name: torch.from_numpy(v) for name, v in _edge_metrics_stacked(stack, rows).items()})
        parts.append(part)
    per_graph = {name: torch.cat([part[name] for part in parts]) for name in parts[0]}
    empty = rows.node_counts == 0
    if bool(empty.any()):
        per_graph = {name: torch.where(empty, torch.nan, values) for name, values in per_graph.items()}
    records: list[list[dict]] = [[] for _ in xs]
    for name in PER_GRAPH_METRICS:
        if name not in per_graph:
            continue
        means, stds = _mean_std(per_graph[name])
        for layer in range(len(xs)):
            records[layer].append(dict(rows="node", metric=name, stat="mean", value=means[layer]))
            records[layer].append(dict(rows="node", metric=name, stat="std", value=stds[layer]))
    for layer, pooled in enumerate(_set_metrics(summaries, num_singular_values)):
        for name, value in pooled.items():
            if name in POOLED_METRICS or name.startswith("sv_"):
                records[layer].append(dict(rows="node", metric=name, stat="pooled", value=value))
    return records


def _records_of_width(
    xs: Sequence[Tensor], rows: _Rows, num_singular_values: int, cone_tol_deg: float, precision: str
) -> list[list[dict]]:
    """Records of layers that share a width: token rows, then node rows."""
    records: list[list[dict]] = [[] for _ in xs]
    if rows.token_rows is not None:
        num_tokens = rows.token_rows.numel()
        summaries = [
            summary
            for stack in _stacks(xs, rows.token_rows, num_tokens, 0, precision)
            for summary in _summarize_sets(stack, cone_tol_deg)
        ]
        for layer, values in enumerate(_set_metrics(summaries, num_singular_values)):
            records[layer] += _records_of_set(values, "token", "value")
        if rows.num_node_rows == 0:
            return records
    node = (_records_one_graph if rows.batch is None else _records_per_graph)(
        xs, rows, num_singular_values, cone_tol_deg, precision
    )
    return [tokens + nodes for tokens, nodes in zip(records, node)]


def same_values(first: Tensor | None, second: Tensor | None) -> bool:
    """Whether two optional tensors hold the same values: the same tensor, both None, or equal shapes, devices and
    entries (a model may pass a new tensor for the same edges or batch on every forward)."""
    if first is second:
        return True
    if first is None or second is None or first.shape != second.shape or first.device != second.device:
        return False
    return torch.equal(first, second)


def _check_layer(x: Tensor, n: int | None, position: int | None) -> None:
    """``TypeError`` / ``ValueError`` naming layer ``position`` unless ``x`` is a real [n, d] tensor with rows and
    columns (``n`` rows when given)."""
    where = "" if position is None else f" (layer {position})"
    if not isinstance(x, Tensor):
        raise TypeError(f"collapse_metrics: x must be a torch.Tensor, got {type(x).__name__}{where}")
    if x.dim() != 2:
        raise ValueError(f"collapse_metrics: x must have shape [n, d], got shape {tuple(x.shape)}{where}")
    if x.is_complex():
        raise TypeError(f"collapse_metrics: x must be real, got {x.dtype}{where}")
    if x.size(0) == 0:
        raise ValueError(f"collapse_metrics: x has no rows (shape {tuple(x.shape)}){where}")
    if x.size(1) == 0:
        raise ValueError(f"collapse_metrics: x has no columns (shape {tuple(x.shape)}){where}")
    if n is not None and x.size(0) != n:
        raise ValueError(f"collapse_metrics: every layer must have the same {n} rows, got {x.size(0)}{where}")


def collapse_records_layers(
    xs: Sequence[Tensor],
    edge_index: Tensor | None = None,
    batch: Tensor | None = None,
    token_mask: Tensor | None = None,
    num_singular_values: int = 16,
    cone_tol_deg: float = 1e-3,
    precision: str = "float64",
) -> list[list[dict]]:
    """:func:`collapse_records` of every representation in ``xs`` (each [n, d_l], the same n rows and
    context), one list of records per layer, equal to calling :func:`collapse_records` per layer.

    Fast path of the probe: the context (token rows, graphs, edges) is validated and built once; each layer's
    rows are converted to float64 once, in cache, with row norms and unit rows shared by every metric; the
    singular values of all layers of a width come from one batched eigvalsh of their stacked d x d Gram
    matrices; one gather of edge endpoints per layer gives both the Dirichlet energy and the neighbour cosines
    (one direction per pair for symmetric edge lists); per-graph statistics are scatter sums over stacked layers.
    The cone angle remains one min-norm-point problem per layer (and graph).
    """
    if isinstance(xs, Tensor):
        raise TypeError("collapse_records_layers: xs must be a sequence of [n, d] tensors; use collapse_records")
    xs = list(xs)
    if not xs:
        return []
    check_choice(precision, PRECISIONS, "precision", "collapse_metrics")
    _check_layer(xs[0], None, 1 if len(xs) > 1 else None)
    n = xs[0].size(0)
    for position, x in enumerate(xs[1:], start=2):
        _check_layer(x, n, position)
    with single_thread():
        rows = _build_rows(n, edge_index, batch, token_mask)
        results: list[list[dict] | None] = [None] * len(xs)
        widths: dict[int, list[int]] = {}
        for index, x in enumerate(xs):
            widths.setdefault(x.size(1), []).append(index)
        for indices in widths.values():
            layer_records = _records_of_width(
                [xs[i] for i in indices], rows, num_singular_values, cone_tol_deg, precision
            )
            for index, records in zip(indices, layer_records):
                results[index] = records
        return results  # type: ignore[return-value]


class LayerStream:
    """:func:`collapse_records_layers` fed one layer at a time, for rows that form one graph (no ``batch``, no token
    rows): the probe hands each layer's output over in its forward hook, while the output is still in cache, and the
    stream copies it (float64) into a chunk of a few layers, validates it at once, and measures the chunk when it is
    full (:func:`_measure_layers`: Gram matrix, cones and edge sums, a layer at a time, then the spectra of the chunk)
    keeping only a small summary per layer. Memory: one chunk of float64 rows per width (within _CHUNK_BYTES, at least
    one layer), up to three with ``background``, not every layer's output. :meth:`records` measures what is left and
    batches the rest over layers.

    ``background``: the hook only copies the layer as it is into a staging buffer; a full chunk is measured on a
    second thread (up to _QUEUED_CHUNKS chunks wait for it; beyond that the caller measures the chunk at once), each
    staged layer loaded (float64 rows, norms, unit rows, validation) into one layer's scratch rows just before it is
    measured, so the second thread's memory traffic stays in cache and the caller (the probe's forward pass) and the
    second thread share the work on two cores. The first layers go to the second thread one at a time (it starts at
    once), and so do the last ones when ``expected_layers`` says how many will come (little is left for
    :meth:`records`). Every chunk is measured by the same functions either way, on one thread each; the records are
    the same.

    Gives the records of :func:`collapse_records_layers` on the same layers (with the same ``precision``).
    """

    def __init__(
        self,
        edge_index: Tensor | None = None,
        num_singular_values: int = 16,
        cone_tol_deg: float = 1e-3,
        precision: str = "float64",
        background: bool = False,
        buffer_pool: dict[tuple, Any] | None = None,
        expected_layers: int | None = None,
    ):
        self.precision = check_choice(precision, PRECISIONS, "precision", "collapse_metrics")
        self.edge_index = edge_index
        self.num_singular_values = num_singular_values
        self.cone_tol_deg = cone_tol_deg
        self._rows: _Rows | None = None
        self._chunks: dict[int, tuple[_StackBuffers, list[int]]] = {}  # width -> (filling buffers, index per slot)
        self._free: dict[int, list[_StackBuffers]] = {}  # width -> buffers of measured chunks (background only)
        self._measuring: list[tuple[Future, int, list[int], _StackBuffers]] = []  # (parts, width, indices, buffers)
        self._parts: dict[int, tuple[int, tuple[_SetSummary, dict | None]]] = {}  # index -> (width, its summary)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="graphnorm-probe") if background else None
        # Buffers from earlier streams over rows of the same size, and for later ones (MB-sized fresh tensors cost
        # their page faults again each time); also the edge structure of the last rows (_one_graph_rows).
        self._pool = {} if buffer_pool is None else buffer_pool
        self._expected_layers = expected_layers
        self._added = 0

    def add(self, index: int, x: Tensor) -> None:
        """Measure layer ``index`` (0-based position) with output ``x`` [n, d]; a later call for the same index
        replaces it. ``ValueError`` / ``TypeError`` as :func:`collapse_records` for invalid ``x`` (a shape error at
        once; with ``background``, NaN / Inf and extreme values when the layer's chunk is measured: from a later
        ``add`` that measures a chunk itself, or from :meth:`records`)."""
        _check_layer(x, None if self._rows is None else self._rows.num_rows, index + 1)
        with single_thread():
            if self._rows is None:
                self._rows = self._one_graph_rows(x.size(0))
            width = x.size(1)
            if width not in self._chunks:
                self._chunks[width] = (self._new_buffers(width), [])
            buffers, indices = self._chunks[width]
            if self._executor is None:
                buffers.load(len(indices), x, None)  # validates x before an earlier call's layer is replaced
            else:
                buffers.stage(len(indices), x)  # loaded (and validated) on the thread that measures the chunk
            self._discard(index, width)
            indices.append(index)
            self._added += 1
            # With the second thread, the first and the last layers go to it one at a time: it starts at once, and
            # little is left for it when the records are asked for.
            near_start = self._added < buffers.capacity
            near_end = self._expected_layers is not None and self._added > self._expected_layers - buffers.capacity
            if len(indices) == buffers.capacity or ((near_start or near_end) and self._executor is not None):
                self._measure(width)

    def _one_graph_rows(self, n: int) -> _Rows:
        """The :class:`_Rows` of ``n`` rows and this stream's edges: the pool's when the last stream with this pool
        had the same edges (equal values: a model may pass a new tensor each forward) over as many rows, as when a
        probe measures the same graph again (no edge checks and sorting per call); else built and left in the pool
        with a copy of the edges."""
        edges = self.edge_index
        cached = self._pool.get(_ROWS_KEY)
        if cached is not None and cached[1].num_rows == n and same_values(cached[0], edges):
            return cached[1]
        rows = _build_rows(n, edges, None, None)
        self._pool[_ROWS_KEY] = (None if edges is None else edges.clone(), rows)
        return rows

    def _new_buffers(self, width: int) -> _StackBuffers:
        """Buffers for a chunk of layers of ``width`` (from the pool when it has such buffers)."""
        capacity = _chunk_capacity(self._rows.num_rows, self._rows.num_edges, width)
        pooled = self._pool.get((capacity, self._rows.num_rows, width, self.precision))
        return pooled.pop() if pooled else _StackBuffers(capacity, self._rows.num_rows, width, self.precision)

    def _discard(self, index: int, loading_width: int) -> None:
        """Forget layer ``index`` (measured, or waiting in a chunk: the chunk's later layers, and the layer being
        loaded in the first free slot of the chunk of ``loading_width``, move up a slot)."""
        if any(index in indices for _, _, indices, _ in self._measuring):
            self._collect()
        self._parts.pop(index, None)
        for width, (buffers, indices) in self._chunks.items():
            if index in indices:
                buffers.move_up(indices.index(index), len(indices) + (width == loading_width))
                indices.remove(index)

    def _measure(self, width: int, here: bool = False) -> None:
        """Measure the layers waiting in the chunk of ``width``: on the second thread unless ``here`` or too many
        chunks wait for it already (the chunk's buffers are then swapped for free ones), else here."""
        buffers, indices = self._chunks[width]
        if not indices:
            return
        for entry in [entry for entry in self._measuring if entry[0].done()]:
            self._take(entry)
        if here or self._executor is None or len(self._measuring) >= _QUEUED_CHUNKS:
            parts = _measure_chunk(buffers, len(indices), self._rows, self.cone_tol_deg)
            self._parts.update((index, (width, part)) for index, part in zip(indices, parts))
            indices.clear()
            return
        future = self._executor.submit(_measure_chunk, buffers, len(indices), self._rows, self.cone_tol_deg)
        self._measuring.append((future, width, list(indices), buffers))
        free = self._free.setdefault(width, [])
        self._chunks[width] = (free.pop() if free else self._new_buffers(width), [])

    def _take(self, entry: tuple[Future, int, list[int], _StackBuffers]) -> None:
        """Wait for one chunk being measured, keep its summaries and free its buffers."""
        self._measuring.remove(entry)
        future, width, indices, buffers = entry
        self._free.setdefault(width, []).append(buffers)
        self._parts.update((index, (width, part)) for index, part in zip(indices, future.result()))

    def _collect(self) -> None:
        """Wait for every chunk being measured."""
        while self._measuring:
            self._take(self._measuring[0])

    def records(self) -> list[list[dict]]:
        """Records of every added layer, in index order (the per-layer values of each width batched over layers)."""
        try:
            with single_thread():
                for width in self._chunks:  # the last chunks here, beside the second thread's
                    self._measure(width, here=True)
                self._collect()
        finally:
            self.close()
        for buffers in [buffers for buffers, _ in self._chunks.values()] + sum(self._free.values(), []):
            self._pool.setdefault(buffers.key, []).append(buffers)
        self._chunks.clear()
        self._free.clear()
        widths: dict[int, list[int]] = {}
        for index in sorted(self._parts):
            widths.setdefault(self._parts[index][0], []).append(index)
        results: dict[int, list[dict]] = {}
        with single_thread():
            for group in widths.values():
                group_records = _one_graph_records([self._parts[i][1] for i in group], self.num_singular_values)
                results.update(zip(group, group_records))
        return [results[index] for index in sorted(results)]

    def close(self) -> None:
        """Stop the second thread (after the chunk it is measuring); the stream measures no more layers on it."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


def _measure_chunk(
    buffers: _StackBuffers, count: int, rows: _Rows, cone_tol_deg: float
) -> list[tuple[_SetSummary, dict | None]]:
    """:func:`_one_graph_parts` of the first ``count`` layers of ``buffers``, the staged ones loaded in the same
    compiled call, each just before it is measured (:func:`_measure_layers`: this runs on the probe's second thread,
    where each short torch call would let the forward pass's thread take the interpreter lock and wait to get it
    back), validated as :meth:`_StackBuffers.load` does: a layer that is not finite or not of ordinary scale is
    loaded again by :meth:`_StackBuffers.load`, which rejects or rescales it, and measured then."""
    staged = np.array(buffers.staged[:count], dtype=np.bool_)
    stack = buffers.stack(count)  # the staging buffer stands for the rows in the edge metrics where it holds all
    measured = _Measured.empty(count, buffers.x.size(2))
    staging = buffers.staging.numpy()[:count] if staged.any() else None
    _measure_stack(stack, rows, cone_tol_deg, measured, np.ones(count, dtype=np.bool_), staging, staged)
    again = np.zeros(count, dtype=np.bool_)
    for slot in np.flatnonzero(staged).tolist():
        buffers.staged[slot] = False
        largest, squared_sum, finite = measured.widened[slot].tolist()
        if finite and _ordinary_largest(largest):
            check_not_too_large(squared_sum, buffers.x.size(1), "collapse_metrics")
            buffers.shifts[slot] = 0
        else:
            buffers.load(slot, buffers.staging[slot], None)
            again[slot] = True
    if again.any():
        stack = buffers.stack(count)  # the loaded rows now, not the staged ones, for every metric
        _measure_stack(stack, rows, cone_tol_deg, measured, again)
    return _parts_of(measured, stack, rows)


def collapse_records(
    x: Tensor,
    edge_index: Tensor | None = None,
    batch: Tensor | None = None,
    token_mask: Tensor | None = None,
    num_singular_values: int = 16,
    cone_tol_deg: float = 1e-3,
    precision: str = "float64",
) -> list[dict]:
    """Every collapse metric of ``x`` [n, d] as tidy records ``{rows, metric, stat, value}``; each definition and
    its source: :mod:`graphnorm.analysis.metrics`.

    rows: ``token_mask`` marks graph-token rows (one per graph, e.g. Graphormer's graph token), reported as
    ``"token"`` and measured as one set across graphs (a single token per graph has no within-graph geometry); the
    rest are ``"node"`` rows. The edge metrics (``mad_neighbors``, ``dirichlet_energy``,
    ``dirichlet_energy_normalized``) need ``edge_index`` and drop the edges touching a token row.

    stat: without ``batch`` the rows form one graph and every metric is ``"value"``. With a PyG ``batch`` vector every
    metric is computed on each graph's node rows alone and reported as ``"mean"`` and ``"std"`` (population std) over
    graphs, ignoring graphs where it is undefined (NaN, e.g. a cosine in a one-node graph) or without node rows, so a
    graph's value does not depend on the graphs batched with it. The rank, angle and all-pairs metrics are also
    computed over all node rows together (``"pooled"``): collapse *across* graphs (every graph mapped to the same
    direction) shows there and not per graph.

    Spectrum: the first ``num_singular_values`` singular values over the largest, as metrics ``sv_000``,
    ``sv_001``, ... ("value" for one graph, "pooled" for a batch). Cones: ``cone_angle`` is the exact smallest
    enclosing cone (a maximum over rows, so a few outlier rows decide it), ``cone_angle_q90`` the robust cone of the
    90 % of the rows closest to their mean direction (:func:`graphnorm.analysis.cone.robust_cone_angle`), both within
    ``cone_tol_deg``.

    precision: ``"float64"`` (the reference) copies the rows to float64; ``"float32"`` keeps them in float32 (half
    the memory of the row buffers; float64 input is rounded to float32) and widens them wherever they are summed:
    Gram matrices, norms, unit rows, cones and edge sums all accumulate in float64 (a float32 Gram matrix or float32
    unit rows would move the effective rank and small cone angles of nearly collapsed layers far beyond 1e-5 and
    1e-3 degrees), so float32 model outputs give the reference's numbers up to the order of the sums.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"collapse_metrics: x must be a torch.Tensor, got {type(x).__name__}")
    return collapse_records_layers(
        [x], edge_index, batch, token_mask, num_singular_values, cone_tol_deg, precision=precision
    )[0]


def warm_kernels() -> None:
    """Compile (or load from numba's cache beside the modules) every compiled kernel the probe runs: the edge
    products and the cone solver, in each specialization the probe calls, by measuring a tiny layer of rows with
    edges, as one graph and as a batch of two (the per-graph path calls the cone solver itself). A process that will
    probe (a sweep worker) calls it when it starts, so its first probe does not wait for the kernels. Records
    nothing; cheap once the kernels are loaded."""
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(2 * WORKING_SIZE + 8, 4, generator=generator) + 0.1  # rows beyond the cone solver's working set
    edges = torch.randint(0, x.size(0), (2, 3 * x.size(0)), generator=generator)
    edges = torch.cat([edges, edges.flip(0)], dim=1)
    two_graphs = (torch.arange(x.size(0)) >= x.size(0) // 2).long()
    for precision in PRECISIONS:  # the edge kernel is compiled for float64 and for float32 rows
        collapse_records(x, edge_index=edges, precision=precision)
        collapse_records(
            x, edge_index=edges[:, two_graphs[edges[0]] == two_graphs[edges[1]]], batch=two_graphs, precision=precision
        )
        rows = _build_rows(x.size(0), edges, None, None)
        for dtype in (torch.float32, torch.float64):  # staged layers, measured as a probe's second thread does
            buffers = _StackBuffers(1, x.size(0), x.size(1), precision)
            buffers.stage(0, x.to(dtype))
            _measure_chunk(buffers, 1, rows, 1e-3)


def records_to_flat_dict(records: list[dict]) -> dict[str, float]:
    """Flatten records to ``{key: value}``: key = metric, + "_std" / "_pooled" for those stats ("value" and
    "mean" keep the bare name), prefixed "token_" for token rows."""
    flat: dict[str, float] = {}
    for record in records:
        key = record["metric"] if record["stat"] in ("value", "mean") else f"{record['metric']}_{record['stat']}"
        flat[("token_" if record["rows"] == "token" else "") + key] = record["value"]
    return flat


def collapse_metrics(
    x: Tensor,
    edge_index: Tensor | None = None,
    batch: Tensor | None = None,
    token_mask: Tensor | None = None,
    num_singular_values: int = 0,
    cone_tol_deg: float = 1e-3,
) -> dict[str, float]:
    """All collapse metrics of ``x`` as a flat dict (see :func:`collapse_records` and
    :func:`records_to_flat_dict` for the keys): e.g. ``effective_rank`` (one graph, or mean over graphs),
    ``effective_rank_std``, ``effective_rank_pooled``, ``token_cone_angle``."""
    return records_to_flat_dict(
        collapse_records(x, edge_index, batch, token_mask, num_singular_values, cone_tol_deg=cone_tol_deg)
    )
