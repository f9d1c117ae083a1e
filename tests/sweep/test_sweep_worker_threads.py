"""A local sweep finishes whatever its workers x threads: workers fork from a forkserver, and a process forked after
OpenMP started its thread team waits forever at its first parallel region (GNU OpenMP is not fork-safe). The
forkserver must therefore never start a team: it stays on one torch thread while it preloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TESTS = Path(__file__).resolve().parents[1]
TIMEOUT_S = 240  # a hang shows as this timeout; a healthy sweep of these runs takes seconds beyond torch's import

SWEEP = {
    "name": "threads",
    "metric": "test_acc",
    "base": {"dataset": "cora"},
    "grid": {"norm": ["none"], "num_layers": [2], "seed": [0, 1]},
}


def test_forkserver_preload_starts_no_openmp_team():
    """Imported as the forkserver imports it, the preload leaves no OpenMP worker thread behind: the process holds
    only the threads it had after its imports (the BLAS pools, which fork safely)."""
    code = (
        "import os, torch, graphnorm.train.loop\n"
        "before = len(os.listdir('/proc/self/task'))\n"
        "import graphnorm.sweep.preload\n"
        "print(before, len(os.listdir('/proc/self/task')), torch.get_num_threads())\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "2"}  # a team would have a thread beside the main one
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode == 0, out.stderr
    before, after, _threads = map(int, out.stdout.split())
    assert after == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("executor", "workers", "threads", "seeds"),
    [
        ("local", 1, 1, [0, 1]),
        ("local", 1, 2, [0, 1]),
        ("local", 2, 2, [0, 1]),  # oversubscribed on two cores
        ("local", None, 2, [0]),  # a one-run sweep: one worker, all threads
        ("serial", None, 2, [0, 1]),
        ("submitit-local", 1, 2, [0]),
    ],
    ids=["local-1x1", "local-1x2", "local-2x2", "local-one-run", "serial", "submitit-local"],
)
def test_sweep_finishes_for_every_workers_x_threads(tmp_path: Path, executor, workers, threads, seeds):
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({**SWEEP, "grid": {**SWEEP["grid"], "seed": seeds}}))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "graphnorm.cli", "sweep", str(config), "--out", str(out), "--no-plots"]
    command += ["--run-fn", "sweep_run_fns:threaded_run", "--executor", executor, "--threads", str(threads)]
    command += ["--workers", str(workers)] if workers else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path)
    except subprocess.TimeoutExpired as e:
        subprocess.run(["pkill", "-f", str(out)], check=False)
        pytest.fail(f"the sweep hung ({TIMEOUT_S} s): {e.stdout!r}")
    assert done.returncode == 0, done.stdout + done.stderr
    results = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert sorted(r["config"]["seed"] for r in results) == seeds
    for result in results:
        assert result["status"] == "ok", result
        assert result["record"]["threads"] == threads
