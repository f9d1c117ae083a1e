"""The measurement of one graph's stacked layers, a layer at a time in one compiled call (:func:`_measure_layers`):
each layer's spectrum, cones and edge metrics while its rows are in cache, a staged layer loaded just before. What a
layer leaves is a :data:`_LayerPart`, its set summary and edge metrics, from which the records are made."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphnorm.analysis.collapse.kernels import _ordinary_largest, _stacked_edge_metrics, _widen_rows
from graphnorm.analysis.collapse.loading import _unscaled_energy
from graphnorm.analysis.collapse.rows import _RowStructure
from graphnorm.analysis.collapse.sets import _SetSummary, _singular_values_from
from graphnorm.analysis.collapse.staging import _LayerStack, _StackBuffers
from graphnorm.analysis.cone import ROBUST_CONE_LEVEL, layer_cones
from graphnorm.analysis.magnitude import check_not_too_large
from graphnorm.analysis.metrics import gram_matrix, spectrum_from_gram
from graphnorm.numba_kernels import kernel

# One layer's set summary and its edge metrics ({name: [1]}; None without edges).
_LayerPart = tuple[_SetSummary, dict | None]


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
    (:func:`_stacked_edge_metrics`; when ``with_edges``), each the value the stage-at-a-time functions give for the
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
            _stacked_edge_metrics(rows, one_norms, source, target, no_index, no_index, node_counts, both_ways, out)
        elif staging_exact:
            rows = staging[layer : layer + 1]
            _stacked_edge_metrics(rows, one_norms, source, target, no_index, no_index, node_counts, both_ways, out)
        else:
            rows = layer_x.reshape((1, num_rows, width))
            _stacked_edge_metrics(rows, one_norms, source, target, no_index, no_index, node_counts, both_ways, out)


@dataclass
class _StackMeasurements:
    """What :func:`_measure_layers` leaves for a chunk of ``L`` layers of width ``d``."""

    widened: np.ndarray  # [L, 3]: largest norm, sum of squares, finite (staged layers)
    sigmas: np.ndarray  # [L, d]: descending singular values (tall layers)
    cones: np.ndarray  # [2, L]: exact, robust
    sums: np.ndarray  # [L, d]
    counts: np.ndarray  # [L]
    edges: np.ndarray  # [3, L, 1]: Dirichlet energy (scaled rows), its normalized form, neighbour MAD

    @classmethod
    def empty(cls, num_layers: int, width: int) -> _StackMeasurements:
        return cls(
            np.zeros((num_layers, 3)),
            np.empty((num_layers, width)),
            np.empty((2, num_layers)),
            np.empty((num_layers, width)),
            np.empty(num_layers, dtype=np.int64),
            np.empty((3, num_layers, 1)),
        )


def _measure_stack(
    stack: _LayerStack,
    rows: _RowStructure,
    cone_tol_deg: float,
    measured: _StackMeasurements,
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


def _layer_parts(measured: _StackMeasurements, stack: _LayerStack, rows: _RowStructure) -> list[_LayerPart]:
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


def _measure_one_graph(stack: _LayerStack, rows: _RowStructure, cone_tol_deg: float) -> list[_LayerPart]:
    """What each stacked layer's node rows contribute when they form one graph: the set summary and the edge
    metrics ({name: [1]}), measured a layer at a time in one compiled call (:func:`_measure_layers`)."""
    num_layers = stack.x.size(0)
    measured = _StackMeasurements.empty(num_layers, stack.x.size(2))
    _measure_stack(stack, rows, cone_tol_deg, measured, np.ones(num_layers, dtype=np.bool_))
    return _layer_parts(measured, stack, rows)


def _measure_chunk(buffers: _StackBuffers, count: int, rows: _RowStructure, cone_tol_deg: float) -> list[_LayerPart]:
    """:func:`_measure_one_graph` of the first ``count`` layers of ``buffers``, the staged ones loaded in the same
    compiled call, each just before it is measured (:func:`_measure_layers`: this runs on the probe's second thread,
    where each short torch call would let the forward pass's thread take the interpreter lock and wait to get it
    back), validated as :meth:`_StackBuffers.load` does: a layer that is not finite or not of ordinary scale is
    loaded again by :meth:`_StackBuffers.load`, which rejects or rescales it, and measured then."""
    staged = np.array(buffers.staged[:count], dtype=np.bool_)
    stack = buffers.stack(count)  # the staging buffer stands for the rows in the edge metrics where it holds all
    measured = _StackMeasurements.empty(count, buffers.x.size(2))
    staging = buffers.staging.numpy()[:count] if staged.any() else None
    _measure_stack(stack, rows, cone_tol_deg, measured, np.ones(count, dtype=np.bool_), staging, staged)
    again = np.zeros(count, dtype=np.bool_)
    for slot in np.flatnonzero(staged).tolist():
        buffers.staged[slot] = False
        largest, squared_sum, finite = measured.widened[slot].tolist()
        if finite and _ordinary_largest(largest):
            check_not_too_large(squared_sum, buffers.x.size(1), "collapse_metrics")
        else:
            buffers.load(slot, buffers.staging[slot], None)
            again[slot] = True
    if again.any():
        stack = buffers.stack(count)  # the loaded rows now, not the staged ones, for every metric
        _measure_stack(stack, rows, cone_tol_deg, measured, again)
    return _layer_parts(measured, stack, rows)
