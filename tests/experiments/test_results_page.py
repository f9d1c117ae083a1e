"""The results page (analysis/build.py): collect a sweep folder into tidy tables, build the page from them, the
numbers on the page equal the tables', and two builds give the same bytes."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "analysis" / "build.py"
if str(BUILD.parent) not in sys.path:  # the page's modules sit beside build.py (analysis/ is not a package)
    sys.path.insert(0, str(BUILD.parent))

from page import format_cell  # noqa: E402


def _build(*args: str) -> subprocess.CompletedProcess:
    """The command as a user runs it."""
    return subprocess.run([sys.executable, str(BUILD), *args], capture_output=True, text=True, check=False)


def _main(*args: str) -> int:
    """The same entry point in this process (no interpreter start-up: faster on a busy machine)."""
    spec = importlib.util.spec_from_file_location("analysis_build", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(list(args))


def tiny_sweep_folder(run_dir: Path) -> Path:
    """A finished node-level sweep as graphnorm sweep leaves it: 2 norms x depths 2, 8 x 2 seeds, metric
    test_acc_last, majority_acc recorded, every layer probed (effective rank, cones, one metric the page drops),
    plus one failed run (left out of the tables)."""
    run_dir.mkdir(parents=True)
    grid = "{norm: [none, contranorm], num_layers: [2, 8], seed: [0, 1]}"
    (run_dir / "sweep.yaml").write_text(f"name: tiny\nmetric: test_acc_last\nbase: {{dataset: cora}}\ngrid: {grid}\n")
    runs, layers = [], []
    for norm, accuracy in (("none", {2: 0.8, 8: 0.3}), ("contranorm", {2: 0.81, 8: 0.74})):
        for depth in (2, 8):
            for seed in (0, 1):
                run_id = f"{norm}-L{depth}-s{seed}"
                value = accuracy[depth] + 0.013 * seed
                runs.append(
                    {"run_id": run_id, "status": "ok", "dataset": "cora", "model": "gcn", "norm": norm,
                     "num_layers": depth, "seed": seed, "lr": 0.01, "test_acc": 0.5, "test_acc_last": value,
                     "val_acc": 0.6, "majority_acc": 0.319, "num_eval_nodes": 1000, "error": None}
                )  # fmt: skip
                for layer in range(1, depth + 1):
                    for metric, number in (("effective_rank", 10.0 / layer), ("cone_angle", 50.0),
                                           ("cone_angle_q90", 5.0 + seed), ("dirichlet_energy", 1.0)):  # fmt: skip
                        layers.append(
                            {"run_id": run_id, "layer": layer, "layer_name": f"layer{layer}", "rows": "node",
                             "metric": metric, "value": number, "stat": "value", "split": None}
                        )  # fmt: skip
    runs.append({"run_id": "none-L8-s2", "status": "failed", "norm": "none", "num_layers": 8, "seed": 2})
    pd.DataFrame(runs).to_csv(run_dir / "runs.csv", index=False)
    pd.DataFrame(layers).to_csv(run_dir / "layers.csv", index=False)
    return run_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny sweep collected as study 'tiny' beside copies of the committed recorded and benchmark tables, and
    the page built from them (one build shared by the tests of this module)."""
    tmp_path = tmp_path_factory.mktemp("page")
    data, out = tmp_path / "data", tmp_path / "out"
    for name in ("recorded", "benchmarks"):
        shutil.copytree(REPO / "analysis" / "data" / name, data / name)
    sweep = tiny_sweep_folder(tmp_path / "runs" / "tiny")
    result = _build("--collect", str(sweep), "--study", "tiny", "--command", "graphnorm sweep tiny.yaml",
                    "--data", str(data), "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    return {"data": data, "out": out, "page": out / "README.md"}


def test_collect_writes_tidy_tables_with_provenance(built):
    study = built["data"] / "tiny"
    runs = pd.read_csv(study / "runs.csv")
    assert len(runs) == 8 and "status" not in runs.columns  # the ok runs only (the failed one is left out)
    assert {"norm", "num_layers", "seed", "test_acc_last", "majority_acc"} <= set(runs.columns)
    assert "lr" not in runs.columns and "error" not in runs.columns  # constant config keys and run bookkeeping
    layers = pd.read_csv(study / "layers.csv")
    assert set(layers["metric"]) == {"effective_rank", "cone_angle", "cone_angle_q90"}  # only what the page shows
    record = json.loads((study / "provenance.json").read_text())
    assert record["command"] == "graphnorm sweep tiny.yaml" and record["metric"] == "test_acc_last"
    assert (record["runs_ok"], record["runs_failed"], record["runs_expected"]) == (8, 1, 8) and record["complete"]
    assert record["commit"] and record["date"] and record["machine"]
    assert (study / "sweep.yaml").read_text().startswith("name: tiny")


def test_page_shows_figures_and_the_tables_numbers(built):
    page = built["page"].read_text()
    assert "python analysis/build.py" in page.split("## ")[0]  # the one command, at the top
    images = [line.split("](")[1].rstrip(")") for line in page.splitlines() if line.startswith("![")]
    assert "figures/tiny_metric_vs_depth.png" in images and "figures/tiny_collapse_vs_layer.png" in images
    for image in images:
        assert (built["out"] / image).stat().st_size > 5000, image
    assert "- command: `graphnorm sweep tiny.yaml`" in page and "8 of 8 runs finished (complete)" in page
    # The sweep's own metric, mean ± std over the two seeds (three significant digits; the count once, in the title).
    runs = pd.read_csv(built["data"] / "tiny" / "runs.csv")
    section = page.split("#### cora: test_acc_last\n\n(mean ± std over 2 seeds)")[1].split("####")[0]
    for (norm, depth), values in runs.groupby(["norm", "num_layers"])["test_acc_last"]:
        cell = f"{values.mean():.3f} ± {values.std():.3f}"  # means in [0.1, 1): three decimals
        row = next(line for line in section.splitlines() if line.startswith(f"| {norm} |"))
        assert cell in row and "(n=" not in row, (norm, depth, row)
    assert "| none | 0.806 ± 0.009 | 0.306 ± 0.009 ≤maj |" in section
    assert "majority class (always the most frequent training class): 0.319" in section
    # Short titles: the table's heading is its first clause, what it shows is the line under it.
    assert "#### cora: effective_rank at the last probed layer\n\n(gcn: the classifier output (logits: the last GCN " \
        "conv, no norm)) (mean ± std over 2 seeds)" in page  # fmt: skip
    # Every recorded measurement and every benchmark ratio is on the page, in the page's one number format.
    recorded = pd.read_csv(built["data"] / "recorded" / "measurements.csv", dtype=str)
    for value in recorded["value"]:
        assert f"| {format_cell(value)} |" in page, value
    ratios = pd.read_csv(built["data"] / "benchmarks" / "ratios.csv", dtype=str)
    for row in ratios.itertuples(index=False):
        assert "| " + " | ".join(format_cell(cell) for cell in row) + " |" in page
    zinc = page.split("### zinc_sepnorm_vs_sharenorm")[1].split("### ")[0]
    assert "Mean ± std over 3 seeds:" in zinc  # SepNorm over seeds 0-2 as recorded (0.483, 0.487, 0.497)
    assert "| preset (12 epochs, EMA ~100 steps) | sepnorm | best-val | 0.489 ± 0.007 |" in zinc


def test_building_twice_gives_the_same_page_and_figures(built):
    first = {p.name: p.read_bytes() for p in [built["page"], *sorted((built["out"] / "figures").glob("*.png"))]}
    assert _main("--data", str(built["data"]), "--out", str(built["out"])) == 0
    second = {p.name: p.read_bytes() for p in [built["page"], *sorted((built["out"] / "figures").glob("*.png"))]}
    assert first.keys() == second.keys() and all(first[name] == second[name] for name in first)


def test_page_marks_an_incomplete_study_and_collect_errors_are_one_line(tmp_path, capsys):
    sweep = tiny_sweep_folder(tmp_path / "runs" / "partial")
    runs = pd.read_csv(sweep / "runs.csv")
    runs[runs["seed"] != 1].to_csv(sweep / "runs.csv", index=False)
    data, out = tmp_path / "data", tmp_path / "out"
    assert _main("--collect", str(sweep), "--study", "partial", "--data", str(data), "--out", str(out)) == 0
    page = (out / "README.md").read_text()
    assert "4 of 8 runs finished (**incomplete**" in page and "Recorded measurements" not in page
    assert _main("--collect", str(tmp_path / "nowhere"), "--study", "x", "--data", str(data)) == 2
    assert "runs.csv not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: --study is required with --collect
        _main("--collect", str(sweep))


@pytest.mark.slow
def test_committed_page_is_up_to_date(tmp_path):
    """analysis/README.md and analysis/questions/ are what the build writes from analysis/data/ (figures are compared
    by name only: their
    bytes depend on matplotlib's version and fonts)."""
    result = _build("--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "README.md").read_text() == (REPO / "analysis" / "README.md").read_text()
    committed = sorted((REPO / "analysis" / "questions").glob("*.md"))
    assert [p.name for p in committed] == sorted(p.name for p in (tmp_path / "questions").glob("*.md"))
    for page in committed:
        assert (tmp_path / "questions" / page.name).read_text() == page.read_text(), page.name
    built = {p.name for p in (tmp_path / "figures").glob("*.png")}
    assert built == {p.name for p in (REPO / "analysis" / "figures").glob("*.png")}


# --- the summary and the grouping by question (analysis/questions.yaml) ----------------------------------------

QUESTIONS = """
questions:
  - title: "Does a norm cure depth?"
    text: "The tiny study."
    studies: [tiny, not_run_yet]
  - title: "Scale"
    studies: [scaling]
findings:
  - title: "Depth"
    link: tiny
    table: tiny/runs.csv
    column: test_acc_last
    where: {num_layers: 8}
    values:
      none: {where: {norm: none}}
      contranorm: {where: {norm: contranorm}}
    sentence: "at 8 layers ContraNorm keeps {contranorm} (± {contranorm.std}), no norm {none} ({none.n} seeds)."
"""


@pytest.fixture
def grouped(tmp_path: Path) -> dict[str, Path]:
    """The tiny sweep without layer metrics (one figure: fast) collected as 'tiny' with a notes.md, a folder of
    tables 'scaling' (a CSV and notes.md), and a questions file listing both."""
    sweep = tiny_sweep_folder(tmp_path / "runs" / "tiny")
    (sweep / "layers.csv").write_text("")
    data, out = tmp_path / "data", tmp_path / "out"
    assert _main("--collect", str(sweep), "--study", "tiny", "--data", str(data), "--out", str(out)) == 0
    notes = "# Why tiny\n\nA narrative.\n\n## Detail\n\n```text\n# not a heading\n```\n"
    (data / "tiny" / "notes.md").write_text(notes)
    (data / "scaling").mkdir()
    (data / "scaling" / "scale.csv").write_text("nodes,epoch_s,peak_gb\n10000,0.0412345,1.23456\n1000000,12.3456,3\n")
    (data / "scaling" / "notes.md").write_text("Epoch time grows linearly in the edges.\n")
    (tmp_path / "questions.yaml").write_text(QUESTIONS)
    return {"data": data, "out": out, "questions": tmp_path / "questions.yaml"}


def _grouped_build(grouped: dict[str, Path], capsys) -> tuple[int, str, str]:
    """Exit code, stderr, and the summary page followed by the question pages (in the summary's order)."""
    capsys.readouterr()
    code = _main("--data", str(grouped["data"]), "--out", str(grouped["out"]), "--questions", str(grouped["questions"]))
    return code, capsys.readouterr().err, "\n".join(_pages(grouped["out"]).values())


def _pages(out: Path) -> dict[str, str]:
    """The results pages under ``out``: README.md, then each question page it links, by path relative to ``out``."""
    summary = (out / "README.md").read_text()
    linked = dict.fromkeys(re.findall(r"\]\((questions/[\w-]+\.md)\)", summary))
    return {"README.md": summary, **{name: (out / name).read_text() for name in linked}}


def test_summary_numbers_are_computed_from_the_data(grouped, capsys):
    code, err, page = _grouped_build(grouped, capsys)
    assert code == 0, err
    runs = pd.read_csv(grouped["data"] / "tiny" / "runs.csv")
    deep = runs[runs["num_layers"] == 8].groupby("norm")["test_acc_last"]
    contranorm, none = deep.mean()["contranorm"], deep.mean()["none"]
    std = deep.std()["contranorm"]
    expected = (
        f"- **[Depth](#tiny)**: at 8 layers ContraNorm keeps {contranorm:.3f} (± {std:.5f}), no norm {none:.3f} "
        "(2 seeds)."
    )  # std 0.0092: three significant digits are five decimals
    expected = expected.replace("(#tiny)", "(questions/does-a-norm-cure-depth.md#tiny)")  # on its question's page
    assert expected in page.split("## Summary")[1].split("## ")[0]
    # The summary comes before the questions, the questions in the file's order, one page each with its studies.
    assert page.index("## Summary") < page.index("# Does a norm cure depth?") < page.index("# Scale")
    assert "- [Does a norm cure depth?](questions/does-a-norm-cure-depth.md)\n- [Scale](questions/scale.md)" in page
    assert sorted(p.name for p in (grouped["out"] / "questions").iterdir()) == ["does-a-norm-cure-depth.md", "scale.md"]
    assert "Not collected yet: `not_run_yet`." in page  # listed, not collected: named, not dropped


def test_study_notes_and_table_folders_are_shown(grouped, capsys):
    code, err, page = _grouped_build(grouped, capsys)
    assert code == 0, err
    tiny = page.split("## tiny")[1].split("## scaling")[0]
    assert "### Why tiny\n\nA narrative.\n\n#### Detail" in tiny  # the notes' headings under the study's
    notes = tiny.index("<summary>Notes</summary>")
    assert notes < tiny.index("### Why tiny") < tiny.index("</details>", notes)  # folded
    assert "```text\n# not a heading\n```" in tiny  # code blocks untouched
    scaling = page.split("## scaling")[1]
    assert "Epoch time grows linearly in the edges." in scaling and "From `scaling/scale.csv`:" in scaling
    assert "| 10000 | 0.0412 | 1.23 |" in scaling and "| 1000000 | 12.3 | 3 |" in scaling  # 3 significant digits
    assert "\n\n\n" not in page  # one blank line between blocks


def test_a_study_no_question_lists_is_an_error(grouped, capsys):
    questions = grouped["questions"]
    questions.write_text(QUESTIONS.replace("studies: [scaling]", "studies: [elsewhere]"))
    code, err, page = _grouped_build(grouped, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "scaling collected under" in err and "listed by no question" in err and str(questions) in err


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("{norm: none}", "{norm: batchnorm}"), ["finding 'Depth', value 'none'", "0 rows", "at least one"]),
        (("table: tiny/runs.csv", "table: gone/runs.csv"), ["gone/runs.csv is not collected"]),
        (("column: test_acc_last", "column: test_mae"), ["has no column 'test_mae'"]),
        (("({none.n} seeds)", "({other} seeds)"), ["names {other}, not one of its values"]),
        (("{norm: none}}", "{norm: none}, aggregate: only}"), ["2 rows", "exactly one"]),
        (("link: tiny", "link: nowhere"), ["links to 'nowhere', not collected"]),
        (("studies: [scaling]", "studies: [scaling, tiny]"), ["lists 'tiny', already listed"]),
        (("{norm: none}}", "{norm: none}, aggregate: median}"), ["aggregate must be one of"]),
        (("findings:", "finding:"), ["unknown top-level key(s) finding"]),
    ],
)
def test_a_finding_without_its_data_is_a_one_line_error(grouped, capsys, change, words):
    """A number the data do not hold never reaches the page; the last page stays."""
    assert _grouped_build(grouped, capsys)[0] == 0
    before = (grouped["out"] / "README.md").read_bytes()
    grouped["questions"].write_text(QUESTIONS.replace(*change))
    code, err, _ = _grouped_build(grouped, capsys)
    assert code == 2 and err.count("\n") == 1 and all(word in err for word in words), err
    assert (grouped["out"] / "README.md").read_bytes() == before


def test_numbers_have_three_significant_digits():
    from graphnorm.sweep.tables import significant

    cases = {0.8019: "0.802", 0.0098: "0.00980", 85.21: "85.2", 8.568e-05: "8.57e-05", 0.69: "0.690", 0.9996: "1.00"}
    assert {value: significant(value) for value in cases} == cases
    assert significant(1234.5) == "1234" and significant(-0.52) == "-0.520" and significant(float("nan")) == ""
    assert [format_cell(text) for text in ("31", "0.69", "1.21-1.63", "", "8.568e-05")] == [
        "31", "0.690", "1.21-1.63", "", "8.57e-05"
    ]  # fmt: skip


def test_layer_axes_tick_whole_layers_only():
    """A 2-layer panel ticks 1 and 2, not 1.2 or 1.4; the depth axis ticks the depths run."""
    from graphnorm.sweep.report import plot_main_metric_vs_depth, plot_metric_vs_layer

    table = pd.DataFrame(
        [{"run_id": f"r{depth}", "layer": layer, "metric": "effective_rank", "value": 3.0 / layer, "label": "none",
          "num_layers": depth, "seed": 0, "dataset": "cora"} for depth in (2, 3) for layer in range(1, depth + 1)]
    )  # fmt: skip
    figure = plot_metric_vs_layer(table, metrics=("effective_rank",))
    for axis in figure.axes:
        ticks = [tick for tick in axis.get_xticks() if axis.get_xlim()[0] <= tick <= axis.get_xlim()[1]]
        assert ticks and all(float(tick).is_integer() for tick in ticks), ticks
    runs = pd.DataFrame({"norm": "none", "num_layers": [2, 8, 32], "seed": 0, "test_acc": [0.8, 0.5, 0.2]})
    axis = plot_main_metric_vs_depth(runs, "test_acc").axes[0]
    assert [tick.get_text() for tick in axis.get_xticklabels()] == ["2", "8", "32"]
    assert not axis.get_xticks(minor=True).size


def _anchors(page: str) -> list[str]:
    """The headings' anchors as GitHub and Python-Markdown make them (code blocks skipped)."""
    anchors, fenced = [], False
    for line in page.splitlines():
        fenced = fenced != line.startswith("```")
        heading = not fenced and re.match(r"#{1,6} (.*)", line)
        if heading:
            anchors.append(re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", heading.group(1).lower()).strip()))
    return anchors


@pytest.mark.parametrize("which", ["committed", "grouped"])
def test_every_link_within_the_page_finds_one_heading(which, request, capsys):
    """The summary's and the questions' links land on a heading of their page, and no two studies or questions of
    a page share one."""
    if which == "committed":
        out = REPO / "analysis"
    else:
        grouped = request.getfixturevalue("grouped")
        code, err, _ = _grouped_build(grouped, capsys)
        assert code == 0, err
        out = grouped["out"]
    pages = _pages(out)
    assert len(pages) > 1
    anchors = {name: set(_anchors(text)) for name, text in pages.items()}
    for name, text in pages.items():
        sections = _anchors("\n".join(line for line in text.splitlines() if re.match(r"#{1,2} ", line)))
        assert len(set(sections)) == len(sections), (name, sorted(a for a in sections if sections.count(a) > 1))
        local = set(re.findall(r"\]\(#([^)]+)\)", text))
        assert not local - anchors[name], (name, sorted(local - anchors[name]))
        for target, anchor in re.findall(r"\]\((questions/[\w-]+\.md)#([^)]+)\)", text):
            assert anchor in anchors[target], (name, target, anchor)
    assert re.search(r"\]\(questions/[\w-]+\.md#", pages["README.md"])  # the summary links into the pages


def test_a_large_layer_table_is_stored_compressed_and_read_back_the_same(tmp_path, monkeypatch):
    """A collected table over the size limit is written as <name>.csv.gz (no timestamp: collecting again writes the
    same bytes) in place of <name>.csv, and the page reads the same rows from it."""
    import collect
    from page import load_studies

    sweep = tiny_sweep_folder(tmp_path / "runs" / "tiny")
    collect.collect_sweep(sweep, "tiny", tmp_path / "plain")
    monkeypatch.setattr(collect, "LARGEST_PLAIN_TABLE", 1000)
    study = collect.collect_sweep(sweep, "tiny", tmp_path / "small")
    assert not (study / "layers.csv").exists() and (study / "layers.csv.gz").stat().st_size < 1000
    first = (study / "layers.csv.gz").read_bytes()
    collect.collect_sweep(sweep, "tiny", tmp_path / "small")
    assert (study / "layers.csv.gz").read_bytes() == first
    plain, compressed = (load_studies(tmp_path / name)[0].layers for name in ("plain", "small"))
    assert len(plain) == 3 * (2 + 8) * 4 and plain.equals(compressed)
    monkeypatch.setattr(collect, "LARGEST_PLAIN_TABLE", 1 << 20)  # small again: back to plain, the .gz removed
    collect.collect_sweep(sweep, "tiny", tmp_path / "small")
    assert (study / "layers.csv").exists() and not (study / "layers.csv.gz").exists()
