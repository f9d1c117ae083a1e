"""The results page (analysis/build.py): collect a sweep folder into tidy tables, build the page from them, the
numbers on the page equal the tables', and two builds give the same bytes."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "analysis" / "build.py"


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
    # The sweep's own metric, mean ± std over the two seeds, as in the collected table.
    runs = pd.read_csv(built["data"] / "tiny" / "runs.csv")
    section = page.split("### cora: test_acc_last")[1].split("###")[0]
    for (norm, depth), values in runs.groupby(["norm", "num_layers"])["test_acc_last"]:
        cell = f"{values.mean():.4g} ± {values.std():.2g} (n=2)"
        row = next(line for line in section.splitlines() if line.startswith(f"| {norm} |"))
        assert cell in row, (norm, depth, row)
    assert "| none | 0.8065 ± 0.0092 (n=2) | 0.3065 ± 0.0092 (n=2) ≤maj |" in section
    assert "majority class (always the most frequent training class): 0.319" in section
    assert "at the last probed layer (gcn: the classifier output" in page
    # Every recorded measurement and every benchmark ratio is on the page, as written in its table.
    recorded = pd.read_csv(built["data"] / "recorded" / "measurements.csv", dtype=str)
    for value in recorded["value"]:
        assert f"| {value} |" in page, value
    ratios = pd.read_csv(built["data"] / "benchmarks" / "ratios.csv", dtype=str)
    for row in ratios.itertuples(index=False):
        assert "| " + " | ".join(row) + " |" in page
    assert "0.489 ± 0.007 (n=3)" in page  # ZINC SepNorm, mean over seeds 0-2 as recorded (0.483, 0.487, 0.497)


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
    """analysis/README.md is what the build writes from analysis/data/ (figures are compared by name only: their
    bytes depend on matplotlib's version and fonts)."""
    result = _build("--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "README.md").read_text() == (REPO / "analysis" / "README.md").read_text()
    built = {p.name for p in (tmp_path / "figures").glob("*.png")}
    assert built == {p.name for p in (REPO / "analysis" / "figures").glob("*.png")}
