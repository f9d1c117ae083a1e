"""The compiled kernels of the collapse engine that work on NumPy arrays of stacked layers: rows widened with their
norms and unit rows, Gram matrices and their spectra, and the edge metrics (Dirichlet energies, neighbour MAD) in one
pass over every edge's two rows. Each is made by :func:`graphnorm.numba_kernels.kernel` and cached on disk."""

from __future__ import annotations

import math

import numpy as np

from graphnorm.analysis.magnitude import SAFE_EXPONENT
from graphnorm.analysis.metrics import gram_matrix, spectrum_from_gram
from graphnorm.numba_kernels import kernel


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


@kernel()
def _ordinary_largest(largest: float) -> bool:
    """Whether a largest row norm is finite and within ``2**±200``: then no entry is extreme enough to need
    :func:`_rescale_in_place` (an entry is at most its row's norm, and at least the norm over ``sqrt(d)``). Compiled,
    so the loaders in Python and in :func:`_measure_layers` ask the same question."""
    return math.isfinite(largest) and 2.0**-SAFE_EXPONENT <= largest <= 2.0**SAFE_EXPONENT


@kernel(nogil=True)
def _stacked_grams(x: np.ndarray) -> np.ndarray:
    """:func:`graphnorm.analysis.metrics.gram_matrix` of every layer of ``x`` [L, m, d] (float32 widened)."""
    grams = np.empty((x.shape[0], x.shape[2], x.shape[2]))
    for layer in range(x.shape[0]):
        grams[layer] = gram_matrix(np.asarray(x[layer], dtype=np.float64))
    return grams


@kernel(nogil=True)
def _stacked_spectra(grams: np.ndarray) -> np.ndarray:
    """:func:`graphnorm.analysis.metrics.spectrum_from_gram` of every Gram matrix of ``grams`` [L, d, d]."""
    sigma = np.empty(grams.shape[:2])
    for layer in range(grams.shape[0]):
        sigma[layer] = spectrum_from_gram(grams[layer])
    return sigma


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
def _stacked_edge_metrics(
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
    """:func:`_edge_metrics_of_stack` compiled, in one call (the probe's second thread runs it; every short NumPy step
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
