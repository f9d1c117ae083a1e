"""A sweep's tables and summary, regenerated from its results files and written atomically (a reader sees the old
file or the new one, never a partial one): ``runs.csv`` (one row per run: config and record), ``layers.csv`` (the
probe's per-layer metrics), ``epochs.csv`` (learning curves), ``steps.csv`` (collapse over training steps, runs with
``probe_every_steps``), and the summary table (metric by norm x depth, mean ± std over the replicate keys) in
``summary.md``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from graphnorm.config import RunConfig, config_run_id
from graphnorm.data.scoring import metric_names
from graphnorm.escaping import csv_safe, markdown_text
from graphnorm.files import atomic_write_text
from graphnorm.sweep.formatting import (  # noqa: F401 (public here too: the one number and table format)
    decimals,
    format_mean_std,
    format_number,
    markdown_table,
    significant,
)
from graphnorm.sweep.grid import grid_keys
from graphnorm.train.record import STEP_COLUMNS, STEPS_KEY

# The summary's metric when neither the sweep nor the records name one: test_<metric> of the first metric present.
DEFAULT_METRICS = tuple(f"test_{name}" for name in metric_names())
# Grid keys that repeat a measurement rather than define a variant: summaries average over them (mean ± std), as
# papers average over seeds and over a dataset's standard splits.
REPLICATE_KEYS = ("seed", "split")
LAYER_COLUMNS = ("run_id", "layer", "layer_name", "rows", "metric", "value")


def atomic_write_csv(path: Path, frame: pd.DataFrame) -> None:
    """``frame`` as CSV (no index) to ``path``, atomically; a text cell a spreadsheet would run as a formula starts
    with ``'`` (:func:`graphnorm.escaping.csv_safe`)."""
    atomic_write_text(path, csv_safe(frame).to_csv(index=False))


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell: nested values (norm_kwargs, lists) become JSON strings, so every cell is a scalar."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list, tuple)) else value


def runs_table(configs: list[RunConfig], results: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per finished run in grid order: run_id, status, config keys, record metrics, elapsed_s, error."""
    fields = RunConfig.field_names()
    reserved = {"run_id", "status", "elapsed_s", "error", *fields}
    rows = []
    metric_columns: dict[str, None] = {}  # ordered set
    for config in configs:
        result = results.get(config_run_id(config))
        if result is None:
            continue
        row: dict[str, Any] = {"run_id": result["run_id"], "status": result["status"]}
        row.update({k: csv_cell(v) for k, v in result["config"].items()})
        for key, value in (result.get("record") or {}).items():
            column = f"record_{key}" if key in reserved else key
            metric_columns[column] = None
            row[column] = csv_cell(value)
        row["elapsed_s"] = result.get("elapsed_s")
        row["error"] = result.get("error")
        rows.append(row)
    columns = ["run_id", "status", *fields, *metric_columns, "elapsed_s", "error"]
    return pd.DataFrame(rows, columns=columns)


def layers_table(configs: list[RunConfig], results: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per (run, layer, metric[, stat, split...]) from the results' ``layers`` lists."""
    return _probe_rows_table(configs, results, "layers", LAYER_COLUMNS)


def steps_table(configs: list[RunConfig], results: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Collapse over training: one row per (run, step, layer, rows, metric, stat[, split]) from the results'
    ``collapse_steps`` lists (:mod:`graphnorm.train.collapse_steps`); empty when no run probed per step."""
    return _probe_rows_table(configs, results, STEPS_KEY, ("run_id", *STEP_COLUMNS))


def _probe_rows_table(
    configs: list[RunConfig], results: dict[str, dict[str, Any]], key: str, columns: tuple[str, ...]
) -> pd.DataFrame:
    """The rows of the results' list ``key``, in grid order, each with its run_id: ``columns`` first, then any
    other key the rows have."""
    rows = []
    extra: dict[str, None] = {}
    for config in configs:
        result = results.get(config_run_id(config))
        if result is None:
            continue
        for row in result.get(key) or []:
            rows.append({"run_id": result["run_id"], **{k: csv_cell(v) for k, v in row.items()}})
            extra.update((k, None) for k in row if k not in columns)
    return pd.DataFrame(rows, columns=[*columns, *extra])


def epochs_table(configs: list[RunConfig], results: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The learning curves: one row per (run, epoch) from the records' ``history`` lists (results written before
    histories were recorded have none)."""
    rows, columns = [], {"run_id": None, "epoch": None}  # ordered set of columns
    for config in configs:
        result = results.get(config_run_id(config))
        if result is None:
            continue
        for epoch_row in result.get("history") or []:
            rows.append({"run_id": result["run_id"], **epoch_row})
            columns.update((key, None) for key in epoch_row)
    return pd.DataFrame(rows, columns=list(columns))


def recorded_metrics(results: dict[str, dict[str, Any]]) -> list[str]:
    """The numeric record keys of the ok runs in ``results``: the metrics a summary can show."""
    names = {
        key
        for result in results.values()
        if result["status"] == "ok"
        for key, value in result["record"].items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    return sorted(names)


def check_metric(metric: str | None, results: dict[str, dict[str, Any]]) -> None:
    """A summary metric chosen by name must be one the finished runs recorded (when there are any yet)."""
    valid = recorded_metrics(results)
    if metric is not None and valid and metric not in valid:
        raise ValueError(f"metric {metric!r} is not in the runs' records; valid: {', '.join(valid)}")


def pick_metric(runs_df: pd.DataFrame, metric: str | None = None) -> str | None:
    """``metric`` if given, else ``test_<record's metric>``, else the first default metric present in ``runs_df``."""
    if metric is not None:
        return metric
    if "metric" in runs_df.columns and runs_df["metric"].notna().any():
        named = f"test_{runs_df['metric'].dropna().iloc[0]}"  # train.run names its task metric (acc, mae, rocauc)
        if named in runs_df.columns:
            return named
    return next((m for m in DEFAULT_METRICS if m in runs_df.columns), None)


def summary_table(
    runs_df: pd.DataFrame,
    metric: str,
    rows: list[str] | tuple[str, ...] = ("norm",),
    columns: str = "num_layers",
    digits: int = 3,
    mark_at_most: float | None = None,
) -> pd.DataFrame:
    """``metric`` as "mean ± std" over the remaining keys (seeds) per ``rows`` x ``columns``; failed runs excluded.

    Rows keep their first-appearance order, columns are sorted. Cells as :func:`format_mean_std` writes them
    (``digits`` significant digits; a cell over one run shows the value alone). Cells whose mean is at most
    ``mark_at_most`` (e.g. one point above the majority-class level) end in " *".
    """
    if metric not in runs_df.columns:
        available = [c for c in runs_df.columns if c not in RunConfig.field_names()]
        raise ValueError(f"metric {metric!r} is not a column of the runs table; available: {available}")
    rows = list(rows)
    missing = [k for k in [*rows, columns] if k not in runs_df.columns]
    if missing:
        raise ValueError(f"summary keys {missing} are not columns of the runs table")
    ok = runs_df if "status" not in runs_df.columns else runs_df[runs_df["status"] == "ok"]
    ok = ok.assign(**{metric: pd.to_numeric(ok[metric], errors="coerce")})
    stats = ok.groupby([*rows, columns], sort=False)[metric].agg(["mean", "std", "count"])

    def fmt(stat: pd.Series) -> str:
        text = format_mean_std(stat["mean"], stat["std"], stat["count"], digits)
        return text + (" *" if text and mark_at_most is not None and stat["mean"] <= mark_at_most else "")

    cells = stats.apply(fmt, axis=1) if len(stats) else pd.Series(dtype=object, index=stats.index)
    table = cells.unstack(columns).fillna("") if len(cells) else pd.DataFrame()
    if len(table):
        row_order = list(dict.fromkeys(stats.index.droplevel(columns)))
        table = table.reindex(row_order)
        table = table.reindex(sorted(table.columns), axis=1)
        table.columns.name = columns
    return table


def write_summary(
    sweep: dict[str, Any],
    runs: pd.DataFrame,
    out: Path,
    log: Callable[[str], None] = print,
    sections: Sequence[str] = (),
) -> Path | None:
    """Print the metric by norm x depth (mean ± std over the ``REPLICATE_KEYS``) and write it to ``out/summary.md``,
    the sweep's one summary, followed by ``sections`` (Markdown: the report adds its figures and collapse tables,
    :func:`graphnorm.sweep.report.make_report`). Returns the path written, None when there was nothing to write."""
    head = _summary_head(sweep, runs, log)
    if head is None and not sections:
        return None
    text = (head or f"# {markdown_text(sweep['name'])}\n") + "".join(f"\n{section.rstrip()}\n" for section in sections)
    atomic_write_text(out / "summary.md", text)
    return out / "summary.md"


def _summary_head(sweep: dict[str, Any], runs: pd.DataFrame, log: Callable[[str], None]) -> str | None:
    """The summary's title, its table of the metric and the note under it (also logged); None, with a logged reason,
    when no finished run recorded the metric."""
    metric = pick_metric(runs, sweep.get("metric"))
    if runs.empty or metric is None or metric not in runs.columns:
        metrics = [
            c for c in runs.columns if c not in {"run_id", "status", "elapsed_s", "error", *RunConfig.field_names()}
        ]
        named = f" (metric {metric!r} is not among the recorded {', '.join(metrics) or 'none'})" if metric else ""
        log(f"no finished runs with a metric to summarize yet{named}")
        return None
    varying = [k for k in grid_keys(sweep) if k not in ("num_layers", *REPLICATE_KEYS)]
    rows = [k for k in ["norm", *varying] if k in runs.columns and (k == "norm" or runs[k].nunique() > 1)]
    rows = list(dict.fromkeys(rows))
    majority, note = majority_note(runs, metric)
    mark = None if majority is None else majority + MAJORITY_MARGIN
    table = summary_table(runs, metric, rows=rows, columns="num_layers", mark_at_most=mark)
    ok = int((runs["status"] == "ok").sum()) if "status" in runs.columns else len(runs)
    over = "seeds x splits" if "split" in grid_keys(sweep) else "seeds"
    title = f"{sweep['name']}: {metric}, mean ± std over {over} ({ok} ok, {len(runs) - ok} failed runs)"
    log(f"\n{title}\n{table.to_string()}\n{note}")
    return f"# {markdown_text(title)}\n\n{markdown_table(table)}" + (f"\n{markdown_text(note)}\n" if note else "")


MAJORITY_MARGIN = 0.01


def majority_note(runs: pd.DataFrame, metric: str) -> tuple[float | None, str]:
    """(level, note) of the majority class under the summary table: one dataset, its level and a note explaining
    the " *" marks; several datasets, their levels in the note and no marks (None); nothing recorded: (None, "")."""
    datasets = sorted(runs["dataset"].dropna().astype(str).unique()) if "dataset" in runs.columns else []
    what = "majority class (always the most frequent training class)"
    if len(datasets) > 1:
        levels = {name: majority_level(runs[runs["dataset"].astype(str) == name], metric) for name in datasets}
        shown = ", ".join(f"{name} {level:.3f}" for name, level in levels.items() if level is not None)
        return None, f"{what}: {shown}\n" if shown else ""
    majority = majority_level(runs, metric)
    if majority is None:
        return None, ""
    return majority, f"{what}: {majority:.3f}; * = at most {MAJORITY_MARGIN:.2f} above it\n"


def reference_levels(runs: pd.DataFrame, metric: str) -> list[float]:
    """The distinct ``reference_accuracy`` values of the ok runs (the best accuracy a classifier reaches from a
    node's own features, in the task's own metric, recorded by datasets that know it, e.g. ``csbm``) for a summary
    ``metric`` of the task's metric (``test_<m>``, ``test_<m>_last``, ...); [] when the runs did not record one or
    the metric is another."""
    if "reference_accuracy" not in runs.columns or "metric" not in runs.columns:
        return []
    task_metrics = set(runs["metric"].dropna().astype(str))
    if not task_metrics & set(metric.split("_")):
        return []
    ok = runs if "status" not in runs.columns else runs[runs["status"] == "ok"]
    values = pd.to_numeric(ok["reference_accuracy"], errors="coerce").dropna()
    return sorted({round(float(value), 4) for value in values})


def majority_level(runs: pd.DataFrame, metric: str) -> float | None:
    """Mean ``majority_<m>`` of the ok runs (the metric ``m`` of always predicting the most frequent training class,
    recorded by classification runs) for a summary ``metric`` of ``m`` (``test_<m>``, ``test_<m>_last``, ...); None
    when the runs did not record it (older sweeps) or the metric is another."""
    parts = metric.split("_")
    column = next((c for c in runs.columns if c.startswith("majority_") and c[len("majority_") :] in parts), None)
    if column is None:
        return None
    ok = runs if "status" not in runs.columns else runs[runs["status"] == "ok"]
    values = pd.to_numeric(ok[column], errors="coerce").dropna()
    return float(values.mean()) if len(values) else None
