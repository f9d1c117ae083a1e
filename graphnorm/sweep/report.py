"""A sweep's report: its figures and collapse tables, from its output directory (runs.csv, layers.csv, epochs.csv,
steps.csv).

:func:`make_report` draws the figures of :mod:`graphnorm.sweep.figures` (the sweep's metric against depth, learning
curves, collapse metrics against layer, singular-value spectra, collapse over training steps) into
``<sweep>/report`` and adds them and the collapse tables (:func:`summary_markdown`) to the sweep's one ``summary.md``.
Lines and table rows are the labels of :mod:`graphnorm.sweep.frames` (the norm, plus any other config key that varies
in the sweep). The plotting and loading functions are importable from here too.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# No matplotlib.use() here: that would break inline figures in notebooks. Headless runs fall back to Agg by
# themselves and analysis/plot_sweep.py selects Agg explicitly.
import numpy as np
import pandas as pd

from graphnorm.escaping import markdown_text
from graphnorm.files import check_output_dir, check_output_path
from graphnorm.sweep.figures import (
    DEFAULT_LAYER_METRICS,
    FALLBACK_METRICS,
    plot_collapse_over_steps,
    plot_learning_curves,
    plot_main_metric_vs_depth,
    plot_metric_vs_layer,
    plot_spectra,
    save_figure_files,
)
from graphnorm.sweep.frames import (
    datasets_of,
    layer_table,
    load_epochs,
    load_steps,
    load_sweep,
    main_metric,
    sweep_config,
    sweep_metric,
    with_label,
)
from graphnorm.sweep.tables import (
    MAJORITY_MARGIN,
    format_mean_std,
    majority_level,
    markdown_table,
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

TABLE_METRICS = ("effective_rank", "cone_angle", "cone_angle_q90")
DIGITS = 3  # significant digits of the summary's numbers, as on the results page


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
    labelled = with_label(runs)
    if "dataset" not in labelled.columns:
        labelled["dataset"] = "data"
    table = layer_table(runs, layers)
    token_table = layer_table(runs, layers, rows="token")
    parts = ["# Sweep summary", ""]
    for dataset in datasets_of(labelled):
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
    summary = write_summary(sweep_config(run_dir), every_run, home, log=lambda _: None, sections=sections)
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
    datasets = datasets_of(runs)
    for dataset in datasets:
        suffix = f"_{dataset}" if len(datasets) > 1 else ""
        name = dataset if "dataset" in runs.columns else None
        with contextlib.suppress(ValueError):  # raised when this dataset's runs have no task metric
            figure = plot_main_metric_vs_depth(runs, metric=metric, dataset=name)
            written += save_figure_files(figure, out, f"main_metric_vs_depth{suffix}")
        if not epochs.empty:
            with contextlib.suppress(ValueError):  # no curves for this dataset's runs
                written += save_figure_files(
                    plot_learning_curves(epochs, runs, dataset=name), out, f"learning_curves{suffix}"
                )
        if not steps.empty:
            with contextlib.suppress(ValueError):  # no step rows for this dataset's runs
                figure = plot_collapse_over_steps(steps, runs, dataset=name)
                written += save_figure_files(figure, out, f"collapse_over_steps{suffix}")
        if table.empty:
            continue
        if np.isin([*DEFAULT_LAYER_METRICS, *FALLBACK_METRICS.values()], table["metric"].unique()).any():
            written += save_figure_files(plot_metric_vs_layer(table, dataset=name), out, f"metric_vs_layer{suffix}")
        if table["metric"].astype(str).str.match(r"sv_\d+$").any():
            written += save_figure_files(plot_spectra(table, dataset=name), out, f"spectra{suffix}")
        tokens = token_table if name is None else token_table[token_table["dataset"].astype(str) == name]
        if np.isin([*DEFAULT_LAYER_METRICS, *FALLBACK_METRICS.values()], tokens["metric"].unique()).any():
            figure = plot_metric_vs_layer(token_table, dataset=name, title="graph-token rows")
            written += save_figure_files(figure, out, f"token_metric_vs_layer{suffix}")
    return written
