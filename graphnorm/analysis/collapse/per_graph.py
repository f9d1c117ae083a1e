"""Per-graph metrics of stacked layers for a batch of graphs: every metric of each graph's node rows alone as
[layers, graphs] (ranks from zero-padded dense graphs, cones per layer and graph, edge metrics from one compiled
pass), and their mean and std over graphs."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from graphnorm.analysis.collapse.kernels import _stacked_edge_metrics
from graphnorm.analysis.collapse.loading import _unscaled_energy
from graphnorm.analysis.collapse.rows import _RowStructure
from graphnorm.analysis.collapse.sets import _ranks
from graphnorm.analysis.collapse.staging import _LayerStack
from graphnorm.analysis.cone import ROBUST_CONE_LEVEL, exact_and_robust_cones


def _per_graph_metrics_of_stack(stack: _LayerStack, rows: _RowStructure, cone_tol_deg: float) -> dict[str, Tensor]:
    """Every per-graph metric as [L, num_graphs] (NaN where undefined), vectorized over layers and graphs
    except the cone angle (one small min-norm-point problem per layer and graph)."""
    x, units = stack.x.double(), stack.units
    num_layers, num_rows, d = x.shape
    num_graphs, batch = rows.num_graphs, rows.batch
    # Zero padding leaves singular values alone: [m, L*d] -> [G, N, L*d] -> [L, G, N, d].
    dense, _ = to_dense_batch(x.permute(1, 0, 2).reshape(num_rows, num_layers * d), batch, batch_size=num_graphs)
    dense = dense.view(num_graphs, -1, num_layers, d).permute(2, 0, 1, 3)
    effective, stable = _ranks(_padded_singular_values(dense))
    units_sum = torch.zeros(num_layers, num_graphs, d, dtype=x.dtype).index_add_(1, batch, units)
    nonzero64 = stack.nonzero.to(x.dtype)
    m = torch.zeros(num_layers, num_graphs, dtype=x.dtype).index_add_(1, batch, nonzero64)
    mean_cos = torch.where(m >= 2, (units_sum.square().sum(2) - m) / (m * (m - 1)).clamp_min(1.0), torch.nan)
    cones, robust_cones = _per_graph_cones(x, stack, rows, units_sum, m, cone_tol_deg)
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


def _per_graph_cones(
    x: Tensor, stack: _LayerStack, rows: _RowStructure, units_sum: Tensor, m: Tensor, cone_tol_deg: float
) -> tuple[Tensor, Tensor]:
    """Exact and robust cone angle [L, num_graphs] of the float64 rows ``x`` of ``stack`` per layer and graph, given
    each graph's unit-row sums ``units_sum`` [L, G, d] and non-zero rows ``m`` [L, G] (NaN without one)."""
    norms, nonzero, units = stack.norms, stack.nonzero, stack.units
    num_layers, num_graphs, d = units_sum.shape
    batch = rows.batch
    # Certificate for 90 degrees first, vectorized: the unit rows weighted by their norms,
    # sum_i x_i / sum_i ||x_i||, and their plain mean are points of each graph's hull.
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
    return cones, robust_cones


def _padded_singular_values(x: Tensor) -> Tensor:
    """Descending singular values of every matrix in [..., m, d] (float64); through the d x d Gram matrix when
    tall (m > 2d), as :func:`graphnorm.analysis.metrics._singular_values_f64` does for one matrix."""
    if x.size(-2) > 2 * x.size(-1):
        gram = x.transpose(-1, -2) @ x
        return torch.linalg.eigvalsh(gram).clamp_min(0.0).sqrt().flip(-1)
    return torch.linalg.svdvals(x)


def _edge_metrics_of_stack(stack: _LayerStack, rows: _RowStructure) -> dict[str, np.ndarray]:
    """Dirichlet energies and neighbour MAD of stacked layers per graph: {name: [L, num_graphs]} (NaN where
    undefined), from one pass over the endpoint rows of every edge (per-graph squared distances for Dirichlet,
    per-node sums of neighbour cosines for the neighbour MAD; :func:`_edge_sums`) and one over the nodes, in one
    compiled call (:func:`_stacked_edge_metrics`)."""
    x = stack.rows_as_given if stack.rows_as_given is not None else stack.x.numpy()
    out = np.empty((3, x.shape[0], rows.num_graphs))
    no_index = np.empty(0, dtype=np.int64)
    _stacked_edge_metrics(
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
