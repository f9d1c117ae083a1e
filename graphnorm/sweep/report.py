"""Figures and a markdown summary from a sweep's output directory (runs.csv, layers.csv, epochs.csv, steps.csv).

:func:`make_report` writes the figures into ``<sweep>/report``: the sweep's metric against depth
(:func:`plot_main_metric_vs_depth`), learning curves (:func:`plot_learning_curves`), collapse metrics against layer
for node rows and graph-token rows (:func:`plot_metric_vs_layer`), singular-value spectra (:func:`plot_spectra`) and
collapse over training steps (:func:`plot_collapse_over_steps`); it adds them and the collapse tables
(:func:`summary_markdown`) to the sweep's one ``summary.md``. Lines and table rows are labels: the norm, plus any
other config key that varies in the sweep, so distinct variants never share a line. ``split`` (a dataset's standard
splits) is a repetition like ``seed``: "over seeds" means over every seed x split run of a label. With several
datasets in one sweep every figure is made per dataset.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

# No matplotlib.use() here: that would break inline figures in notebooks. Headless runs fall back to Agg by
# themselves and analysis/plot_sweep.py selects Agg explicitly.
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from graphnorm.escaping import markdown_text
from graphnorm.files import check_output_dir, check_output_path, save_figure
from graphnorm.sweep.tables import (
    DEFAULT_METRICS,
    MAJORITY_MARGIN,
    format_mean_std,
    majority_level,
    markdown_table,
    reference_levels,
    write_summary,
)

__all__ = [
    "load_sweep",
    "sweep_metric",
    "main_metric",
    "last_layer_description",
    "layer_table",
    "plot_metric_vs_layer",
    "plot_main_metric_vs_depth",
    "plot_spectra",
    "plot_learning_curves",
    "plot_collapse_over_steps",
    "load_steps",
    "summary_markdown",
    "make_report",
    "DEFAULT_LAYER_METRICS",
]

DEFAULT_LAYER_METRICS = (
    "effective_rank",
    "stable_rank",
    "mean_cosine",
    "cone_angle_q90",
    "mad_neighbors",
    "dirichlet_energy_normalized",
)
# Old sweeps (before the robust cone) have only the exact one: the figures fall back to it.
FALLBACK_METRICS = {"cone_angle_q90": "cone_angle"}
METRIC_LABELS = {
    "cone_angle_q90": "robust cone angle (deg)\n90 % of rows",
    "cone_angle": "exact cone angle (deg)",
}
TABLE_METRICS = ("effective_rank", "cone_angle", "cone_angle_q90")
DIGITS = 3  # significant digits of the summary's numbers, as on the results page
LOG_SCALE_METRICS = {"dirichlet_energy", "dirichlet_energy_normalized", "stable_rank"}
# Config columns that never define a variant (they are the axes or the repetition).
_NON_VARIANT = {"num_layers", "seed", "split", "dataset", "data_root", "run_id", "status", "epochs"}


def load_epochs(run_dir: str | Path) -> pd.DataFrame:
    """The sweep's learning curves (``epochs.csv``: run_id, epoch, train_loss, val/test metric, ...); empty when
    the sweep has none."""
    path = Path(run_dir) / "epochs.csv"
    return pd.read_csv(path) if path.exists() and path.stat().st_size > 0 else pd.DataFrame()


def load_steps(run_dir: str | Path) -> pd.DataFrame:
    """The sweep's collapse over training steps (``steps.csv``: run_id, step, epoch, layer, rows, metric, stat,
    value, ...); empty when the sweep has none."""
    path = Path(run_dir) / "steps.csv"
    return pd.read_csv(path) if path.exists() and path.stat().st_size > 0 else pd.DataFrame()


def load_sweep(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, layers) of a sweep directory; layers is empty when the sweep has no layers.csv."""
    run_dir = Path(run_dir)
    runs_path = run_dir / "runs.csv"
    if not runs_path.exists():
        raise FileNotFoundError(f"{runs_path} not found: expected a sweep output directory with runs.csv")
    runs = pd.read_csv(runs_path)
    for column in ("run_id", "norm", "num_layers"):
        if column not in runs.columns:
            raise ValueError(f"{runs_path} has no column {column!r} (columns: {', '.join(runs.columns)})")
    if "status" in runs.columns:
        runs = runs[runs["status"] == "ok"]
    layers_path = run_dir / "layers.csv"
    layers = pd.read_csv(layers_path) if layers_path.exists() and layers_path.stat().st_size > 0 else pd.DataFrame()
    return runs.reset_index(drop=True), layers


def sweep_metric(run_dir: str | Path) -> str | None:
    """The sweep's own ``metric`` (top-level key of its YAML, saved as ``sweep.yaml`` in its folder), or None."""
    metric = _sweep_config(run_dir).get("metric")
    return str(metric) if metric else None


def _sweep_config(run_dir: str | Path) -> dict:
    """The sweep's YAML as saved in its folder (``sweep.yaml``), named after the folder when it names nothing; a
    folder without one (runs.csv from elsewhere) is a sweep of that name with no grid."""
    path = Path(run_dir) / "sweep.yaml"
    config = {}
    if path.exists():
        import yaml

        loaded = yaml.safe_load(path.read_text())
        config = loaded if isinstance(loaded, dict) else {}
    return {**config, "name": config.get("name") or Path(run_dir).resolve().name}


def main_metric(runs: pd.DataFrame, metric: str | None = None) -> str:
    """``metric`` (the sweep's own, e.g. test_acc_last) when given, else the task metric present in ``runs``:
    test_acc, test_rocauc or test_mae (first found). ``ValueError`` when ``metric`` has no values in ``runs``."""
    if metric is not None:
        if metric not in runs.columns or not runs[metric].notna().any():
            raise ValueError(f"the sweep's metric {metric!r} has no values in runs.csv (columns: {list(runs.columns)})")
        return metric
    for name in DEFAULT_METRICS:
        if name in runs.columns and runs[name].notna().any():
            return name
    raise ValueError(f"runs has none of the task metrics {DEFAULT_METRICS} (columns: {', '.join(runs.columns)})")


def _variant_columns(runs: pd.DataFrame) -> list[str]:
    """``norm`` and the config keys that vary within a norm: the columns a label is made of."""
    from graphnorm.config import RunConfig

    candidates = [c for c in RunConfig.field_names() if c in runs.columns and c not in _NON_VARIANT and c != "norm"]
    # Only keys that vary *within* a norm tell its lines apart; per-norm settings (norm_settings) follow the norm.
    as_text = runs[candidates].astype(str).assign(norm=runs["norm"].astype(str))
    varying = [c for c in candidates if (as_text.groupby("norm")[c].nunique() > 1).any()]
    return ["norm", *varying]


def _with_label(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with a ``label`` column: the norm, then ``(key=value, ...)`` of the other keys that vary within it."""
    columns = _variant_columns(runs)
    runs = runs.copy()
    if len(columns) == 1:
        runs["label"] = runs["norm"].astype(str)
    else:
        runs["label"] = (
            runs[columns]
            .astype(str)
            .apply(lambda row: row["norm"] + " (" + ", ".join(f"{c}={row[c]}" for c in columns[1:]) + ")", axis=1)
        )
    return runs


def layer_table(runs: pd.DataFrame, layers: pd.DataFrame, rows: str = "node") -> pd.DataFrame:
    """Layer metrics of one kind of rows (``"node"``, or ``"token"``: the graph-token rows) joined with the runs'
    label / depth / seed / dataset: one value per (run, layer, metric); the per-graph "value" (one graph) or "mean"
    (over graphs) statistic, the first split if several."""
    columns = ["run_id", "layer", "metric", "value", "label", "num_layers", "seed", "dataset"]
    if layers.empty:
        return pd.DataFrame(columns=columns)
    table = layers
    if "rows" in table.columns:
        table = table[table["rows"] == rows]
    elif rows != "node":  # layers.csv without a rows column holds node rows only
        return pd.DataFrame(columns=columns)
    if "stat" in table.columns:
        table = table[table["stat"].isin(["value", "mean"]) | table["stat"].isna()]
    if "split" in table.columns and table["split"].notna().any():
        table = table[table["split"] == sorted(table["split"].dropna().unique())[0]]
    labelled = _with_label(runs)
    keep = ["run_id", "label", "num_layers", "seed"] + (["dataset"] if "dataset" in labelled.columns else [])
    table = table.merge(labelled[keep], on="run_id", how="inner")
    if "dataset" not in table.columns:
        table["dataset"] = "data"
    return table


def _datasets(frame: pd.DataFrame) -> list[str]:
    """The datasets of ``frame`` in sorted order (``["data"]`` without a dataset column)."""
    return sorted(frame["dataset"].astype(str).unique()) if "dataset" in frame.columns else ["data"]


def _save(figure: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
    """``figure`` as ``<stem>.png`` and ``<stem>.pdf`` in ``out_dir`` (then closed); the written paths."""
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"]
    for path in paths:
        save_figure(figure, path, "the report's figure", dpi=120, bbox_inches="tight")
    plt.close(figure)
    return paths


def _grid_of_curves(
    long: pd.DataFrame, row_key: str, rows: Sequence[str], x: str, title: str, log_rows: frozenset[str] = frozenset()
) -> plt.Figure:
    """Panels: one row per value of ``long[row_key]`` in ``rows``, one column per depth (``num_layers``); in each,
    ``value`` against ``x``, one line per ``label`` with its mean ± std over the runs (seeds) as a band."""
    depths = sorted(long["num_layers"].unique())
    labels = sorted(long["label"].unique())
    colors = {label: plt.cm.tab10(i % 10) for i, label in enumerate(labels)}
    figure, axes = plt.subplots(
        len(rows), len(depths), figsize=(3.4 * len(depths), 2.4 * len(rows)), squeeze=False, sharex="col"
    )
    for row, name in enumerate(rows):
        for column, depth in enumerate(depths):
            axis = axes[row][column]
            subset = long[(long[row_key] == name) & (long["num_layers"] == depth)]
            for label in labels:
                curve = subset[subset["label"] == label].groupby(x)["value"].agg(["mean", "std"]).sort_index()
                if curve.empty:
                    continue
                axis.plot(curve.index, curve["mean"], color=colors[label], label=label, lw=1.3)
                if curve["std"].notna().any():
                    low, high = curve["mean"] - curve["std"].fillna(0), curve["mean"] + curve["std"].fillna(0)
                    axis.fill_between(curve.index, low, high, color=colors[label], alpha=0.2, lw=0)
            if name in log_rows and (subset["value"] > 0).any():
                axis.set_yscale("log")
            if row == 0:
                axis.set_title(f"{depth} layers")
            if row == len(rows) - 1:
                axis.set_xlabel(x)
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers and steps are whole numbers
            if column == 0:
                axis.set_ylabel(METRIC_LABELS.get(name, name.replace("_", " ")))
            axis.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, names, loc="upper center", ncol=min(len(names), 5), bbox_to_anchor=(0.5, 1.02))
    figure.suptitle(title, y=1.06)
    figure.tight_layout()
    return figure


def plot_metric_vs_layer(
    table: pd.DataFrame,
    metrics: tuple[str, ...] = DEFAULT_LAYER_METRICS,
    dataset: str | None = None,
    title: str = "collapse metrics by layer",
) -> plt.Figure:
    """Grid: one row per metric, one column per depth; x = layer, one line per label (mean ± std over seeds).

    Cones: the robust ``cone_angle_q90`` (the smallest cone of the 90 % of the rows closest to their mean direction,
    :func:`graphnorm.analysis.cone.robust_cone_angle`) is drawn when the probe recorded it, else the exact
    ``cone_angle`` (:data:`FALLBACK_METRICS`)."""
    if dataset is not None:
        table = table[table["dataset"].astype(str) == dataset]
    present = set(table["metric"])
    metrics = tuple(m if m in present else FALLBACK_METRICS.get(m, m) for m in metrics)
    metrics = tuple(dict.fromkeys(m for m in metrics if m in present))
    if not metrics:
        raise ValueError("no layer metrics to plot (layers.csv empty or without the requested metrics)")
    full_title = f"{title}{f' ({dataset})' if dataset else ''}"
    return _grid_of_curves(table, "metric", metrics, "layer", full_title, frozenset(LOG_SCALE_METRICS))


def plot_main_metric_vs_depth(runs: pd.DataFrame, metric: str | None = None, dataset: str | None = None) -> plt.Figure:
    """The sweep's metric against depth (log2 axis), one line per label, error bars = std over seeds; a dashed
    reference line at the majority-class level when the runs recorded ``majority_acc`` and the metric is an
    accuracy, and a dotted one at the ``reference_accuracy`` the runs recorded (e.g. ``csbm`` graphs). A sweep whose
    grid varies the dataset's options gets one panel per setting, titled by the options that vary."""
    if dataset is not None and "dataset" in runs.columns:
        runs = runs[runs["dataset"].astype(str) == dataset]
    metric = main_metric(runs, metric)
    panels = _dataset_option_panels(runs)
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(
        rows,
        columns,
        figsize=(5.5 if columns == 1 else 4.2 * columns, 3.8 * rows),
        squeeze=False,
        sharey=len(panels) > 1,
    )
    for axis, (title, group) in zip(axes.flat, panels):
        _draw_depth_panel(axis, _with_label(group), metric)
        axis.set_title(
            title or f"{metric} vs depth{f' ({dataset})' if dataset else ''}: mean ± std over seeds",
            fontsize=9 if title else None,
        )
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    if len(panels) > 1:
        figure.suptitle(f"{metric} vs depth{f' ({dataset})' if dataset else ''}: mean ± std over seeds")
    figure.tight_layout()
    return figure


def _dataset_option_panels(runs: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(title, runs) per distinct ``dataset_kwargs`` when the sweep varies them, titled ``key=value`` by the options
    that differ between panels; else one untitled panel of every run."""
    if "dataset_kwargs" not in runs.columns or runs["dataset_kwargs"].astype(str).nunique() < 2:
        return [("", runs)]
    options = runs["dataset_kwargs"].astype(str).map(_parse_options)
    keys = sorted({key for option in options for key in option})
    varying = [key for key in keys if len({str(option.get(key)) for option in options}) > 1]
    panels = []
    for text, group in runs.groupby(runs["dataset_kwargs"].astype(str), sort=False):
        option = _parse_options(text)
        panels.append((", ".join(f"{key}={option.get(key)}" for key in varying), group))
    return sorted(panels, key=lambda panel: panel[0])


def _parse_options(text: str) -> dict:
    """A run table's ``dataset_kwargs`` cell (JSON text, as written by the sweep) as a dict."""
    try:
        value = json.loads(text)
    except ValueError:
        return {"dataset_kwargs": text}
    return value if isinstance(value, dict) else {"dataset_kwargs": text}


def _draw_depth_panel(axis: plt.Axes, runs: pd.DataFrame, metric: str) -> None:
    """One panel of :func:`plot_main_metric_vs_depth`: a line per label and the reference levels."""
    for label, group in runs.groupby("label"):
        stats = group.groupby("num_layers")[metric].agg(["mean", "std", "count"]).sort_index()
        axis.errorbar(stats.index, stats["mean"], yerr=stats["std"].fillna(0), marker="o", capsize=3, label=label)
    majority = majority_level(runs, metric)
    if majority is not None:
        axis.axhline(majority, color="0.3", ls="--", lw=1.2, label=f"majority class ({majority:.3f})")
    for reference in reference_levels(runs, metric):
        axis.axhline(reference, color="0.1", ls=":", lw=1.4, label=f"Bayes from own features ({reference:.3f})")
    axis.set_xscale("log", base=2)
    depths = sorted(runs["num_layers"].unique())
    axis.set_xticks(depths, labels=[str(depth) for depth in depths], minor=False)  # the depths run, whole numbers
    axis.xaxis.set_minor_locator(plt.NullLocator())
    axis.set_xlabel("depth (number of layers)")
    axis.set_ylabel(metric.replace("_", " "))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)


def plot_spectra(table: pd.DataFrame, dataset: str | None = None, depth: int | None = None) -> plt.Figure:
    """Normalized singular values (sigma_k / sigma_1) at the first, middle and last layer of the deepest model
    (or ``depth``), one line per label, mean over seeds, log y."""
    if dataset is not None:
        table = table[table["dataset"].astype(str) == dataset]
    spectra = table[table["metric"].astype(str).str.match(r"sv_\d+$")]
    if spectra.empty:
        raise ValueError("no singular-value metrics (sv_000...) in layers.csv: probe with num_singular_values > 0")
    depth = depth or int(spectra["num_layers"].max())
    spectra = spectra[spectra["num_layers"] == depth].copy()
    spectra["index"] = spectra["metric"].str[3:].astype(int) + 1
    layers = sorted(spectra["layer"].unique())
    chosen = sorted({layers[0], layers[len(layers) // 2], layers[-1]})
    figure, axes = plt.subplots(1, len(chosen), figsize=(3.6 * len(chosen), 3.2), squeeze=False, sharey=True)
    for axis, layer in zip(axes[0], chosen):
        subset = spectra[spectra["layer"] == layer]
        for label, group in subset.groupby("label"):
            curve = group.groupby("index")["value"].mean().sort_index()
            axis.plot(curve.index, curve.clip(lower=1e-16), marker=".", label=label)
        axis.set_yscale("log")
        axis.set_title(f"layer {layer} of {depth}")
        axis.set_xlabel("singular value index k")
        axis.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel(r"$\sigma_k / \sigma_1$")
    axes[0][-1].legend(fontsize=8)
    figure.tight_layout()
    return figure


def plot_learning_curves(epochs: pd.DataFrame, runs: pd.DataFrame, dataset: str | None = None) -> plt.Figure:
    """Grid: train loss, then the validation and test metrics (rows) against epoch, one column per depth, one line
    per label (mean ± std over seeds). ``epochs``: one row per (run_id, epoch), as ``epochs.csv``."""
    labelled = _with_label(runs)
    keep = ["run_id", "label", "num_layers"] + (["dataset"] if "dataset" in labelled.columns else [])
    table = epochs.merge(labelled[keep], on="run_id", how="inner")
    if dataset is not None and "dataset" in table.columns:
        table = table[table["dataset"].astype(str) == dataset]
    quantities = [q for q in ("train_loss", *DEFAULT_METRICS) if q in table.columns and table[q].notna().any()]
    quantities[1:1] = [q.replace("test_", "val_") for q in quantities[1:] if q.replace("test_", "val_") in table]
    if table.empty or not quantities:
        raise ValueError("no learning curves to plot (epochs.csv empty or without train_loss / task metrics)")
    long = table.melt(id_vars=["run_id", "epoch", "label", "num_layers"], value_vars=quantities, var_name="quantity")
    return _grid_of_curves(
        long, "quantity", quantities, "epoch", f"learning curves{f' ({dataset})' if dataset else ''}"
    )


STEP_FIGURE_METRICS = ("mean_cosine", "effective_rank")


def plot_collapse_over_steps(
    steps: pd.DataFrame,
    runs: pd.DataFrame,
    metrics: Sequence[str] = STEP_FIGURE_METRICS,
    rows: Sequence[str] = ("node", "token"),
    dataset: str | None = None,
) -> plt.Figure:
    """Collapse over training: one panel row per (rows, metric) recorded, one column per label (norm arm); in each,
    the metric against the optimizer step, one line per layer (mean over the label's seeds). ``steps``: tidy rows as
    ``steps.csv`` (run_id, step, layer, rows, metric, stat, value); ``runs``: the runs table (labels)."""
    tables = {kind: layer_table(runs, steps, rows=kind) for kind in rows}
    if dataset is not None:
        tables = {kind: table[table["dataset"].astype(str) == dataset] for kind, table in tables.items()}
    panels = [(kind, m) for kind in rows for m in metrics if (tables[kind]["metric"] == m).any()]
    if not panels:
        raise ValueError(f"no collapse-over-steps rows to plot (steps.csv empty or without {', '.join(metrics)})")
    labels = sorted(set().union(*(set(tables[kind]["label"]) for kind, _ in panels)))
    figure, axes = plt.subplots(
        len(panels),
        len(labels),
        figsize=(3.6 * len(labels), 2.5 * len(panels)),
        squeeze=False,
        sharex=True,
        sharey="row",
    )
    for row, (kind, metric) in enumerate(panels):
        table = tables[kind][tables[kind]["metric"] == metric]
        for column, label in enumerate(labels):
            _step_panel(axes[row][column], table[table["label"] == label])
            axes[0][column].set_title(label)
        axes[row][0].set_ylabel(f"{kind} rows:\n{metric.replace('_', ' ')}")
    for axis in axes[-1]:
        axis.set_xlabel("optimizer step")
    axes[0][-1].legend(fontsize=7, loc="best")
    figure.suptitle(f"collapse over training steps{f' ({dataset})' if dataset else ''}", y=1.01)
    figure.tight_layout()
    return figure


def _step_panel(axis: plt.Axes, table: pd.DataFrame) -> None:
    """One line per layer of ``table`` (one metric, one label): its value against the step, mean over seeds."""
    layers = sorted(table["layer"].unique())
    for index, layer in enumerate(layers):
        curve = table[table["layer"] == layer].groupby("step")["value"].mean().sort_index()
        name = table.loc[table["layer"] == layer, "layer_name"].iloc[0] if "layer_name" in table else layer
        color = plt.cm.viridis(index / max(len(layers) - 1, 1))
        axis.plot(curve.index, curve.values, color=color, lw=1.3, marker=".", ms=3, label=f"{layer}: {name}")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)


def _mean_std_table(frame: pd.DataFrame, keys: list[str], column: str, digits: int) -> tuple[pd.DataFrame, str]:
    """``frame[column]`` as mean ± std cells (:func:`format_mean_std`, ``digits`` significant digits), ``keys[:-1]``
    x ``keys[-1]``, and the usual count of runs per cell: stated once in the table's title, in a cell only where it
    differs."""
    stats = frame.groupby(keys)[column].agg(["mean", "std", "count"])
    usual = int(stats["count"][stats["count"] > 0].mode().max()) if (stats["count"] > 0).any() else 0
    cells = [format_mean_std(*stat, digits=digits, usual=usual) for stat in stats.itertuples(index=False)]
    return pd.Series(cells, index=stats.index, dtype=object).unstack(keys[-1]), str(usual)


def last_layer_description(runs: pd.DataFrame) -> str:
    """What the last probed layer is for the models in ``runs`` (the probe's layers: see each model's
    ``collapse_layers``)."""
    models = sorted(runs["model"].dropna().astype(str).unique()) if "model" in runs.columns else []
    # Node-level records carry num_eval_nodes (readout has a default even there, so it cannot tell).
    if "num_eval_nodes" in runs.columns:
        node_level = bool(runs["num_eval_nodes"].notna().all())
    else:
        node_level = "readout" not in runs.columns or runs["readout"].isna().all()
    level = "node" if node_level else "graph"
    meanings = {model: _last_layer_of(model, level) for model in models}
    known = [f"{model}: {meanings[model]}" for model in models if meanings[model]]
    return "; ".join(known) if known and len(known) == len(models) else "the last layer the probe watched"


def _last_layer_of(model: str, level: str) -> str | None:
    """What the probe's last layer of a registered ``model`` is at ``level`` (its registration says), else None."""
    from graphnorm.models import available_models, model_spec

    return model_spec(model).last_layer.get(level) if model in available_models() else None


def _last_layer(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of each run's last probed layer (a GCN's layer ``num_layers``; a Graphormer's probe counts the
    embedding as layer 1, so its last encoder layer is ``num_layers + 1``)."""
    return table[table["layer"] == table.groupby("run_id")["layer"].transform("max")]


def _collapse_tables(
    table: pd.DataFrame, column: str, title: str, digits: int = DIGITS, runs: pd.DataFrame | None = None
) -> list[str]:
    """Markdown label x ``column`` tables (mean ± std over seeds) of the headline collapse metrics; ``{metric}`` in
    ``title`` is the metric's name (the rest of the title is shown as written: it holds dataset and model names).
    ``digits``: as :func:`_mean_std_table` (the seed count in the title, named after what ``runs`` repeat: seeds, or
    seeds x splits)."""
    parts = []
    for collapse_metric in TABLE_METRICS:
        metric_rows = table[table["metric"] == collapse_metric]
        if metric_rows.empty:
            continue
        pivot, usual = _mean_std_table(metric_rows, ["label", column], "value", digits)
        pivot.index.name = "norm \\ " + ("depth" if column == "num_layers" else column)
        count = f" ({_over(usual, table if runs is None else runs)})"
        heading = title.replace("{metric}", collapse_metric) + count
        parts += [f"## {markdown_text(heading)}", "", markdown_table(pivot)]
    return parts


def _runs_named(count: str, runs: pd.DataFrame) -> str:
    """``"3 seeds"``, ``"1 seed"``, or ``"10 seed x split runs"`` when the runs also vary the split."""
    if "split" in runs.columns and runs["split"].nunique() > 1:
        return f"{count} seed x split runs"
    return f"{count} seed{'' if count == '1' else 's'}"


def _over(count: str, runs: pd.DataFrame) -> str:
    """A table title's count: ``"mean ± std over 3 seeds"``, or ``"1 seed"`` (one run per cell: no spread)."""
    return _runs_named(count, runs) if count == "1" else f"mean ± std over {_runs_named(count, runs)}"


def _by_layer_markdown(
    table: pd.DataFrame, dataset: str, rows: str, digits: int = DIGITS, runs: pd.DataFrame | None = None
) -> list[str]:
    """Label x layer tables (mean ± std over seeds) of the headline collapse metrics, one per depth."""
    parts = []
    for depth in sorted(table["num_layers"].unique()):
        title = f"{dataset}: {{metric}} of the {rows} rows by layer ({depth} layers)"
        parts += _collapse_tables(table[table["num_layers"] == depth], "layer", title, digits, runs)
    return parts


def _metric_table(subset: pd.DataFrame, metric: str, digits: int = DIGITS) -> tuple[pd.DataFrame, list[str], str]:
    """label x depth table of ``metric`` (mean ± std over seeds), the note lines under it (the majority-class level
    when recorded, cells at most one point above it (or below) marked with "≤maj"), and the usual count of runs
    per cell (see :func:`_mean_std_table`)."""
    pivot, usual = _mean_std_table(subset, ["label", "num_layers"], metric, digits)
    majority = majority_level(subset, metric)
    notes: list[str] = []
    if majority is not None:
        means = subset.groupby(["label", "num_layers"])[metric].mean().unstack("num_layers")
        marked = means.reindex_like(pivot) <= majority + MAJORITY_MARGIN
        pivot = pivot.where(~marked, pivot.astype(str) + " ≤maj")
        notes = [
            f"majority class (always the most frequent training class): {majority:.3f}; "
            f"≤maj: the mean is at most {MAJORITY_MARGIN:.2f} above it",
            "",
        ]
    pivot.index.name = "norm \\ depth"
    return pivot, notes, usual


def summary_markdown(
    runs: pd.DataFrame,
    layers: pd.DataFrame,
    metric: str | None = None,
    digits: int | None = DIGITS,
    metric_tables: bool = True,
) -> str:
    """Markdown: per dataset, the sweep's metric (``metric``, else the task metric found; with the majority-class
    level when recorded, cells within one point of it or below marked) and the last probed layer's collapse metrics
    as label x depth tables, each naming the layer (:func:`last_layer_description`; the exact ``cone_angle`` and,
    when recorded, the robust one beside it); when the probe recorded graph-token rows, node and token metrics layer
    by layer as label x layer tables (one per depth).

    Cells as :func:`graphnorm.sweep.formatting.format_mean_std` writes them: ``digits`` significant digits (None: the
    default, :data:`DIGITS`), the seed count once in each table's title (in a cell only where it differs).
    ``metric_tables`` False: the collapse tables only (the sweep's ``summary.md`` has its own table of the metric)."""
    digits = DIGITS if digits is None else digits
    labelled = _with_label(runs)
    if "dataset" not in labelled.columns:
        labelled["dataset"] = "data"
    table = layer_table(runs, layers)
    token_table = layer_table(runs, layers, rows="token")
    parts = ["# Sweep summary", ""]
    for dataset in _datasets(labelled):
        subset = labelled[labelled["dataset"].astype(str) == dataset]
        try:
            shown = main_metric(subset, metric)
        except ValueError:
            continue
        if metric_tables:
            pivot, notes, usual = _metric_table(subset, shown, digits)
            over = _over(usual, subset)
            parts += [f"## {markdown_text(f'{dataset}: {shown} ({over})')}", "", markdown_table(pivot), *notes]
        last = _last_layer(table[table["dataset"].astype(str) == dataset])
        where = f"at the last probed layer ({last_layer_description(subset)})"
        parts += _collapse_tables(last, "num_layers", f"{dataset}: {{metric}} {where}", digits, subset)
        tokens = token_table[token_table["dataset"].astype(str) == dataset]
        if not tokens.empty:
            parts += _by_layer_markdown(table[table["dataset"].astype(str) == dataset], dataset, "node", digits, subset)
            parts += _by_layer_markdown(tokens, dataset, "graph-token", digits, subset)
    return "\n".join(parts)


def make_report(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write every figure (PNG and PDF) into ``out_dir`` (default ``run_dir/report``) and the sweep's one
    ``summary.md`` with them; returns the written paths. Figures whose data are absent are skipped.

    The figures: ``main_metric_vs_depth``, ``learning_curves``, ``collapse_over_steps``, ``metric_vs_layer``,
    ``spectra`` and ``token_metric_vs_layer`` (graph-token rows: Graphormer's graph token, a GCN's virtual node), each
    with a ``_<dataset>`` suffix when the sweep has several datasets. ``summary.md`` is the sweep's own
    (:func:`graphnorm.sweep.tables.write_summary`: its metric by norm x depth) with the figures and the collapse
    tables (:func:`summary_markdown`) added; it is written beside ``runs.csv``, or into ``out_dir`` when one is given
    (a report kept elsewhere leaves the sweep's folder as it is). ``ValueError`` without successful runs."""
    runs, layers = load_sweep(run_dir)
    metric = sweep_metric(run_dir)
    if out_dir is not None:  # the user's folder may be a link; the sweep's own report/ may not
        out = check_output_dir(out_dir, "the report folder")
    else:
        out = check_output_dir(Path(run_dir) / "report", "the sweep's report folder", links=False)
    if runs.empty:
        raise ValueError(f"{run_dir}: no successful runs in runs.csv")
    home = Path(run_dir) if out_dir is None else out
    check_output_path(home / "summary.md", "the sweep's summary")  # before the figures take their time
    written = _figures(run_dir, runs, layers, metric, out)
    figures = [path for path in written if path.suffix == ".png"]
    links = [f"![{markdown_text(path.stem)}]({Path(os.path.relpath(path, home)).as_posix()})" for path in figures]
    tables = summary_markdown(runs, layers, metric, metric_tables=False).split("\n", 1)[1].strip()  # not its title
    sections = (["## Figures\n\n" + "\n\n".join(links)] if links else []) + ([tables] if tables else [])
    every_run = pd.read_csv(Path(run_dir) / "runs.csv")  # failed runs too: the summary's title counts them
    summary = write_summary(_sweep_config(run_dir), every_run, home, log=lambda _: None, sections=sections)
    return written + ([summary] if summary is not None else [])


def _figures(
    run_dir: str | Path, runs: pd.DataFrame, layers: pd.DataFrame, metric: str | None, out: Path
) -> list[Path]:
    """Every figure of :func:`make_report` whose data are present, saved into ``out``; the written paths."""
    written: list[Path] = []
    table = layer_table(runs, layers)
    token_table = layer_table(runs, layers, rows="token")
    epochs = load_epochs(run_dir)
    steps = load_steps(run_dir)
    datasets = _datasets(runs)
    for dataset in datasets:
        suffix = f"_{dataset}" if len(datasets) > 1 else ""
        name = dataset if "dataset" in runs.columns else None
        with contextlib.suppress(ValueError):  # raised when this dataset's runs have no task metric
            figure = plot_main_metric_vs_depth(runs, metric=metric, dataset=name)
            written += _save(figure, out, f"main_metric_vs_depth{suffix}")
        if not epochs.empty:
            with contextlib.suppress(ValueError):  # no curves for this dataset's runs
                written += _save(plot_learning_curves(epochs, runs, dataset=name), out, f"learning_curves{suffix}")
        if not steps.empty:
            with contextlib.suppress(ValueError):  # no step rows for this dataset's runs
                figure = plot_collapse_over_steps(steps, runs, dataset=name)
                written += _save(figure, out, f"collapse_over_steps{suffix}")
        if table.empty:
            continue
        if np.isin([*DEFAULT_LAYER_METRICS, *FALLBACK_METRICS.values()], table["metric"].unique()).any():
            written += _save(plot_metric_vs_layer(table, dataset=name), out, f"metric_vs_layer{suffix}")
        if table["metric"].astype(str).str.match(r"sv_\d+$").any():
            written += _save(plot_spectra(table, dataset=name), out, f"spectra{suffix}")
        tokens = token_table if name is None else token_table[token_table["dataset"].astype(str) == name]
        if np.isin([*DEFAULT_LAYER_METRICS, *FALLBACK_METRICS.values()], tokens["metric"].unique()).any():
            figure = plot_metric_vs_layer(token_table, dataset=name, title="graph-token rows")
            written += _save(figure, out, f"token_metric_vs_layer{suffix}")
    return written
