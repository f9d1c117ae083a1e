"""Sweep engine: grid expansion, validation before any run, executors, failure recording, interrupt and resume.

The engine's mechanics are tested with ``sweep_run_fns.fake_run``, a small real run function whose behaviour is
steered by environment variables (so it behaves the same in worker processes and submitit jobs); one test runs the real
``graphnorm.train.run`` on Cora.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from sweep_run_fns import EXIT_ENV, FAIL_ENV, FAKE_SLEEP_ENV, LOG_ENV, SWEEP, executions, fake_run

from graphnorm.config import RunConfig, apply_overrides, config_run_id
from graphnorm.files import atomic_write_text
from graphnorm.sweep import expand_grid, load_sweep_config, run_sweep
from graphnorm.sweep.tables import summary_table

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "executions.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    return log


def test_expand_grid_order_norm_settings_and_stable_ids():
    configs = expand_grid(SWEEP)
    assert len(configs) == 8
    assert [(c.norm, c.num_layers, c.seed) for c in configs[:3]] == [("none", 2, 0), ("none", 2, 1), ("none", 4, 0)]
    assert all(c.epochs == 3 and c.hidden_channels == 8 for c in configs)
    assert {c.norm: c.norm_kwargs for c in configs} == {"none": {}, "pairnorm": {"scale": 2.0}}
    ids = [config_run_id(c) for c in configs]
    assert len(set(ids)) == 8 and ids == [config_run_id(c) for c in expand_grid(SWEEP)]
    assert ids[0].startswith("none-L2-s0-")
    # Any config change gives another id; data_root (where the data lives) does not.
    assert config_run_id(RunConfig(lr=0.02)) != config_run_id(RunConfig())
    assert config_run_id(RunConfig(data_root="/elsewhere")) == config_run_id(RunConfig())


def test_exclude_leaves_out_the_matching_points_and_keeps_the_others_ids():
    full = {(c.norm, c.num_layers, c.seed): config_run_id(c) for c in expand_grid(SWEEP)}
    # the deep layer's second seed, for every norm; a single value is a list of one
    kept = expand_grid({**SWEEP, "exclude": [{"num_layers": [4], "seed": 1}]})
    points = {(c.norm, c.num_layers, c.seed): config_run_id(c) for c in kept}
    assert set(full) - set(points) == {("none", 4, 1), ("pairnorm", 4, 1)}
    assert all(full[point] == run_id for point, run_id in points.items())  # the other runs' ids do not change
    # entries are alternatives: a point matching either one is left out
    kept = expand_grid({**SWEEP, "exclude": [{"norm": "none", "num_layers": [2]}, {"norm": ["pairnorm"], "seed": 0}]})
    assert sorted((c.norm, c.num_layers, c.seed) for c in kept) == [
        ("none", 4, 0),
        ("none", 4, 1),
        ("pairnorm", 2, 1),
        ("pairnorm", 4, 1),
    ]


def test_overrides_from_yaml(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(SWEEP))  # JSON is YAML
    sweep = load_sweep_config(path, ["base.epochs=50", "grid.seed=[0, 1, 2]", "norm_settings.pairnorm.lr=0.005"])
    assert sweep["base"]["epochs"] == 50 and sweep["grid"]["seed"] == [0, 1, 2]
    configs = expand_grid(sweep)
    assert len(configs) == 12
    assert {c.lr for c in configs if c.norm == "pairnorm"} == {0.005}
    assert apply_overrides({"a": {"b": 1}}, ["a.c.d=x"]) == {"a": {"b": 1, "c": {"d": "x"}}}
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides({}, ["base.epochs"])
    with pytest.raises(ValueError, match="not a mapping"):
        apply_overrides({"base": {"epochs": 3}}, ["base.epochs.x=1"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base": {"epochz": 3}}, r"unknown config key\(s\) \['epochz'\] in 'base'"),
        ({"grid": {"norm": ["none", "nosuchnorm"]}}, r"norm=.nosuchnorm.*unknown norm 'nosuchnorm'"),
        ({"grid": {"num_layers": [2, 0]}}, r"num_layers=0.*num_layers must be >= 1"),
        ({"base": {"dropout": -0.1}}, "dropout must be in"),
        ({"grid": {"seed": []}}, "grid.seed is an empty list"),
        ({"grid": {"seed": [0, 0]}}, "duplicates"),
        ({"gird": {"seed": [0]}}, r"unknown sweep key\(s\) \['gird'\]"),
        ({"norm_settings": {"pairnrom": {"lr": 0.1}}}, "unknown norm 'pairnrom'"),
        ({"norm_settings": {"pairnorm": {"seed": 3}}}, "which the grid varies"),
        ({"norm_settings": {"pairnorm": {"norm_kwargs": {"scael": 1}}}}, r"unknown norm_kwargs \['scael'\]"),
        ({"exclude": {"seed": [1]}}, "'exclude' must be a list of mappings"),
        ({"exclude": [{}]}, r"exclude\[0\] must be a non-empty mapping"),
        ({"exclude": [{"lr": [0.1]}]}, r"exclude\[0\] names \['lr'\], which the grid does not vary"),
        ({"exclude": [{"seed": [0, 1]}]}, "leaves out every grid point"),
    ],
)
def test_invalid_sweeps_fail_before_any_run(tmp_path: Path, run_log: Path, change: dict, message: str):
    sweep = {**SWEEP, **change}
    with pytest.raises(ValueError, match=message):
        run_sweep(sweep, tmp_path / "out", run_fn=fake_run, executor="serial", make_plots=False)
    assert executions(run_log) == []
    assert not (tmp_path / "out").exists()


def test_serial_sweep_records_failure_and_writes_tidy_tables(tmp_path, run_log, monkeypatch, capsys):
    monkeypatch.setenv(FAIL_ENV, "pairnorm")
    out = tmp_path / "out"
    runs = run_sweep(SWEEP, out, run_fn=fake_run, executor="serial", make_plots=False)
    assert len(executions(run_log)) == 8
    assert list(runs["status"]) == ["ok"] * 4 + ["failed"] * 4
    failed = runs[runs.status == "failed"]
    assert failed["error"].str.contains("RuntimeError: deliberate failure of pairnorm").all()
    result = json.loads((out / "results" / f"{failed.run_id.iloc[0]}.json").read_text())
    assert "Traceback" in result["traceback"] and "fake_run" in result["traceback"]
    assert "training output" in (out / "logs" / f"{failed.run_id.iloc[0]}.log").read_text()

    on_disk = pd.read_csv(out / "runs.csv")
    assert len(on_disk) == 8 and on_disk.run_id.is_unique
    assert on_disk.loc[on_disk.norm == "pairnorm", "norm_kwargs"].map(json.loads).tolist() == [{"scale": 2.0}] * 4
    ok = on_disk[on_disk.status == "ok"]
    assert ok.test_acc.tolist() == pytest.approx([0.78, 0.79, 0.76, 0.77])
    layers = pd.read_csv(out / "layers.csv")
    assert list(layers.columns) == ["run_id", "layer", "layer_name", "rows", "metric", "value"]
    assert len(layers) == 2 * (2 + 4)  # the two seeds of the ok runs at depths 2 and 4
    assert set(layers.run_id) == set(ok.run_id)
    assert (out / "sweep.yaml").exists() and "none" in (out / "summary.md").read_text()
    assert not list(out.rglob("*.tmp"))

    # Failed runs are not re-run unless asked; --retry-failed re-runs exactly them.
    monkeypatch.delenv(FAIL_ENV)
    run_sweep(SWEEP, out, run_fn=fake_run, executor="serial", make_plots=False)
    assert len(executions(run_log)) == 8
    runs = run_sweep(SWEEP, out, run_fn=fake_run, executor="serial", make_plots=False, retry_failed=True)
    assert executions(run_log)[8:] == [f"pairnorm,{d},{s}" for d in (2, 4) for s in (0, 1)]
    assert (runs.status == "ok").all() and len(pd.read_csv(out / "runs.csv")) == 8
    assert "0.785 ± 0.007" in capsys.readouterr().out  # none at depth 2: seeds 0.78 and 0.79


def test_serial_sweep_gives_its_caller_the_torch_threads_back(tmp_path, run_log):
    """The serial executor runs in the caller's process with the plan's threads, then restores the caller's."""
    import torch

    seen = []

    def run_seeing_threads(config: RunConfig) -> dict:
        seen.append(torch.get_num_threads())
        return fake_run(config)

    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        run_sweep(SWEEP, tmp_path / "out", run_fn=run_seeing_threads, executor="serial", threads=1, make_plots=False)
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_summary_table_mean_std_by_norm_and_depth():
    runs = pd.DataFrame(
        {
            "norm": ["b", "b", "a", "a", "a", "b"],
            "num_layers": [2, 2, 2, 2, 16, 16],
            "seed": [0, 1, 0, 1, 0, 0],
            "test_acc": [0.5, 0.7, 0.8, 0.8, 0.3, 0.0],
            "status": ["ok", "ok", "ok", "ok", "ok", "failed"],
        }
    )
    table = summary_table(runs, "test_acc")
    assert list(table.index) == ["b", "a"] and list(table.columns) == [2, 16]
    assert table.loc["b", 2] == "0.600 ± 0.141"
    assert table.loc["a", 2] == "0.800 ± 0.000"
    assert table.loc["a", 16] == "0.300"
    assert table.loc["b", 16] == ""  # its only run failed
    with pytest.raises(ValueError, match="metric 'test_mae'"):
        summary_table(runs, "test_mae")


def test_atomic_write_keeps_old_file_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "runs.csv"
    atomic_write_text(path, "a,b\n1,2\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, "a,b\n3,")
    assert path.read_text() == "a,b\n1,2\n"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


@pytest.mark.slow
def test_local_process_pool_runs_in_parallel_workers(tmp_path: Path, run_log: Path, monkeypatch: pytest.MonkeyPatch):
    # Runs that take a moment: an instant run lets the first worker finish all four before the second has started
    # (seen twice in full suite runs), which says nothing about the pool.
    monkeypatch.setenv(FAKE_SLEEP_ENV, "0.5")
    sweep = {**SWEEP, "grid": {"norm": ["none"], "num_layers": [2, 4], "seed": [0, 1]}}
    runs = run_sweep(sweep, tmp_path / "out", run_fn=fake_run, executor="local", workers=2, make_plots=False)
    assert len(runs) == 4 and (runs.status == "ok").all()
    pids = set(runs.worker_pid)
    assert len(pids) == 2 and os.getpid() not in pids
    assert len(executions(run_log)) == 4


def test_pool_start_method_spawns_when_a_run_will_use_cuda(monkeypatch: pytest.MonkeyPatch):
    """Forking after the CUDA driver was asked for its devices leaves the child without CUDA, so a sweep with a run
    on CUDA spawns its workers; a sweep on the CPU keeps the forkserver (workers start with torch loaded)."""
    import torch

    from graphnorm.sweep.runner import pool_start_method

    cpu, auto, cuda = (RunConfig.from_dict({"device": d}, check_device=False) for d in ("cpu", "auto", "cuda"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pool_start_method([cpu, cpu]) == pool_start_method([cpu, auto]) == "forkserver"
    assert pool_start_method([cpu, cuda]) == "spawn"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pool_start_method([cpu, auto]) == "spawn"


@pytest.mark.slow
def test_spawned_workers_run_a_sweep(tmp_path: Path, run_log: Path, monkeypatch: pytest.MonkeyPatch):
    # As where CUDA is available for device "auto" (the runs here still run on the CPU): the workers are spawned,
    # fresh interpreters that unpickle fake_run by importing this module from tests/.
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(FAKE_SLEEP_ENV, "0.5")
    sweep = {**SWEEP, "base": {**SWEEP["base"], "device": "auto"}, "grid": {"norm": ["none"], "seed": [0, 1]}}
    runs = run_sweep(sweep, tmp_path / "out", run_fn=fake_run, executor="local", workers=2, make_plots=False)
    assert len(runs) == 2 and (runs.status == "ok").all()
    assert os.getpid() not in set(runs.worker_pid)
    assert len(executions(run_log)) == 2


@pytest.mark.slow
def test_workers_see_the_drivers_environment_of_each_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Workers fork from one forkserver per driver process, started by the first sweep: a second sweep in the same
    process (a notebook, a test session) must still hand its workers the environment it has now."""
    sweep = {**SWEEP, "grid": {"norm": ["none"], "num_layers": [2], "seed": [0, 1]}}
    for index in (1, 2):
        log = tmp_path / f"executions_{index}.log"
        monkeypatch.setenv(LOG_ENV, str(log))
        run_sweep(sweep, tmp_path / f"out_{index}", run_fn=fake_run, executor="local", workers=2, make_plots=False)
        assert len(executions(log)) == 2, f"sweep {index}: its workers did not see {LOG_ENV}={log}"


@pytest.mark.slow
def test_submitit_local_executor(tmp_path: Path, run_log: Path, monkeypatch: pytest.MonkeyPatch):
    # submitit jobs are fresh interpreters: they unpickle fake_run by importing this module from tests/.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(EXIT_ENV, "pairnorm")
    from submitit.core.core import Job

    # submitit waits this long for a dead job's result file to show up on a slow network filesystem; tmp_path is
    # local, so a job that died is reported at once (submitit's own tests do the same).
    monkeypatch.setattr(Job, "_results_timeout_s", 0)
    sweep = {**SWEEP, "grid": {"norm": ["none", "pairnorm"], "num_layers": [2], "seed": [0]}}
    out = tmp_path / "out"
    runs = run_sweep(sweep, out, run_fn=fake_run, executor="submitit-local", workers=2, make_plots=False)
    assert runs.status.tolist() == ["ok", "failed"]
    # The pairnorm job died before it could write its result: the sweep records it for the job.
    assert runs.error.iloc[1].startswith("job ") and " died: " in runs.error.iloc[1]
    assert os.getpid() not in set(runs.worker_pid.dropna())
    assert len(executions(run_log)) == 2
    assert list((out / "submitit").iterdir())  # the jobs' submitit folders


@pytest.mark.slow
def test_killed_sweep_resumes_running_only_missing_runs(tmp_path: Path, run_log: Path):
    # The real command line in a subprocess (python -m graphnorm), killed with SIGKILL after some runs finished.
    out = tmp_path / "out"
    config = tmp_path / "sweep.yaml"
    config.write_text(json.dumps(SWEEP))
    command = [sys.executable, "-m", "graphnorm", "sweep", str(config), "--out", str(out), "--executor", "serial"]
    command += ["--run-fn", "sweep_run_fns:fake_run", "--no-plots"]
    pythonpath = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])  # so jobs can import fake_run
    env = {**os.environ, FAKE_SLEEP_ENV: "0.4", "PYTHONPATH": pythonpath}
    proc = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while len(list((out / "results").glob("*.json"))) < 3:
            assert proc.poll() is None, "the sweep ended before it could be interrupted"
            assert time.monotonic() < deadline, "the sweep made no progress"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = {p.stem for p in (out / "results").glob("*.json")}
    assert 3 <= len(finished) < 8
    assert len(executions(run_log)) <= len(finished) + 1  # at most one run was cut off mid-way
    partial = pd.read_csv(out / "runs.csv")  # never a torn file, whenever the kill came
    assert set(partial.run_id) <= finished

    before = len(executions(run_log))
    runs = run_sweep(SWEEP, out, run_fn=fake_run, executor="serial", make_plots=False)
    assert len(executions(run_log)) - before == 8 - len(finished)  # only the missing ones ran
    on_disk = pd.read_csv(out / "runs.csv")
    assert len(on_disk) == 8 and on_disk.run_id.is_unique and (on_disk.status == "ok").all()
    assert set(on_disk.run_id) == {config_run_id(c) for c in expand_grid(SWEEP)} == set(runs.run_id)
    assert len(pd.read_csv(out / "layers.csv")) == 4 * (2 + 4)

    # A complete sweep runs nothing more.
    run_sweep(SWEEP, out, run_fn=fake_run, executor="serial", make_plots=False)
    assert len(executions(run_log)) - before == 8 - len(finished)


def test_real_training_run_on_cora(tmp_path: Path, data_root: Path):
    sweep = {
        "name": "real",
        "base": {"dataset": "cora", "epochs": 2, "hidden_channels": 8},
        "grid": {"norm": ["none", "pairnorm"], "num_layers": [2]},
    }
    runs = run_sweep(sweep, tmp_path / "out", executor="serial", make_plots=False)
    assert (runs.status == "ok").all(), runs.error.tolist()
    assert runs.test_acc.between(0, 1).all() and runs.val_acc.between(0, 1).all()
    assert (tmp_path / "out" / "summary.md").read_text().count("|") > 4
    epochs = pd.read_csv(tmp_path / "out" / "epochs.csv")  # the learning curves: one row per run and epoch
    assert list(epochs.columns[:2]) == ["run_id", "epoch"] and {"train_loss", "val_acc", "test_acc"} <= set(epochs)
    assert sorted(epochs.groupby("run_id").epoch.apply(list).tolist()) == [[0, 1], [0, 1]]
    last = epochs[epochs.epoch == 1].set_index("run_id")
    assert (last.test_acc == runs.set_index("run_id").test_acc_last).all()


def test_run_id_hashes_only_non_default_values() -> None:
    """Adding a config key with a default (a new graphnorm version) must not change the ids of existing runs."""
    import hashlib

    config = RunConfig(norm="pairnorm", num_layers=8, epochs=200, checkpoint_dir="/anywhere")
    expected = hashlib.sha1(json.dumps({"norm": "pairnorm", "num_layers": 8}, sort_keys=True).encode()).hexdigest()
    assert config_run_id(config) == f"pairnorm-L8-s0-{expected[:10]}"
    assert config_run_id(RunConfig(lr=1)) == config_run_id(RunConfig(lr=1.0)) != config_run_id(RunConfig())
