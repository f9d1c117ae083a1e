"""The names of the collapse metrics, in the order they appear in tables, and which of them need edges or are
also measured over all rows of a batch together ("pooled")."""

from __future__ import annotations

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


def spectrum_metric_name(index: int) -> str:
    """The metric name of normalized singular value ``index``: ``sv_000``, ``sv_001``, ..."""
    return f"sv_{index:03d}"
