"""Collapse analysis: metrics (each citing its source) and the layer-by-layer probe.

Metrics take a representation ``x`` [n, d] and compute in float64 (:mod:`~graphnorm.analysis.metrics`,
:mod:`~graphnorm.analysis.cone`); :func:`collapse_metrics` evaluates them all, per graph in a batch, with graph-token
rows reported separately (:mod:`~graphnorm.analysis.collapse`). :class:`CollapseProbe` records every layer's output
of a model and returns a tidy table (:mod:`~graphnorm.analysis.probe`); the sweep's figures are drawn by
:mod:`graphnorm.sweep.report`.
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
    "records_to_flat_dict",
    "singular_values",
    "stable_rank",
]
