"""Collapse analysis: metrics (each citing its source), the layer-by-layer probe, and sweep figures.

Metrics take a representation ``x`` [n, d] and compute in float64; :func:`collapse_metrics` evaluates them all,
per graph in a batch, with graph-token rows reported separately. :class:`CollapseProbe` records every layer's
output of a model and returns a tidy table; :func:`make_report` turns a sweep's output into figures.
"""

from graphnorm.analysis.collapse import (
    METRIC_NAMES,
    collapse_metrics,
    collapse_records,
    collapse_records_layers,
    records_to_flat_dict,
)
from graphnorm.analysis.cone import ConeAngle, cone_angle, cone_angle_info
from graphnorm.analysis.metrics import (
    dirichlet_energy,
    effective_rank,
    mad,
    mean_cosine_similarity,
    numerical_rank,
    singular_values,
    stable_rank,
)
from graphnorm.analysis.probe import CollapseProbe, evaluation_sample, probe_records

__all__ = [
    "METRIC_NAMES",
    "CollapseProbe",
    "evaluation_sample",
    "probe_records",
    "ConeAngle",
    "collapse_metrics",
    "collapse_records",
    "collapse_records_layers",
    "cone_angle",
    "cone_angle_info",
    "dirichlet_energy",
    "effective_rank",
    "mad",
    "mean_cosine_similarity",
    "numerical_rank",
    "records_to_flat_dict",
    "singular_values",
    "stable_rank",
]
