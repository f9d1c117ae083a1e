"""The figures of a sweep's report: its metric against depth, collapse metrics against layer (node rows and
graph-token rows), singular-value spectra, learning curves and collapse over training steps. Lines are the labels of
:mod:`graphnorm.sweep.frames`; with several datasets in one sweep every figure is made per dataset.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

# No matplotlib.use() here: that would break inline figures in notebooks. Headless runs fall back to Agg by
# themselves and analysis/plot_sweep.py selects Agg explicitly.
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from graphnorm.files import save_figure
from graphnorm.sweep.frames import layer_table, main_metric, with_label
from graphnorm.sweep.tables import DEFAULT_METRICS, majority_level, reference_levels

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


LOG_SCALE_METRICS = {"dirichlet_energy", "dirichlet_energy_normalized", "stable_rank"}


def save_figure_files(figure: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
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
        _draw_depth_panel(axis, with_label(group), metric)
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
    labelled = with_label(runs)
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
