"""A sweep's CPU plan reaches its runs: workers x torch threads from graphnorm.sweep.cpu_budget, on a faked machine
(affinity, load average, environment: what the driver reads), with runs that report the threads they ran with."""

from __future__ import annotations

import os

import pytest
import torch

from graphnorm.config import RunConfig
from graphnorm.sweep import cpu_budget, run_sweep

SWEEP = {"name": "cpu", "base": {"dataset": "cora", "epochs": 1}, "grid": {"seed": [0]}}


def threads_run(config: RunConfig) -> dict:
    """Reports the torch threads and the process it ran in."""
    wait_policy = os.environ.get("OMP_WAIT_POLICY")
    return {"test_acc": 0.5, "torch_threads": torch.get_num_threads(), "worker_pid": os.getpid(), "wait": wait_policy}


@pytest.fixture(autouse=True)
def fresh_forkserver():
    """Stop the forkserver a local sweep here started: workers fork from it with the environment it started with,
    so a later test's sweep would miss the environment variables that test sets."""
    yield
    import multiprocessing.forkserver

    multiprocessing.forkserver._forkserver._stop()  # CPython's own tests' way; no public one


@pytest.fixture
def two_cores(monkeypatch):
    """A 2-core machine whose load average is ``set_load(value)``."""
    monkeypatch.setattr(cpu_budget.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(cpu_budget.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_budget, "quota_cores", lambda: None)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv(cpu_budget.ENV_THREADS, raising=False)

    def set_load(value: float) -> None:
        monkeypatch.setattr(cpu_budget.os, "getloadavg", lambda: (value, value, value))

    return set_load


def _sweep(tmp_path, seeds, **kwargs) -> tuple[list[int], list[str]]:
    lines: list[str] = []
    sweep = {**SWEEP, "grid": {"seed": list(range(seeds))}}
    runs = run_sweep(sweep, tmp_path / "out", run_fn=threads_run, make_plots=False, log=lines.append, **kwargs)
    assert (runs.status == "ok").all()
    if kwargs.get("executor") == "local":  # workers wait passively unless the user chose a policy
        assert set(runs.wait) == {os.environ.get("OMP_WAIT_POLICY") or "PASSIVE"}
    return runs.torch_threads.tolist(), lines


@pytest.mark.slow
def test_one_run_on_a_quiet_machine_gets_every_core(tmp_path, two_cores):
    two_cores(0.1)
    threads, lines = _sweep(tmp_path, 1, executor="local")
    assert threads == [2]
    assert any(line.startswith("1 worker(s) x 2 torch thread(s)") for line in lines)


@pytest.mark.slow
def test_busy_machine_and_many_runs_get_one_thread_per_run(tmp_path, two_cores):
    two_cores(1.5)  # another process already keeps a core busy
    threads, lines = _sweep(tmp_path, 1, executor="local")
    assert threads == [1]
    assert any("busy" in line for line in lines)
    two_cores(0.0)
    threads, _ = _sweep(tmp_path / "many", 4, executor="local")
    assert threads == [1, 1, 1, 1]  # 2 workers x 1 thread


def test_environment_sets_threads_and_oversubscription_is_said(tmp_path, two_cores, monkeypatch):
    two_cores(0.0)
    monkeypatch.setenv(cpu_budget.ENV_THREADS, "1")
    previous = torch.get_num_threads()
    try:
        threads, _ = _sweep(tmp_path, 1, executor="serial")
    finally:
        torch.set_num_threads(previous)
    assert threads == [1]
    monkeypatch.delenv(cpu_budget.ENV_THREADS)
    lines: list[str] = []
    from graphnorm.sweep.runner import log_cpu_plan

    log_cpu_plan(cpu_budget.plan_cpus(4, workers=2, threads=2), lines.append)
    assert lines[1].startswith("warning: 2 x 2 threads exceed the 2 usable cores")
