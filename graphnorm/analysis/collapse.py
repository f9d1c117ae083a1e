"""All collapse metrics of one representation, per graph in a batch, as tidy records.

Row sets. ``token_mask`` marks graph-token rows (one per graph, e.g. Graphormer's virtual node). Node rows
(the rest) are measured per graph; token rows are measured as one set across graphs (a single token per
graph has no within-graph geometry). Edges touching a token row are dropped for the edge-based metrics.

Aggregation over a batch (PyG ``batch`` vector): every metric is computed on each graph's node rows alone,
then reported as ``stat="mean"`` and ``stat="std"`` (population std, ddof=0) over graphs, ignoring graphs
where the metric is undefined (NaN, e.g. a cosine in a one-node graph) and graphs with no node rows. So the
value for one graph does not depend on padding rows or on the other graphs it is batched with. The
rank / angle / all-pairs metrics are also computed once over all node rows together (``stat="pooled"``):
collapse *across* graphs (every graph mapped to the same direction) shows there and not per graph.
Without ``batch`` the rows form one graph and every metric has ``stat="value"``.

Spectrum: the first ``num_singular_values`` singular values normalized by the largest are emitted as metrics
``sv_000``, ``sv_001``, ... (stat "value" for one graph, "pooled" for a batch), so spectra travel in the
same tidy table (and the sweep's layers.csv) as everything else.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import scipy.sparse
import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from graphnorm.analysis.cone import cone_angle_info
from graphnorm.analysis.metrics import (
    _check_edge_index,
    _singular_values_f64,
    as_float64,
    effective_rank_from_singular_values,
    stable_rank_from_singular_values,
)

__all__ = ["collapse_records", "collapse_metrics", "records_to_flat_dict", "METRIC_NAMES"]

# Metrics per graph (and pooled when marked) in the order they appear in tables.
PER_GRAPH_METRICS = (
    "effective_rank",
    "stable_rank",
    "mean_cosine",
    "cone_angle",
    "mad",
    "mad_neighbors",
    "dirichlet_energy",
    "dirichlet_energy_normalized",
    "zero_row_fraction",
)
POOLED_METRICS = ("effective_rank", "stable_rank", "mean_cosine", "cone_angle", "mad", "zero_row_fraction")
METRIC_NAMES = PER_GRAPH_METRICS


def spectrum_metric_name(index: int) -> str:
    return f"sv_{index:03d}"


def _set_metrics(x64: Tensor, cone_tol_deg: float, num_singular_values: int) -> dict[str, float]:
    """Edge-free metrics of one set of rows (already validated float64)."""
    sigma = _singular_values_f64(x64)
    norms = x64.norm(dim=1)
    nonzero = norms > 0
    m = int(nonzero.sum())
    if m >= 2:
        units_sum = (x64[nonzero] / norms[nonzero, None]).sum(dim=0)
        mean_cos = float((units_sum.dot(units_sum) - m) / (m * (m - 1)))
    else:
        mean_cos = math.nan
    cone = cone_angle_info(x64.numpy(), tol_deg=cone_tol_deg).angle_deg if m >= 1 else math.nan
    values = {
        "effective_rank": effective_rank_from_singular_values(sigma),
        "stable_rank": stable_rank_from_singular_values(sigma),
        "mean_cosine": mean_cos,
        "cone_angle": cone,
        "mad": 1.0 - mean_cos,
        "zero_row_fraction": 1.0 - m / x64.size(0),
    }
    if num_singular_values > 0:
        top = float(sigma[0]) if sigma.numel() else 0.0
        for index in range(min(num_singular_values, sigma.numel())):
            values[spectrum_metric_name(index)] = float(sigma[index]) / top if top > 0 else 0.0
    return values


def _edge_metrics_per_graph(x64: Tensor, batch: Tensor, num_graphs: int, edge_index: Tensor) -> dict[str, np.ndarray]:
    """Dirichlet energies and neighbour MAD per graph (arrays of length num_graphs)."""
    num_rows = x64.size(0)
    node_counts = torch.bincount(batch, minlength=num_graphs).to(torch.float64)
    norms = x64.norm(dim=1)
    nonzero = norms > 0
    source, target = edge_index
    # Dirichlet energy per graph: (1/n_g) sum over the graph's edges of ||x_s - x_t||^2. Explicit differences
    # (not deg-weighted norms minus cross terms) so an energy decaying to 1e-30 is not lost to cancellation.
    squared = (x64.index_select(0, source) - x64.index_select(0, target)).square_().sum(1)
    graph_of_edge = batch.index_select(0, source)
    energy = torch.zeros(num_graphs, dtype=torch.float64).index_add_(0, graph_of_edge, squared)
    frobenius_sq = torch.zeros(num_graphs, dtype=torch.float64).index_add_(0, batch, norms.square())
    result = {"dirichlet_energy": (energy / node_counts.clamp_min(1)).numpy()}
    normalized = torch.where(frobenius_sq > 0, energy / frobenius_sq.clamp_min(1e-300), torch.zeros_like(energy))
    result["dirichlet_energy_normalized"] = (normalized / node_counts.clamp_min(1)).numpy()
    # MAD over neighbours: node i's mean cosine distance to its non-self, non-zero neighbours is
    # 1 - u_i . (A u)_i / (A 1_nonzero)_i with A the adjacency without self-loops (zero rows have u = 0).
    off_diagonal = (source != target).numpy()
    adjacency = scipy.sparse.csr_matrix(
        (np.ones(int(off_diagonal.sum())), (source.numpy()[off_diagonal], target.numpy()[off_diagonal])),
        shape=(num_rows, num_rows),
    )
    units = np.zeros((num_rows, x64.size(1)))
    nonzero_numpy = nonzero.numpy()
    units[nonzero_numpy] = (x64[nonzero] / norms[nonzero, None]).numpy()
    cosine_sum = np.einsum("ij,ij->i", units, adjacency @ units)
    count = adjacency @ nonzero_numpy.astype(np.float64)
    has_targets = (count > 0) & nonzero_numpy
    node_mad = np.where(has_targets, 1.0 - cosine_sum / np.maximum(count, 1.0), 0.0)
    batch_numpy = batch.numpy()
    mad_sum = np.bincount(batch_numpy, weights=node_mad, minlength=num_graphs)
    mad_count = np.bincount(batch_numpy, weights=has_targets.astype(np.float64), minlength=num_graphs)
    result["mad_neighbors"] = np.where(mad_count > 0, mad_sum / np.maximum(mad_count, 1.0), np.nan)
    return result


def _per_graph_metrics(
    x64: Tensor, batch: Tensor, num_graphs: int, edge_index: Tensor | None, cone_tol_deg: float
) -> dict[str, np.ndarray]:
    """Every per-graph metric as an array of length num_graphs (NaN where undefined), vectorized over graphs
    except the cone angle (one small min-norm-point problem per graph)."""
    d = x64.size(1)
    node_counts = torch.bincount(batch, minlength=num_graphs).to(torch.float64)
    dense, _ = to_dense_batch(x64, batch, batch_size=num_graphs)  # zero padding: leaves singular values alone
    if dense.size(1) > 2 * d:
        sigma = torch.linalg.eigvalsh(dense.transpose(1, 2) @ dense).clamp_min(0).sqrt().flip(-1)
    else:
        sigma = torch.linalg.svdvals(dense)
    sigma_sum = sigma.sum(dim=1)
    p = sigma / sigma_sum.clamp_min(torch.finfo(torch.float64).tiny)[:, None]
    entropy = -torch.where(p > 0, p * p.clamp_min(torch.finfo(torch.float64).tiny).log(), torch.zeros_like(p)).sum(1)
    effective = torch.where(sigma_sum > 0, entropy.exp(), torch.zeros_like(entropy))
    top = sigma[:, 0]
    stable = torch.where(top > 0, sigma.square().sum(1) / top.clamp_min(1e-300).square(), torch.zeros_like(top))

    norms = x64.norm(dim=1)
    nonzero = norms > 0
    units = torch.where(nonzero[:, None], x64 / norms.clamp_min(1e-300)[:, None], torch.zeros_like(x64))
    units_sum = torch.zeros(num_graphs, d, dtype=torch.float64).index_add_(0, batch, units)
    m = torch.zeros(num_graphs, dtype=torch.float64).index_add_(0, batch, nonzero.to(torch.float64))
    mean_cos = torch.where(m >= 2, (units_sum.square().sum(1) - m) / (m * (m - 1)).clamp_min(1), torch.nan)

    cones = np.full(num_graphs, np.nan)
    x_numpy = x64.numpy()
    order = torch.argsort(batch, stable=True).numpy()
    boundaries = np.concatenate([[0], np.cumsum(node_counts.numpy().astype(np.int64))])
    for graph in range(num_graphs):
        if m[graph] >= 1:
            rows = x_numpy[order[boundaries[graph] : boundaries[graph + 1]]]
            cones[graph] = cone_angle_info(rows, tol_deg=cone_tol_deg).angle_deg

    result = {
        "effective_rank": effective.numpy(),
        "stable_rank": stable.numpy(),
        "mean_cosine": mean_cos.numpy(),
        "cone_angle": cones,
        "mad": (1.0 - mean_cos).numpy(),
        "zero_row_fraction": (1.0 - m / node_counts.clamp_min(1)).numpy(),
    }
    if edge_index is not None:
        result.update(_edge_metrics_per_graph(x64, batch, num_graphs, edge_index))
    empty = node_counts.numpy() == 0
    for values in result.values():
        values[empty] = np.nan
    return result


def _node_subgraph(
    x64: Tensor, batch: Tensor | None, edge_index: Tensor | None, keep: Tensor
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Restrict rows to ``keep`` and edges to those between kept rows (re-indexed)."""
    new_index = torch.full((x64.size(0),), -1, dtype=torch.long)
    new_index[keep] = torch.arange(int(keep.sum()))
    sub_edges = None
    if edge_index is not None:
        both = keep[edge_index[0]] & keep[edge_index[1]]
        sub_edges = new_index[edge_index[:, both]]
    return x64[keep], (batch[keep] if batch is not None else None), sub_edges


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run torch ops on one thread, restoring the setting after. The matrices here are small (n x 64): thread
    start-up and spinning cost more than they save, badly so on an oversubscribed machine (measured 30x)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def collapse_records(
    x: Tensor,
    edge_index: Tensor | None = None,
    batch: Tensor | None = None,
    token_mask: Tensor | None = None,
    num_singular_values: int = 16,
    cone_tol_deg: float = 1e-3,
) -> list[dict]:
    """Every collapse metric of ``x`` [n, d] as tidy records ``{rows, metric, stat, value}``.

    rows: "node" or "token"; stat: "value" (one graph / the token set), "mean" / "std" over graphs,
    "pooled" (all node rows of a batch together). See the module docstring for the aggregation and
    :mod:`graphnorm.analysis.metrics` for each definition and its source. Edge metrics (``mad_neighbors``,
    ``dirichlet_energy``, ``dirichlet_energy_normalized``) need ``edge_index``.
    """
    with single_thread():
        return _collapse_records(x, edge_index, batch, token_mask, num_singular_values, cone_tol_deg)


def _collapse_records(
    x: Tensor,
    edge_index: Tensor | None,
    batch: Tensor | None,
    token_mask: Tensor | None,
    num_singular_values: int,
    cone_tol_deg: float,
) -> list[dict]:
    x64 = as_float64(x, "collapse_metrics")
    n = x64.size(0)
    if edge_index is not None:
        edge_index = _check_edge_index(edge_index, n, "collapse_metrics")
    if batch is not None:
        if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.numel() != n:
            shape = tuple(batch.shape) if isinstance(batch, Tensor) else type(batch).__name__
            raise ValueError(f"collapse_metrics: batch must have shape [n] = [{n}], got {shape}")
        if batch.is_floating_point() or (batch.numel() and int(batch.min()) < 0):
            raise ValueError("collapse_metrics: batch must hold non-negative integer graph ids")
        batch = batch.to("cpu", torch.long)
    records: list[dict] = []
    if token_mask is not None:
        if not isinstance(token_mask, Tensor) or token_mask.dim() != 1 or token_mask.numel() != n:
            shape = tuple(token_mask.shape) if isinstance(token_mask, Tensor) else type(token_mask).__name__
            raise ValueError(f"collapse_metrics: token_mask must have shape [n] = [{n}], got {shape}")
        token_mask = token_mask.to("cpu", torch.bool)
        if token_mask.any():
            token_values = _set_metrics(x64[token_mask], cone_tol_deg, num_singular_values)
            records += [dict(rows="token", metric=k, stat="value", value=v) for k, v in token_values.items()]
        x64, batch, edge_index = _node_subgraph(x64, batch, edge_index, ~token_mask)
        if x64.size(0) == 0:
            return records
    if batch is None:
        values = _set_metrics(x64, cone_tol_deg, num_singular_values)
        if edge_index is not None:
            per_graph = _edge_metrics_per_graph(x64, torch.zeros(x64.size(0), dtype=torch.long), 1, edge_index)
            for name in ("mad_neighbors", "dirichlet_energy", "dirichlet_energy_normalized"):
                values[name] = float(per_graph[name][0])
        ordered = [name for name in PER_GRAPH_METRICS if name in values] + [k for k in values if k.startswith("sv_")]
        records += [dict(rows="node", metric=k, stat="value", value=values[k]) for k in ordered]
        return records
    num_graphs = int(batch.max()) + 1
    per_graph = _per_graph_metrics(x64, batch, num_graphs, edge_index, cone_tol_deg)
    for name in PER_GRAPH_METRICS:
        if name not in per_graph:
            continue
        finite = per_graph[name][~np.isnan(per_graph[name])]
        mean = float(finite.mean()) if finite.size else math.nan
        std = float(finite.std()) if finite.size else math.nan
        records.append(dict(rows="node", metric=name, stat="mean", value=mean))
        records.append(dict(rows="node", metric=name, stat="std", value=std))
    pooled = _set_metrics(x64, cone_tol_deg, num_singular_values)
    for name, value in pooled.items():
        if name in POOLED_METRICS or name.startswith("sv_"):
            records.append(dict(rows="node", metric=name, stat="pooled", value=value))
    return records


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
