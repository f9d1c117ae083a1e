"""All collapse metrics of a representation, per graph in a batch, as tidy records ``{rows, metric, stat, value}``.

:func:`collapse_records` measures one representation and :func:`collapse_metrics` flattens its records to a dict;
:func:`collapse_records_layers` measures many layers over the same rows at once (the probe's path, layers of equal
width stacked) and :class:`LayerStream` does the same one layer at a time. The metrics' definitions are the
one-matrix functions of :mod:`graphnorm.analysis.metrics` and :mod:`graphnorm.analysis.cone`, which the tests hold
this batched path to; :mod:`graphnorm.analysis.probe` feeds it a model's layers.

Modules, from the records down: ``records`` and ``stream`` (the two entry points), ``sets`` and ``per_graph`` (the
metrics of stacked layers), ``measure`` (one graph's layers in one compiled call), ``staging`` and ``loading`` (the
buffers of stacked layers and how a layer gets into them), ``rows`` (rows and edges), ``kernels``, ``metric_names``.
"""

from graphnorm.analysis.collapse.metric_names import METRIC_NAMES, PER_GRAPH_METRICS, POOLED_METRICS
from graphnorm.analysis.collapse.records import (
    collapse_metrics,
    collapse_records,
    collapse_records_layers,
    records_to_flat_dict,
)
from graphnorm.analysis.collapse.staging import PRECISIONS
from graphnorm.analysis.collapse.stream import LayerStream
from graphnorm.analysis.collapse.warm import warm_kernels
from graphnorm.checks import same_values
from graphnorm.threads import single_thread

__all__ = [
    "warm_kernels",
    "LayerStream",
    "collapse_records",
    "collapse_records_layers",
    "collapse_metrics",
    "records_to_flat_dict",
    "METRIC_NAMES",
    "PER_GRAPH_METRICS",
    "POOLED_METRICS",
    "PRECISIONS",
    "same_values",
    "single_thread",
]
