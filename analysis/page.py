"""The results page: figures and tables of every study under ``analysis/data/``, written as one markdown page.

Three kinds of data, each a folder or file of ``analysis/data/``:

* a collected sweep (``<study>/runs.csv``, ``layers.csv``, ``provenance.json``; see ``collect.py``): the sweep's
  metric against depth (with the majority-class line when recorded), the collapse metrics against layer, with
  ``steps.csv`` (runs with ``probe_every_steps``) the collapse over training steps, and the summary tables of
  :func:`graphnorm.sweep.report.summary_markdown`;
* ``recorded/measurements.csv``: numbers recorded by hand in the presets' headers before this page existed, one
  measured value a row, shown as tables per study (plus mean ± std over seeds where a study has several), and
  ``recorded/notes.md``, the narrative those numbers came with;
* ``benchmarks/ratios.csv``: speed ratios against a baseline timed in the same process, with their source.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from validate import check_provenance, check_runs, read_csv_file, read_json_file  # noqa: E402

from graphnorm.files import atomic_write_text  # noqa: E402
from graphnorm.sweep import report  # noqa: E402
from graphnorm.sweep.tables import markdown_table  # noqa: E402

HEADLINE_STUDY = "cora_depth_quick"  # the README's main job: first on the page when collected
COLLAPSE_FIGURE_METRICS = ("effective_rank", "mean_cosine", "cone_angle_q90")
SWEEP_FILES = ("runs.csv", "provenance.json")


@dataclass
class Study:
    """A collected sweep: its tidy tables and where they came from."""

    name: str
    runs: pd.DataFrame
    layers: pd.DataFrame
    provenance: dict
    steps: pd.DataFrame  # collapse over training steps; empty when the study has no steps.csv


def load_studies(data_dir: Path) -> list[Study]:
    """Every collected sweep under ``data_dir`` (folders with runs.csv and provenance.json), the headline first,
    then by name; a study whose tables cannot give a true page (see ``validate.py``) is a ``ValueError`` naming
    its file."""
    studies = []
    for folder in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        if not all((folder / name).exists() for name in SWEEP_FILES):
            continue
        record_path, runs_path = folder / "provenance.json", folder / "runs.csv"
        provenance = read_json_file(record_path)
        check_provenance(provenance, record_path)
        runs = check_runs(read_csv_file(runs_path), runs_path, provenance, record_path)
        layers, steps = (read_csv_or_empty(folder / name) for name in ("layers.csv", "steps.csv"))
        studies.append(Study(folder.name, runs, layers, provenance, steps))
    return sorted(studies, key=lambda s: (s.name != HEADLINE_STUDY, s.name))


def read_csv_or_empty(path: Path) -> pd.DataFrame:
    """A study's table, empty when the file is absent or holds no more than a line break."""
    return read_csv_file(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()


def save_png(figure: plt.Figure, path: Path) -> None:
    """PNG without a software/date stamp, so the same data give the same bytes."""
    figure.savefig(path, dpi=80, bbox_inches="tight", metadata={"Software": None})
    plt.close(figure)


def provenance_lines(record: dict) -> list[str]:
    """The bullet list under a study's title: command, commit, date, machine, completeness."""
    done = f"{record['runs_ok']} of {record['runs_expected']} runs finished"
    state = "complete" if record.get("complete") else "**incomplete**: the tables show the finished runs only"
    return [
        f"- command: `{record['command']}`",
        f"- commit: `{record['commit']}` ({record.get('commit_note', '')}); date: {record['date']}",
        f"- machine: {record['machine']}; {done} ({state}); source folder: `{record['source']}`",
        *([f"- note: {record['note']}"] if record.get("note") else []),
        "",
    ]


def study_section(study: Study, figures: Path, link_prefix: str) -> list[str]:
    """Markdown of one collected sweep; writes its figures into ``figures``."""
    runs, layers, record = study.runs, study.layers, study.provenance
    metric = record.get("metric")
    parts = [f"## {study.name}", "", *provenance_lines(record)]
    datasets = report._datasets(runs)
    table = report.layer_table(runs, layers)
    for dataset in datasets:
        name = dataset if "dataset" in runs.columns else None
        suffix = f"_{dataset}" if len(datasets) > 1 else ""
        subset = runs if name is None else runs[runs["dataset"].astype(str) == dataset]
        if subset["num_layers"].nunique() > 1:
            with contextlib.suppress(ValueError):
                stem = f"{study.name}{suffix}_metric_vs_depth.png"
                save_png(report.plot_main_metric_vs_depth(runs, metric=metric, dataset=name), figures / stem)
                parts += [f"![{study.name} {dataset}: metric vs depth]({link_prefix}{stem})", ""]
        if not table.empty:
            with contextlib.suppress(ValueError):
                stem = f"{study.name}{suffix}_collapse_vs_layer.png"
                figure = report.plot_metric_vs_layer(table, metrics=COLLAPSE_FIGURE_METRICS, dataset=name)
                save_png(figure, figures / stem)
                cone = (
                    "the robust cone (cone_angle_q90)"
                    if "cone_angle_q90" in set(table["metric"])
                    else "the exact cone (these runs predate the robust one)"
                )
                parts += [
                    f"![{study.name} {dataset}: collapse vs layer]({link_prefix}{stem})",
                    "",
                    f"Collapse by layer, one column per depth (mean ± std over seeds); the cone panel shows {cone}.",
                    "",
                ]
        if not study.steps.empty:
            parts += steps_figure(study, name, figures / f"{study.name}{suffix}_collapse_over_steps.png", link_prefix)
    summary = report.summary_markdown(runs, layers, metric).split("\n", 1)[1]  # drop "# Sweep summary"
    parts += [line.replace("## ", "### ", 1) if line.startswith("## ") else line for line in summary.splitlines()]
    return [*parts, ""]


def steps_figure(study: Study, dataset: str | None, path: Path, link_prefix: str) -> list[str]:
    """The collapse-over-steps figure of a study with ``steps.csv``, its caption and the command that made it."""
    try:
        figure = report.plot_collapse_over_steps(study.steps, study.runs, dataset=dataset)
    except ValueError:
        return []
    save_png(figure, path)
    every = sorted(study.steps["step"].unique())
    return [
        f"![{study.name}: collapse over training steps]({link_prefix}{path.name})",
        "",
        f"Collapse over training steps: the probe's metrics of the weights being trained, at step 0 and every "
        f"{every[1] - every[0] if len(every) > 1 else 0} optimizer steps up to step {every[-1]} (`probe_every_steps`; "
        f"`steps.csv`), one line per layer, one column per arm; from `{study.provenance['command']}`.",
        "",
    ]


def _cell_table(frame: pd.DataFrame, index: list[str], columns: list[str]) -> str:
    """Markdown pivot of the recorded values (kept as written) with ``index`` rows and ``columns`` headers."""
    frame = frame.fillna({c: "" for c in index})
    wide = frame.pivot_table(index=index, columns=columns, values="value", aggfunc="first", sort=False)
    wide.columns = [" ".join(str(c) for c in key if str(c)) if isinstance(key, tuple) else str(key) for key in wide]
    return markdown_table(wide.astype(object).where(wide.notna(), ""))


def seed_summary(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Mean ± std (sample std) over seeds of every (variant, norm, split, metric, epoch) recorded for >= 2 seeds;
    a seeded row whose value is not a finite number is a ``ValueError`` naming ``path`` and the line."""
    seeded = frame[frame["seed"].astype(str).str.fullmatch(r"\d+")].copy()
    seeded["number"] = pd.to_numeric(seeded["value"], errors="coerce")
    bad = seeded.index[~seeded["number"].map(lambda x: bool(pd.notna(x)) and math.isfinite(x))]
    if len(bad):
        value = seeded.loc[bad[0], "value"]
        raise ValueError(f"{path} line {bad[0] + 2}, column value: {value!r} is not a number (its row has a seed)")
    keys = ["variant", "norm", "split", "metric", "epoch"]
    stats = seeded.fillna({k: "" for k in keys}).groupby(keys, sort=False)["number"].agg(["mean", "std", "count"])
    stats = stats[stats["count"] >= 2].reset_index()
    stats["value"] = [f"{m:.3f} ± {s:.3f} (n={n})" for m, s, n in zip(stats["mean"], stats["std"], stats["count"])]
    return stats


def recorded_section(path: Path, notes: Path | None) -> list[str]:
    """Tables of the hand-recorded measurements, one per study, with their sources, then the notes."""
    frame = read_csv_file(path, dtype=str, keep_default_na=False).replace("", pd.NA)
    parts = [
        "## Recorded measurements (Graphormer and GIN on ZINC and MolHIV, SepNorm vs ShareNorm)",
        "",
        "These single runs were recorded by hand, in the presets' headers or from the runs' records and checkpoints; "
        "their run folders were not kept, so the tables below are regenerated from the transcribed values in "
        f"`{path.parent.name}/{path.name}` (one measured value a row, with its date, commit where recorded, and "
        "source). Empty seed: not stated in the record.",
        "",
    ]
    for study, group in frame.groupby("study", sort=False):
        first = group.iloc[0]
        parts += [f"### {study}: {first['dataset']}, {first['model']}", ""]
        sources = sorted(set(group["source"].dropna()))
        dates = ", ".join(sorted(set(group["date"].dropna())))
        commits = ", ".join(sorted(set(group["commit"].dropna()))) or "not recorded"
        parts += [f"- command: `{c}`" for c in sorted(set(group["command"].dropna()))]
        parts += [f"- date: {dates}; commit: {commits}; source: {'; '.join(sources)}", ""]
        parts += [_cell_table(group, ["variant", "norm", "seed", "epoch"], ["split", "metric"])]
        summary = seed_summary(group, path)
        if not summary.empty:
            table = _cell_table(summary, ["variant", "norm", "epoch"], ["split", "metric"])
            parts += ["Mean ± std over seeds:", "", table]
    if notes is not None and notes.exists():
        text = notes.read_text().strip().splitlines()
        demoted = [f"##{line}" if line.startswith("## ") else line for line in text]  # under this page's ###
        parts += ["### Notes recorded with these runs", "", *demoted, ""]
    return parts


def benchmark_section(path: Path) -> list[str]:
    """The benchmark ratios table, as collected."""
    frame = read_csv_file(path, dtype=str, keep_default_na=False)
    return [
        "## Benchmark ratios",
        "",
        "Time of a graphnorm model or norm over its baseline timed in the same process (interleaved rounds, "
        "median); below 1 is faster. Absolute times are not comparable across machines or loads.",
        "",
        markdown_table(frame.set_index(frame.columns[0])),
    ]


def build_page(data_dir: Path, out_dir: Path, command: str) -> Path:
    """Write ``out_dir/README.md`` and ``out_dir/figures/*.png`` from ``data_dir``; returns the page's path."""
    # Every input read first: data that cannot give a true page leave the last page and figures as they are.
    studies = load_studies(data_dir)
    recorded, ratios = data_dir / "recorded" / "measurements.csv", data_dir / "benchmarks" / "ratios.csv"
    tail = recorded_section(recorded, data_dir / "recorded" / "notes.md") if recorded.exists() else []
    tail += benchmark_section(ratios) if ratios.exists() else []
    figures = out_dir / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    for old in figures.glob("*.png"):
        old.unlink()
    parts = [
        "# Results",
        "",
        "Generated: do not edit. Every figure and table below is rebuilt from the tidy tables under "
        "`analysis/data/` by one command, from the repository root:",
        "",
        "```bash",
        command,
        "```",
        "",
        "Add or refresh a sweep study: `python analysis/build.py --collect RUN_DIR --study NAME --command "
        '"graphnorm sweep ..."` (copies the sweep folder\'s runs.csv / layers.csv into `analysis/data/NAME/` '
        "with its provenance), then the command above.",
        "",
        "Layers: the collapse tables name the layer they show; the collapse figures draw the robust cone "
        "(`cone_angle_q90`, the smallest cone of the 90 % of rows closest to their mean direction), the tables the "
        "exact smallest cone (`cone_angle`) and the robust one beside it when recorded.",
        "",
    ]
    if studies:
        parts += ["Studies: " + ", ".join(f"[{s.name}](#{s.name})" for s in studies), ""]
    if all(s.name != HEADLINE_STUDY for s in studies):
        parts += [f"The Cora depth study (`{HEADLINE_STUDY}`, the README's main job) is not collected yet.", ""]
    for study in studies:
        parts += study_section(study, figures, "figures/")
    page = out_dir / "README.md"
    atomic_write_text(page, "\n".join([*parts, *tail]).rstrip() + "\n")
    return page
