"""The collapse metrics of layers as tidy records ``{rows, metric, stat, value}``: :func:`collapse_records` for one
representation, :func:`collapse_records_layers` for many over the same rows (layers of a width measured stacked), and
:func:`collapse_metrics` / :func:`records_to_flat_dict` for a flat dict. Token rows are one set across graphs; node
rows are one graph ("value") or, with a batch, each graph ("mean", "std") and all graphs together ("pooled")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from graphnorm.analysis.collapse.measure import _LayerPart, _measure_one_graph
from graphnorm.analysis.collapse.metric_names import EDGE_METRICS, PER_GRAPH_METRICS, POOLED_METRICS
from graphnorm.analysis.collapse.per_graph import _edge_metrics_of_stack, _mean_std, _per_graph_metrics_of_stack
from graphnorm.analysis.collapse.rows import _check_layer, _row_structure, _RowStructure
from graphnorm.analysis.collapse.sets import _set_metrics, _set_summaries_of_stack, _SetSummary
from graphnorm.analysis.collapse.staging import PRECISIONS, _layer_stacks
from graphnorm.checks import check_choice
from graphnorm.threads import single_thread


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
        rows = _row_structure(n, edge_index, batch, token_mask)
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


def records_to_flat_dict(records: list[dict]) -> dict[str, float]:
    """Flatten records to ``{key: value}``: key = metric, + "_std" / "_pooled" for those stats ("value" and
    "mean" keep the bare name), prefixed "token_" for token rows."""
    flat: dict[str, float] = {}
    for record in records:
        key = record["metric"] if record["stat"] in ("value", "mean") else f"{record['metric']}_{record['stat']}"
        flat[("token_" if record["rows"] == "token" else "") + key] = record["value"]
    return flat


def _records_of_width(
    xs: Sequence[Tensor], rows: _RowStructure, num_singular_values: int, cone_tol_deg: float, precision: str
) -> list[list[dict]]:
    """Records of layers that share a width: token rows, then node rows."""
    records: list[list[dict]] = [[] for _ in xs]
    if rows.token_rows is not None:
        num_tokens = rows.token_rows.numel()
        summaries = [
            summary
            for stack in _layer_stacks(xs, rows.token_rows, num_tokens, 0, precision)
            for summary in _set_summaries_of_stack(stack, cone_tol_deg)
        ]
        for layer, values in enumerate(_set_metrics(summaries, num_singular_values)):
            records[layer] += _records_of_set(values, "token", "value")
        if rows.num_node_rows == 0:
            return records
    node = (_records_of_one_graph if rows.batch is None else _records_of_batch)(
        xs, rows, num_singular_values, cone_tol_deg, precision
    )
    return [tokens + nodes for tokens, nodes in zip(records, node)]


def _records_of_one_graph(
    xs: Sequence[Tensor], rows: _RowStructure, num_singular_values: int, cone_tol_deg: float, precision: str
) -> list:
    """Node-row records of every layer when the rows form one graph (stat "value"), in stacked chunks of layers."""
    parts = []
    for stack in _layer_stacks(xs, rows.node_rows, rows.num_node_rows, rows.num_edges, precision):
        parts += _measure_one_graph(stack, rows, cone_tol_deg)
    return _records_of_parts(parts, num_singular_values)


def _records_of_batch(
    xs: Sequence[Tensor], rows: _RowStructure, num_singular_values: int, cone_tol_deg: float, precision: str
) -> list:
    """Node-row records of every layer of a batch: per-graph mean / std (stacked passes over chunks of layers of
    bounded memory) and the pooled set metrics."""
    summaries: list[_SetSummary] = []
    parts: list[dict[str, Tensor]] = []
    for stack in _layer_stacks(xs, rows.node_rows, rows.num_node_rows, rows.num_edges, precision):
        summaries += _set_summaries_of_stack(stack, cone_tol_deg)
        part = _per_graph_metrics_of_stack(stack, rows, cone_tol_deg)
        if rows.edge_source is not None:
            part.update({name: torch.from_numpy(v) for name, v in _edge_metrics_of_stack(stack, rows).items()})
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


def _records_of_parts(parts: list[_LayerPart], num_singular_values: int) -> list[list[dict]]:
    """Node-row records (stat "value") of layers of one width from their :func:`_measure_one_graph`."""
    records = []
    for (_, edges), values in zip(parts, _set_metrics([summary for summary, _ in parts], num_singular_values)):
        if edges is not None:
            values.update({name: float(edges[name][0]) for name in EDGE_METRICS})
        ordered = [name for name in PER_GRAPH_METRICS if name in values] + [k for k in values if k.startswith("sv_")]
        records.append([dict(rows="node", metric=k, stat="value", value=values[k]) for k in ordered])
    return records


def _records_of_set(values: dict[str, float], rows_kind: str, stat: str) -> list[dict]:
    """Tidy records of one row set's ``{metric: value}``."""
    return [dict(rows=rows_kind, metric=k, stat=stat, value=v) for k, v in values.items()]
