"""The leaderboard end to end on a tiny protocol, in seconds: tuning on validation, the grid with the chosen knobs,
the tidy one-row-per-run table the statistics read, a resumed run that runs nothing, the page, and a cell re-run
with its listed command giving the recorded values."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from analysis.leaderboard.cell import cell_protocol, rerun_cell  # noqa: E402
from analysis.leaderboard.page import build_leaderboard  # noqa: E402
from analysis.leaderboard.run import Execution, run_tier  # noqa: E402
from analysis.leaderboard.statistics import RUN_COLUMNS, cell_summary  # noqa: E402
from analysis.leaderboard.tables import COLLAPSE_COLUMNS, ok_runs, read_runs  # noqa: E402

TINY = """
families:
  node:
    reference_depth: 2
    tuning_replicates: 1
    depths: [1, 2]
    base: {hidden_channels: 8, dropout: 0.0, lr: 0.02, weight_decay: 0.0, epochs: 3, patience: 2}
    hosts:
      deepgcn: {model: gcn}
    graphs:
      tiny_csbm:
        family: homophilic
        dataset: csbm
        dataset_kwargs: {num_nodes: 40, homophily: 0.9, feature_snr: 1.0, train_fraction: 0.25, val_fraction: 0.25}
        seeds: [0, 1]
norms: [none, pairnorm, layernorm, sepnorm]
knobs:
  pairnorm: {scale: [0.1, 1.0]}
norm_kwargs:
  pairnorm: {mode: PN}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, data_root, one_thread) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("leaderboard")
    (root / "protocol.yaml").write_text(TINY)
    paths = {"protocol": root / "protocol.yaml", "runs": root / "runs", "results": root / "results"}
    messages: list[str] = []
    execution = Execution("serial", threads=1, log=messages.append)
    paths["table"] = run_tier("full", execution, paths["runs"], paths["results"], paths["protocol"])
    paths["messages"] = messages
    return paths


def test_the_tidy_table_has_one_row_per_run_and_the_statistics_read_it(tiny):
    runs = read_runs(tiny["table"])
    assert list(runs.columns[: len(RUN_COLUMNS) + 3]) == [*RUN_COLUMNS, *COLLAPSE_COLUMNS]
    assert len(runs) == 4 * 2 * 2  # 4 norms x 2 depths x 2 seeds
    assert not runs.duplicated(["host", "graph", "depth", "norm", "seed"]).any()
    ok = ok_runs(runs)
    assert set(ok["norm"]) == {"none", "pairnorm", "layernorm"} and len(ok) == 12
    assert ok[["value", *COLLAPSE_COLUMNS, "cpu_s"]].notna().all().all()
    assert (ok["cpu"] == torch.backends.cpu.get_cpu_capability()).all()  # the kind of CPU each run was recorded on
    sepnorm = runs[runs["norm"] == "sepnorm"]
    assert set(sepnorm["status"]) == {"cannot run"} and sepnorm["reason"].str.contains("graph-token rows").all()
    summary = cell_summary(ok)
    assert len(summary) == 3 * 2 and (summary["n"] == 2).all()


def test_the_budget_sums_the_recorded_cpu_of_tuning_and_grid_runs(tiny):
    budget = pd.read_csv(tiny["results"] / "full_budget.csv")
    assert budget["part"].tolist() == ["node"] and math.isnan(budget["estimated_cpu_h"].iloc[0])  # no timings here
    runs = read_runs(tiny["table"])
    row = budget.iloc[0]
    assert row["spent_grid_cpu_h"] == pytest.approx(ok_runs(runs)["cpu_s"].sum() / 3600)
    tuning = [json.loads(p.read_text())["record"]["cpu_s"] for p in (tiny["runs"] / "full" / "tune").rglob("*.json")
              if p.parent.name == "results"]  # fmt: skip
    assert len(tuning) == 2 and row["spent_tuning_cpu_h"] == pytest.approx(sum(tuning) / 3600)
    assert row["spent_cpu_h"] == pytest.approx(row["spent_tuning_cpu_h"] + row["spent_grid_cpu_h"])
    assert (row["runs_ended"], row["runs_planned"]) == (12, 12)  # sepnorm cannot run: not planned


def test_knobs_are_chosen_on_validation_once_and_used_in_the_grid(tiny):
    knobs = pd.read_csv(tiny["results"] / "full_knobs.csv")
    assert list(knobs["norm"]) == ["pairnorm", "pairnorm"] and knobs["chosen"].sum() == 1
    assert set(knobs["val_metric"]) == {"val_acc"}
    chosen = knobs.loc[knobs["chosen"], "norm_kwargs"].iloc[0]
    runs = read_runs(tiny["table"])
    assert set(runs.loc[runs["norm"] == "pairnorm", "norm_kwargs"]) == {chosen}


def test_a_second_run_resumes_and_runs_nothing(tiny):
    before = sorted(p.name for p in tiny["runs"].rglob("results/*.json"))
    messages: list[str] = []
    run_tier(
        "full", Execution("serial", threads=1, log=messages.append), tiny["runs"], tiny["results"], tiny["protocol"]
    )
    assert sorted(p.name for p in tiny["runs"].rglob("results/*.json")) == before
    started = [m for m in messages if " to run -> " in m]
    assert started and all(", 0 to run -> " in m for m in started)


def test_collect_only_writes_the_same_table_and_runs_nothing(tiny, tmp_path):
    messages: list[str] = []
    execution = Execution("serial", threads=1, log=messages.append, collect_only=True)
    table = run_tier("full", execution, tiny["runs"], tmp_path / "results", tiny["protocol"])
    assert not [m for m in messages if " to run -> " in m]
    names = sorted(path.name for path in table.glob("*.csv"))
    assert names == sorted(path.name for path in tiny["table"].glob("*.csv")) == ["node_deepgcn.csv"]
    assert all((table / name).read_text() == (tiny["table"] / name).read_text() for name in names)
    with pytest.raises(ValueError, match="tier full has no host deepgnc; valid: deepgcn"):
        run_tier("full", Execution("serial", only_hosts=["deepgnc"]), tiny["runs"], tmp_path, tiny["protocol"])


def fresh_clone_run(tiny, results: Path, runs: Path) -> list[str]:
    """``run`` on a clone: the committed tables of ``results``, no sweep folders (``runs`` empty); its messages."""
    messages: list[str] = []
    run_tier("full", Execution("serial", threads=1, log=messages.append), runs, results, tiny["protocol"])
    return messages


def test_a_fresh_clone_runs_nothing_the_committed_tables_record(tiny, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tiny["results"], results)
    messages = fresh_clone_run(tiny, results, tmp_path / "runs")
    assert not list((tmp_path / "runs").rglob("*.json"))
    assert not [m for m in messages if " to run -> " in m]
    assert any("every run recorded in the committed table" in m for m in messages)
    for name in ["full/node_deepgcn.csv", "full_knobs.csv", "full_budget.csv"]:
        assert (results / name).read_text() == (tiny["results"] / name).read_text(), name


def test_a_fresh_clone_runs_only_what_the_committed_tables_miss(tiny, tmp_path):
    """A grid run the committed table lacks runs (and gives its value again); a tuning sweep whose committed rows
    stand for other runs (another protocol) is tuned again; nothing else runs."""
    results = tmp_path / "results"
    shutil.copytree(tiny["results"], results)
    table = results / "full" / "node_deepgcn.csv"
    runs = pd.read_csv(table)
    missing = (runs["norm"] == "pairnorm") & (runs["depth"] == 2) & (runs["seed"] == 1)
    runs[~missing].to_csv(table, index=False)
    knobs = pd.read_csv(results / "full_knobs.csv")
    knobs.loc[0, "run_ids"] = "pairnorm-L2-s0-0000000000"
    knobs.to_csv(results / "full_knobs.csv", index=False)
    fresh_clone_run(tiny, results, tmp_path / "runs")
    ran = sorted(p.parent.parent.name for p in (tmp_path / "runs").rglob("results/*.json"))
    assert ran == ["node_deepgcn_tiny_csbm", "node_deepgcn_tiny_csbm_pairnorm", "node_deepgcn_tiny_csbm_pairnorm"]
    again, before = read_runs(results / "full"), read_runs(tiny["table"])
    assert len(again) == len(before) and (again["status"] == before["status"]).all()
    assert again["value"].tolist() == pytest.approx(before["value"].tolist(), rel=1e-6, nan_ok=True)
    assert pd.read_csv(results / "full_knobs.csv")["run_ids"].tolist() == (
        pd.read_csv(tiny["results"] / "full_knobs.csv")["run_ids"].tolist()
    )


def test_tuning_cpu_from_before_the_knob_table_kept_it_is_carried(tiny, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tiny["results"], results)
    budget = pd.read_csv(results / "full_budget.csv")
    itemized = budget.loc[0, "spent_tuning_cpu_h"]
    budget.assign(spent_tuning_cpu_h=1.5).drop(columns="unitemized_tuning_cpu_h").to_csv(
        results / "full_budget.csv", index=False
    )
    for _ in range(2):  # the carried total stays the same from one budget file to the next
        fresh_clone_run(tiny, results, tmp_path / "runs")
        row = pd.read_csv(results / "full_budget.csv").iloc[0]
        assert row["unitemized_tuning_cpu_h"] == 1.5
        assert row["spent_tuning_cpu_h"] == pytest.approx(1.5 + itemized)


def test_the_page_builds_from_the_table(tiny, tmp_path):
    page = build_leaderboard(tmp_path, tiny["results"], tier="full", protocol_path=tiny["protocol"]).read_text()
    assert page.startswith("# Norm leaderboard\n")
    assert '<div class="gn-leaderboard" markdown="1">' in page
    assert "## Which norm at depth L" in page and "At 2 layers on homophilic graphs" in page
    rows = [line for line in page.splitlines() if line.startswith("| tiny_csbm |")]
    assert len(rows) == 4 * 2  # one row per cell, sepnorm's with its reason
    assert any("sepnorm needs graph-token rows" in row for row in rows if "| sepnorm |" in row)
    assert "python -m experiments.leaderboard cell --tier full --host deepgcn --graph tiny_csbm" in page
    assert (tmp_path / "figures" / "leaderboard_ranks.png").exists()
    assert (tmp_path / "figures" / "leaderboard_cd_2.png").exists()


def test_a_cell_rerun_gives_the_recorded_values(tiny, capsys):
    args = argparse.Namespace(tier="full", host="deepgcn", graph="tiny_csbm", norm="pairnorm", depth=2, seed=[1],
                              runs=str(tiny["runs"] / "again"), executor="serial", workers=None, threads=1)  # fmt: skip
    assert rerun_cell(args, tiny["results"], tiny["protocol"]) == 0
    out = capsys.readouterr().out
    assert "seed 1:" in out and "same" in out and "1 of 1 recorded seeds give the recorded value" in out


def test_a_cell_rerun_without_a_recorded_value_says_so_and_fails(tiny, tmp_path, capsys):
    """A seed the grid has not recorded is not 'DIFFERS' (nor a pass): nothing to compare with, exit status 1."""
    results = tmp_path / "results"
    shutil.copytree(tiny["results"], results)
    for table in (results / "full").glob("*.csv"):
        runs = pd.read_csv(table)
        unrecorded = (runs["norm"] == "pairnorm") & (runs["depth"] == 2) & (runs["seed"] == 1)
        runs[~unrecorded].to_csv(table, index=False)
    args = argparse.Namespace(tier="full", host="deepgcn", graph="tiny_csbm", norm="pairnorm", depth=2, seed=[1],
                              runs=str(tmp_path / "again"), executor="serial", workers=None, threads=1)  # fmt: skip
    assert rerun_cell(args, results, tiny["protocol"]) == 1
    out = capsys.readouterr().out
    assert "seed 1:" in out and "not recorded: nothing to compare with yet" in out and "DIFFERS" not in out
    assert "0 of 0 recorded seeds give the recorded value; 1 not recorded yet" in out


@pytest.mark.parametrize("recorded_cpu", ["", "SAME", "AVX512_OTHER"])
def test_a_cell_rerun_that_differs_says_whether_another_cpu_kind_recorded_it(tiny, tmp_path, capsys, recorded_cpu):
    cpu = torch.backends.cpu.get_cpu_capability()
    results = tmp_path / "results"
    shutil.copytree(tiny["results"], results)
    table = results / "full" / "node_deepgcn.csv"
    runs = pd.read_csv(table)
    cell = (runs["norm"] == "pairnorm") & (runs["depth"] == 2) & (runs["seed"] == 1)
    runs.loc[cell, "value"] += 0.01
    runs.loc[cell, "cpu"] = cpu if recorded_cpu == "SAME" else recorded_cpu
    runs.to_csv(table, index=False)
    args = argparse.Namespace(tier="full", host="deepgcn", graph="tiny_csbm", norm="pairnorm", depth=2, seed=[1],
                              runs=str(tmp_path / "again"), executor="serial", workers=None, threads=1)  # fmt: skip
    assert rerun_cell(args, results, tiny["protocol"]) == 1
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("seed 1:"))
    expected = {
        "": f"DIFFERS: recorded on a CPU kind the table did not record, re-run on {cpu}",
        "SAME": "DIFFERS",
        "AVX512_OTHER": f"DIFFERS: recorded on AVX512_OTHER, re-run on {cpu}; another CPU kind rounds differently",
    }[recorded_cpu]
    assert line.endswith(expected) if recorded_cpu == "SAME" else expected in line


def test_a_cell_runs_the_replicates_its_depth_runs_in_the_grid():
    _, part = cell_protocol("full", "deepgcn", "texas", [], 64)
    assert part.graphs["texas"].replicates == [0, 1, 2] and part.deep_depths == []
    assert cell_protocol("full", "deepgcn", "texas", [3], 16)[1].graphs["texas"].replicates == [3]
    with pytest.raises(ValueError, match=r"texas at 64 layers runs the replicates \[0, 1, 2\]; asked for \[3\]"):
        cell_protocol("full", "deepgcn", "texas", [3], 64)
    with pytest.raises(ValueError, match="the grid has no depth 7"):
        cell_protocol("full", "deepgcn", "texas", [], 7)
