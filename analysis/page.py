"""The results pages, written from the tidy tables of ``analysis/data/``: a summary of the findings
(``README.md``), then one page per question of ``analysis/questions.yaml`` (``questions/<anchor>.md``) with the
studies that answer it; without a questions file, one page with every study.

A study is a collected sweep (``runs.csv``, ``layers.csv``, ``provenance.json``, maybe ``steps.csv``: figures and
summary tables), a folder of tables (each CSV), the hand-recorded ``recorded/measurements.csv`` (tables, mean ± std
over seeds) with its ``recorded/notes.md``, or ``benchmarks/ratios.csv``. Provenance and notes are folded under the
study's heading; a summary table's heading is its first clause, what it shows the line under it. Every collected
study must be listed by a question. Numbers have three significant digits (``graphnorm.sweep.tables``' one format);
text from the data is shown as written (``validate.py`` says which text is which).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from questions import Question, Structure, finding_sentence  # noqa: E402
from validate import (  # noqa: E402
    check_provenance,
    check_runs,
    check_study_name,
    read_csv_file,
    read_json_file,
    read_table_or_empty,
)

from graphnorm.escaping import markdown_code, markdown_prose, markdown_text  # noqa: E402
from graphnorm.files import atomic_write_text, check_output_dir, save_figure  # noqa: E402
from graphnorm.sweep import report  # noqa: E402
from graphnorm.sweep.tables import format_mean_std, markdown_table, significant  # noqa: E402

QUESTIONS_DIR = "questions"  # one page per question, beside README.md (the summary)
HEADLINE_STUDY = "cora_depth_quick"  # the README's main job: first on the page when collected
COLLAPSE_FIGURE_METRICS = ("effective_rank", "mean_cosine", "cone_angle_q90")
SWEEP_FILES = ("runs.csv", "provenance.json")
RECORDED, BENCHMARKS = "recorded", "benchmarks"  # data folders that are not one study each
RECORDED_NOTES = "recorded/notes"
# Headings of the items that are not one named study (a study's heading is its name, so its anchor is its name).
HEADINGS = {RECORDED_NOTES: "Notes recorded with these runs", BENCHMARKS: "Benchmark ratios"}
DIGITS = 3
WHOLE_NUMBER = re.compile(r"[+-]?\d+")
RECORDED_INTRO = (
    "recorded by hand in the preset's header or from the run's record (the run folders were not kept): the "
    "transcribed values of `recorded/measurements.csv`, one a row, with date, commit and source. Empty seed: not "
    "stated in the record."
)


@dataclass
class Study:
    """A collected sweep: its tidy tables and where they came from."""

    name: str
    runs: pd.DataFrame
    layers: pd.DataFrame
    provenance: dict
    steps: pd.DataFrame  # collapse over training steps; empty when the study has no steps.csv
    notes: str = ""  # the study folder's notes.md


def load_studies(data_dir: Path) -> list[Study]:
    """Every collected sweep under ``data_dir`` (folders with runs.csv and provenance.json), the headline first,
    then by name; a study whose tables cannot give a true page (see ``validate.py``) is a ``ValueError`` naming
    its file."""
    studies = []
    for folder in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        if not all((folder / name).exists() for name in SWEEP_FILES):
            continue
        record_path, runs_path = folder / "provenance.json", folder / "runs.csv"
        check_study_name(folder.name, folder)
        provenance = read_json_file(record_path)
        check_provenance(provenance, record_path)
        runs = check_runs(read_csv_file(runs_path), runs_path, provenance, record_path)
        layers, steps = (read_table_or_empty(folder / name) for name in ("layers.csv", "steps.csv"))
        studies.append(Study(folder.name, runs, layers, provenance, steps, read_notes(folder / "notes.md")))
    return sorted(studies, key=lambda s: (s.name != HEADLINE_STUDY, s.name))


def table_folders(data_dir: Path) -> list[Path]:
    """Study folders that are not collected sweeps: tables (``*.csv``) and a ``notes.md``, e.g. a benchmark's output."""
    return [
        folder
        for folder in sorted(p for p in data_dir.iterdir() if p.is_dir() and p.name not in (RECORDED, BENCHMARKS))
        if not (folder / "runs.csv").exists() and (any(folder.glob("*.csv")) or (folder / "notes.md").exists())
    ]


def read_notes(path: Path) -> str:
    """A study's ``notes.md`` ('' when absent) as Markdown without HTML (:func:`graphnorm.escaping.markdown_prose`);
    not UTF-8 is a ``ValueError`` naming it."""
    if not path.exists():
        return ""
    try:
        return markdown_prose(path.read_text(encoding="utf-8")).strip()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} cannot be read as UTF-8 text: {' '.join(str(error).split())}") from None


def demote(markdown: str, level: int) -> list[str]:
    """``markdown``'s lines with its headings moved down so that its top level becomes ``level`` (fenced code
    blocks untouched): notes written as a page of their own sit under a study's heading."""
    lines, fenced, depths = markdown.splitlines(), False, []
    for line in lines:
        fenced = fenced != line.startswith("```")
        is_heading = not fenced and re.match(r"#{1,6} ", line) is not None
        depths.append(len(line) - len(line.lstrip("#")) if is_heading else 0)  # 0: not a heading
    shift = level - min(d for d in depths if d) if any(depths) else 0
    return [("#" * min(6, d + shift) + line.lstrip("#")) if d else line for line, d in zip(lines, depths)]


def save_png(figure: plt.Figure, path: Path) -> None:
    """PNG without a software/date stamp, so the same data give the same bytes."""
    save_figure(figure, path, dpi=80, bbox_inches="tight", metadata={"Software": None})
    plt.close(figure)


def format_cell(value: object) -> str:
    """A table cell in the page's one number format: a number with three significant digits, a whole number as
    written, any other text unchanged."""
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value).strip()
    if not text or WHOLE_NUMBER.fullmatch(text):
        return text
    try:
        number = float(text)
    except ValueError:
        return text
    return significant(number, DIGITS) if math.isfinite(number) else text


def folded(title: str, lines: list[str]) -> list[str]:
    """``lines`` in a collapsed block titled ``title`` (HTML ``details``: folded on the site and on a code host)."""
    return ['<details class="note" markdown="1">', f"<summary>{title}</summary>", "", *lines, "", "</details>", ""]


def provenance_lines(record: dict) -> list[str]:
    """The study's provenance, folded under its title: command, commit, date, completeness, note. An incomplete
    study says so outside the fold."""
    done = f"{record['runs_ok']} of {record['runs_expected']} runs finished"
    state = "complete" if record.get("complete") else "**incomplete**: the tables show the finished runs only"
    commit = f"{markdown_code(record['commit'])} ({markdown_text(record.get('commit_note', ''))})"
    lines = [
        f"- command: {markdown_code(record['command'])}",
        f"- commit: {commit}; date: {markdown_text(record['date'])}",
        f"- {done} ({state}); source folder: {markdown_code(record['source'])}",
        *([f"- note: {markdown_text(record['note'])}"] if record.get("note") else []),
    ]
    warning = [] if record.get("complete") else [f"This study is **incomplete**: {done}.", ""]
    return [*warning, *folded("Provenance", lines)]


def short_heading(line: str) -> list[str]:
    """A summary table's heading (``## dataset: metric (what, seeds)``) one level down, cut before its first
    parenthesis; the rest becomes the line under it."""
    short, _, rest = line[3:].partition(" (")
    return [f"#### {short}", "", f"({rest}", ""] if rest else [f"#### {short}"]


def study_section(study: Study, figures: Path, link_prefix: str) -> list[str]:
    """Markdown of one collected sweep; writes its figures into ``figures``."""
    runs, layers, record = study.runs, study.layers, study.provenance
    metric = record.get("metric")
    parts = [f"### {study.name}", "", *provenance_lines(record)]
    if study.notes:
        parts += folded("Notes", demote(study.notes, 4))
    datasets = report.datasets_of(runs)
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
    summary = report.summary_markdown(runs, layers, metric, digits=DIGITS).split("\n", 1)[1]  # drop "# Sweep summary"
    for line in summary.splitlines():
        parts += short_heading(line) if line.startswith("## ") else [line]
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
        f"`steps.csv`), one line per layer, one column per arm; from {markdown_code(study.provenance['command'])}.",
        "",
    ]


def _cell_table(frame: pd.DataFrame, index: list[str], columns: list[str]) -> str:
    """Markdown pivot of the values (each through :func:`format_cell`) with ``index`` rows and ``columns`` headers."""
    frame = frame.fillna({c: "" for c in index})
    wide = frame.pivot_table(index=index, columns=columns, values="value", aggfunc="first", sort=False)
    wide.columns = [" ".join(str(c) for c in key if str(c)) if isinstance(key, tuple) else str(key) for key in wide]
    return markdown_table(wide.astype(object).where(wide.notna(), "").map(format_cell))


def seed_summary(frame: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, int]:
    """Mean ± std (sample std) over seeds of every (variant, norm, split, metric, epoch) recorded for >= 2 seeds,
    and the usual number of seeds (a cell names its count only where it differs); a seeded row whose value is not a
    finite number is a ``ValueError`` naming ``path`` and the line."""
    seeded = frame[frame["seed"].astype(str).str.fullmatch(r"\d+")].copy()
    seeded["number"] = pd.to_numeric(seeded["value"], errors="coerce")
    bad = seeded.index[~seeded["number"].map(lambda x: bool(pd.notna(x)) and math.isfinite(x))]
    if len(bad):
        value = seeded.loc[bad[0], "value"]
        raise ValueError(f"{path} line {bad[0] + 2}, column value: {value!r} is not a number (its row has a seed)")
    keys = ["variant", "norm", "split", "metric", "epoch"]
    stats = seeded.fillna({k: "" for k in keys}).groupby(keys, sort=False)["number"].agg(["mean", "std", "count"])
    stats = stats[stats["count"] >= 2].reset_index()
    usual = int(stats["count"].mode().max()) if len(stats) else 0
    stats["value"] = [
        format_mean_std(m, s, n, DIGITS, usual) for m, s, n in zip(stats["mean"], stats["std"], stats["count"])
    ]
    return stats, usual


def read_recorded(path: Path) -> pd.DataFrame:
    """``recorded/measurements.csv`` as text cells (blank cells as missing)."""
    return read_csv_file(path, dtype=str, keep_default_na=False).replace("", pd.NA)


def recorded_section(study: str, group: pd.DataFrame, path: Path) -> list[str]:
    """One hand-recorded study: its sources, the values as a table, and mean ± std over seeds where it has several."""
    first = group.iloc[0]
    what = f"{markdown_text(first['dataset'], line_start=True)}, {markdown_text(first['model'])}"
    parts = [f"### {study}", "", f"{what}; {RECORDED_INTRO}", ""]
    sources = markdown_text("; ".join(sorted(set(group["source"].dropna()))))
    dates = markdown_text(", ".join(sorted(set(group["date"].dropna()))))
    commits = markdown_text(", ".join(sorted(set(group["commit"].dropna()))) or "not recorded")
    parts += [f"- command: {markdown_code(c)}" for c in sorted(set(group["command"].dropna()))]
    parts += [f"- date: {dates}; commit: {commits}; source: {sources}", ""]
    parts += [_cell_table(group, ["variant", "norm", "seed", "epoch"], ["split", "metric"])]
    summary, usual = seed_summary(group, path)
    if not summary.empty:
        table = _cell_table(summary, ["variant", "norm", "epoch"], ["split", "metric"])
        parts += [f"Mean ± std over {usual} seeds:", "", table]
    return parts


def recorded_notes_section(notes: Path) -> list[str]:
    """The narrative recorded with the hand-recorded measurements."""
    return [f"### {HEADINGS[RECORDED_NOTES]}", "", *folded("Notes", demote(read_notes(notes), 4))]


def benchmark_section(path: Path) -> list[str]:
    """The benchmark ratios table, as collected, numbers with three significant digits."""
    frame = read_csv_file(path, dtype=str, keep_default_na=False)
    table = frame.set_index(frame.columns[0]).map(format_cell)
    return [
        f"### {HEADINGS[BENCHMARKS]}",
        "",
        "Time of a graphnorm model or norm over its baseline timed in the same process (interleaved rounds, "
        "median); below 1 is faster. Absolute times are not comparable across machines or loads. From "
        f"`{BENCHMARKS}/{path.name}`.",
        "",
        markdown_table(table),
    ]


def table_study_section(folder: Path) -> list[str]:
    """A folder of tables: its notes, then every CSV as a table (numbers with three significant digits)."""
    parts = [f"### {folder.name}", ""]
    notes = read_notes(folder / "notes.md")
    if notes:
        parts += folded("Notes", demote(notes, 4))
    for path in sorted(folder.glob("*.csv")):
        frame = read_csv_file(path, dtype=str, keep_default_na=False)
        table = frame.set_index(frame.columns[0]).map(format_cell)
        parts += [f"From {markdown_code(f'{folder.name}/{path.name}')}:", "", markdown_table(table, prose=True)]
    return parts


def collected_items(data_dir: Path, figures: Path, link_prefix: str) -> dict[str, Callable[[], list[str]]]:
    """Every study the data folder holds, by the name a question lists it under, with the function that writes its
    markdown (and its figures into ``figures``); the headline sweep first, then the sweeps, the table folders, the
    recorded studies and their notes, and the benchmarks. Every input is read and checked here, before anything is
    written: a study that cannot give a true page is a ``ValueError`` and the last page and figures stay.
    ``link_prefix``: the figures folder as the page that shows them links it."""
    studies = load_studies(data_dir)
    recorded, ratios = data_dir / RECORDED / "measurements.csv", data_dir / BENCHMARKS / "ratios.csv"
    items: dict[str, Callable[[], list[str]]] = {
        study.name: partial(study_section, study, figures, link_prefix) for study in studies
    }
    for folder in table_folders(data_dir):
        check_study_name(folder.name, folder)
        items[folder.name] = partial(table_study_section, folder)
    if recorded.exists():
        for study, group in read_recorded(recorded).groupby("study", sort=False):
            check_study_name(study, recorded)
            seed_summary(group, recorded)  # a bad seeded value fails now, not halfway through writing
            items[f"{RECORDED}/{study}"] = partial(recorded_section, study, group, recorded)
        notes = data_dir / RECORDED / "notes.md"
        if notes.exists():
            read_notes(notes)
            items[RECORDED_NOTES] = partial(recorded_notes_section, notes)
    if ratios.exists():
        items[BENCHMARKS] = partial(benchmark_section, ratios)
    for folder in table_folders(data_dir):
        table_study_section(folder)  # reads (and so checks) its notes and tables
    return items


def study_link(name: str) -> str:
    """A link to a study's heading (its last path part: ``recorded/zinc_graphormer`` -> ``#zinc_graphormer``)."""
    if name in HEADINGS:
        return f"[{HEADINGS[name].lower()}](#{HEADINGS[name].lower().replace(' ', '-')})"
    anchor = name.rsplit("/", 1)[-1]
    return f"[{anchor}](#{anchor})"


def summary_lines(items: dict, structure: Structure, data_dir: Path) -> list[str]:
    """The summary of findings, computed from the data; an item no question lists, or a finding that links to a
    study the page does not show, is a ``ValueError``."""
    listed = [name for question in structure.questions for name in question.studies]
    unlisted = [name for name in items if name not in listed]
    if unlisted:
        raise ValueError(
            f"{', '.join(unlisted)} collected under {data_dir} but listed by no question of {structure.path}: "
            "add each to the studies of the question it answers"
        )
    parts = ["## Summary", ""]
    for finding in structure.findings:
        if finding.link not in items:
            raise ValueError(f"{structure.path}: finding {finding.title!r} links to {finding.link!r}, not collected")
        question = next(q for q in structure.questions if finding.link in q.studies)
        page = question_page(question, structure)
        anchor = study_link(finding.link).split("](", 1)[1]  # "#study)"
        sentence = prose_line(finding_sentence(data_dir, finding))
        parts.append(f"- **[{prose_line(finding.title)}]({page}{anchor}**: {sentence}")
    questions = [f"- [{prose_line(q.title)}]({question_page(q, structure)})" for q in structure.questions]
    return [*parts, "", "## Questions", "", "One page per question:", "", *questions, ""]


def question_page(question: Question, structure: Structure) -> str:
    """The page of ``question``, relative to the summary page: ``questions/<name>.md``, the name its heading's anchor
    in ASCII letters, digits and ``-``, at most 60 characters, ``-2``, ``-3``... after a name an earlier question has
    (``question-N`` when nothing is left)."""
    taken: list[str] = []
    for number, other in enumerate(structure.questions, 1):
        name = re.sub(r"[^a-z0-9]+", "-", other.anchor.lower())[:60].strip("-") or f"question-{number}"
        name = name if name not in taken else f"{name}-{number}"
        taken.append(name)
        if other is question:
            return f"{QUESTIONS_DIR}/{name}.md"
    raise ValueError(f"{question.title!r} is not a question of {structure.path}")


def prose_line(text: str) -> str:
    """A text of ``questions.yaml`` on one line, as Markdown without HTML."""
    return markdown_prose(" ".join(text.split()))


def question_sections(items: dict[str, Callable[[], list[str]]], question: Question) -> list[str]:
    """One question's page: its title and text, then its studies (headings one level up: a study is a ``##``); a
    listed study that is not collected is named."""
    text = [markdown_prose(question.text), ""] if question.text else []
    parts = [f"## {prose_line(question.title)}", "", *text, "[All questions and the summary](../README.md)", ""]
    shown = [name for name in question.studies if name in items]
    missing = [name for name in question.studies if name not in items]
    if shown:
        parts += ["Studies: " + ", ".join(study_link(name) for name in shown), ""]
    if missing:
        parts += [f"Not collected yet: {', '.join(markdown_code(name) for name in missing)}.", ""]
    for name in shown:
        parts += [*items[name](), ""]
    return demote("\n".join(parts), 1)


def single_blank_lines(lines: list[str]) -> list[str]:
    """``lines`` without a blank line after a blank line, except inside fenced code blocks (kept as written)."""
    kept, fenced = [], False
    for line in lines:
        fenced = fenced != line.startswith("```")
        if fenced or line or (kept and kept[-1]):
            kept.append(line)
    return kept


def clear_question_pages(folder: Path) -> None:
    """An empty folder of question pages (a question that left ``questions.yaml`` leaves no page behind)."""
    check_output_dir(folder, "the results page's questions folder")
    for old in folder.glob("*.md"):
        old.unlink()


def write_page(path: Path, parts: list[str]) -> None:
    """``parts`` (each one or several lines) as one Markdown page, single blank lines outside code blocks."""
    lines = "\n".join(parts).split("\n")
    atomic_write_text(path, "\n".join(single_blank_lines(lines)).strip() + "\n")


def clear_figures(figures: Path) -> None:
    """An empty figures folder (the old PNGs go: a study that left the data leaves no figure behind)."""
    check_output_dir(figures, "the results page's figures folder")
    for old in figures.glob("*.png"):
        old.unlink()


def build_page(data_dir: Path, out_dir: Path, command: str, structure: Structure | None = None) -> Path:
    """Write ``out_dir/README.md`` and ``out_dir/figures/*.png`` from ``data_dir``; returns the page's path.
    ``structure``: the summary and questions (``questions.yaml``), each question on its own page
    ``out_dir/questions/<anchor>.md``; None lists every study on the one page, under one heading."""
    items = collected_items(data_dir, out_dir / "figures", "../figures/" if structure is not None else "figures/")
    summary = summary_lines(items, structure, data_dir) if structure is not None else []
    clear_figures(out_dir / "figures")
    clear_question_pages(out_dir / QUESTIONS_DIR)
    parts = [
        "# Results",
        "",
        "Generated: do not edit. Every number, figure and table of these pages is rebuilt from the tidy tables under "
        "`analysis/data/` by one command, from the repository root:",
        "",
        "```bash",
        command,
        "```",
        "",
        "Add or refresh a sweep study: `python analysis/build.py --collect RUN_DIR --study NAME --command "
        '"graphnorm sweep ..."` (copies the sweep folder\'s runs.csv / layers.csv into `analysis/data/NAME/` '
        "with its provenance), list it under its question in `analysis/questions.yaml`, then the command above.",
        "",
        "Numbers have three significant digits; a table's title gives its seed count, and a cell names its own "
        "count only where it differs. Layers: the collapse tables name the layer they show; the collapse figures "
        "draw the robust cone (`cone_angle_q90`, the smallest cone of the 90 % of rows closest to their mean "
        "direction), the tables the exact smallest cone (`cone_angle`) and the robust one beside it when recorded.",
        "",
    ]
    if structure is not None:
        parts += summary
        for question in structure.questions:
            write_page(out_dir / question_page(question, structure), question_sections(items, question))
    else:
        if HEADLINE_STUDY not in items:
            parts += [f"The Cora depth study (`{HEADLINE_STUDY}`, the README's main job) is not collected yet.", ""]
        if items:
            parts += ["## Studies", "", "Studies: " + ", ".join(study_link(name) for name in items), ""]
        for write in items.values():
            parts += [*write(), ""]
    page = out_dir / "README.md"
    write_page(page, parts)  # a table's markdown is one part of several lines
    return page
