"""graphnorm.sweep.cpu_budget: usable cores from affinity, cgroup quota and SLURM, and the sweep's workers x
threads plan.

The machine is faked where it is read (``os.sched_getaffinity``, the cgroup files, the environment, the load
average); the logic under test runs as is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphnorm.sweep import cpu_budget
from graphnorm.sweep.cpu_budget import plan_cpus, quota_cores, usable_cores


@pytest.fixture
def machine(monkeypatch, tmp_path: Path):
    """A fake machine: ``set(affinity=, cpu_max=, slurm=, load=, cpu_count=, env_threads=)``."""
    v2, v1_quota, v1_period = tmp_path / "cpu.max", tmp_path / "cfs_quota_us", tmp_path / "cfs_period_us"
    monkeypatch.setattr(cpu_budget, "CGROUP_V2_CPU_MAX", v2)
    monkeypatch.setattr(cpu_budget, "CGROUP_V1_QUOTA", v1_quota)
    monkeypatch.setattr(cpu_budget, "CGROUP_V1_PERIOD", v1_period)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv(cpu_budget.ENV_THREADS, raising=False)

    def set_machine(affinity=16, cpu_max=None, slurm=None, load=0.0, cpu_count=None, env_threads=None, v1=None):
        monkeypatch.setattr(cpu_budget.os, "sched_getaffinity", lambda pid: set(range(affinity)))
        monkeypatch.setattr(cpu_budget.os, "cpu_count", lambda: cpu_count or affinity)
        monkeypatch.setattr(cpu_budget.os, "getloadavg", lambda: (load, load, load))
        if cpu_max is not None:
            v2.write_text(cpu_max + "\n")
        if v1 is not None:
            v1_quota.write_text(f"{v1[0]}\n")
            v1_period.write_text(f"{v1[1]}\n")
        if slurm is not None:
            monkeypatch.setenv("SLURM_CPUS_PER_TASK", str(slurm))
        if env_threads is not None:
            monkeypatch.setenv(cpu_budget.ENV_THREADS, str(env_threads))

    return set_machine


def test_usable_cores_is_the_least_of_affinity_quota_and_slurm(machine):
    machine(affinity=16)
    assert usable_cores() == 16
    machine(affinity=16, cpu_max="max 100000")  # no quota
    assert usable_cores() == 16
    machine(affinity=16, cpu_max="250000 100000")  # 2.5 cores: 2 threads can be kept busy
    assert quota_cores() == 2.5
    assert usable_cores() == 2
    machine(affinity=16, cpu_max="50000 100000", slurm=8)  # half a core still runs one thread
    assert usable_cores() == 1
    machine(affinity=3, cpu_max="max 100000", slurm=8)
    assert usable_cores() == 3


def test_slurm_cpus_per_task_limits_cores(machine):
    machine(affinity=64, slurm=4)
    assert usable_cores() == 4


def test_cgroup_v1_quota_is_read_when_there_is_no_v2_file(machine):
    machine(affinity=8, v1=(300000, 100000))
    assert quota_cores() == 3.0 and usable_cores() == 3
    machine(affinity=8, v1=(-1, 100000))  # v1's "no quota"
    assert quota_cores() is None and usable_cores() == 8


def test_plan_never_puts_more_threads_than_cores(machine):
    machine(affinity=2, cpu_count=2)
    for runs in (1, 2, 3, 20):
        for workers in (None, 1, 2):
            plan = plan_cpus(runs, workers=workers)
            assert plan.workers * plan.threads <= 2, (runs, workers, plan)
    plan = plan_cpus(20)
    assert (plan.workers, plan.threads) == (2, 1)
    assert plan_cpus(1) == plan_cpus(1, workers=1)
    assert (plan_cpus(1).workers, plan_cpus(1).threads) == (1, 2)  # one run on a quiet 2-core machine


def test_plan_respects_the_quota_not_the_visible_cores(machine):
    machine(affinity=32, cpu_max="400000 100000")
    plan = plan_cpus(100)
    assert (plan.cores, plan.workers, plan.threads) == (4, 4, 1)
    plan = plan_cpus(2)
    assert (plan.workers, plan.threads) == (2, 2)


def test_busy_machine_gets_one_thread_per_run(machine):
    machine(affinity=2, cpu_count=2, load=1.0)  # another process keeps one of the two cores busy
    plan = plan_cpus(1)
    assert (plan.workers, plan.threads) == (1, 1)
    assert "busy" in plan.why
    machine(affinity=2, cpu_count=2, load=0.2)
    assert plan_cpus(1).threads == 2


def test_load_on_cores_outside_our_set_does_not_count(machine):
    # A SLURM job with 4 of a node's 64 cores: 50 busy cores elsewhere leave ours free.
    machine(affinity=4, cpu_count=64, load=50.0)
    assert plan_cpus(1).threads == 4
    machine(affinity=4, cpu_count=64, load=61.0)  # more load than the other 60 cores hold
    assert plan_cpus(1).threads == 1


def test_explicit_threads_and_env_override_the_default(machine):
    machine(affinity=8, load=20.0, env_threads=3)
    plan = plan_cpus(1)
    assert plan.threads == 3 and plan.why == "$GRAPHNORM_THREADS"
    plan = plan_cpus(1, threads=5)
    assert plan.threads == 5 and plan.why == "--threads"
    plan = plan_cpus(8, workers=8, threads=2)
    assert plan.oversubscribed  # the user's choice is kept; the sweep says so


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_bad_env_threads_is_one_line_error(machine, value):
    machine(affinity=2, env_threads=value)
    with pytest.raises(ValueError, match=r"\$GRAPHNORM_THREADS must be a positive integer"):
        plan_cpus(4)


def test_passive_openmp_wait_only_while_inside_and_never_over_the_users_choice(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with cpu_budget.passive_openmp_wait():
        assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    with cpu_budget.passive_openmp_wait():
        assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_cuda_runs_are_capped_per_gpu_unless_workers_are_given(machine):
    """20 CUDA runs on a 32-core machine: 4 processes share the GPU (each with its own CUDA context, taking turns
    on the device), not 32; the log line says why. CPU runs keep every core; --workers keeps the user's choice."""
    machine(affinity=32)
    cap = cpu_budget.CUDA_RUNS_PER_GPU
    plan = plan_cpus(20, devices=["cuda"])
    assert (plan.workers, plan.threads) == (cap, 32 // cap)
    assert f"at most {cap} runs at once" in plan.why and "GPU" in plan.why
    assert plan_cpus(20, devices=["cpu"]) == plan_cpus(20) and plan_cpus(20).workers == 20
    assert plan_cpus(20, devices=["cpu", "cuda"]).workers == cap  # one CUDA run is enough to share the GPU
    assert plan_cpus(2, devices=["cuda"]).workers == 2  # fewer runs than the cap: no cap, no note
    assert "GPU" not in plan_cpus(2, devices=["cuda"]).why
    explicit = plan_cpus(20, workers=20, devices=["cuda"])
    assert explicit.workers == 20 and "above the default cap" in explicit.why
    assert plan_cpus(20, threads=2, devices=["cuda"]).why.startswith(f"--threads; at most {cap} runs")
    machine(affinity=2, cpu_count=2)  # fewer cores than the cap: the cores decide, as for CPU runs
    assert plan_cpus(20, devices=["cuda"]) == plan_cpus(20)


def test_runs_of_several_processes_count_their_processes(machine):
    """A data-parallel run function starts N processes per run: by default at most cores / N runs at once, each run
    given cores / workers threads for its processes to share; --workers beyond that is kept and said to exceed."""
    from graphnorm.sweep.cpu_budget import run_processes
    from graphnorm.train.launch import processes_run

    machine(affinity=8)
    plan = plan_cpus(10, processes=2)
    assert (plan.workers, plan.threads) == (4, 2) and not plan.oversubscribed
    assert "at most 4 run(s) at once, as each run starts 2 processes" in plan.why
    assert plan_cpus(10, processes=1) == plan_cpus(10) and plan_cpus(10).workers == 8
    assert plan_cpus(3, processes=2).workers == 3  # fewer runs than slots: nothing to cap, no note
    assert "processes" not in plan_cpus(3, processes=2).why
    assert "4 runs of 4 processes each exceed the 8 usable cores" in plan_cpus(10, workers=4, processes=4).why
    assert plan_cpus(10, processes=16).workers == 1  # more processes than cores: one run at a time
    assert run_processes(processes_run(3)) == 3 and run_processes(lambda config: {}) == 1


@pytest.mark.parametrize("available", [True, False])
def test_auto_device_counts_as_cuda_only_where_cuda_is_available(machine, monkeypatch, available):
    import torch

    machine(affinity=16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    assert cpu_budget.uses_cuda(["auto"]) is available
    assert cpu_budget.uses_cuda(["cpu"]) is False and cpu_budget.uses_cuda([]) is False
    assert plan_cpus(20, devices=["auto"]).workers == (cpu_budget.CUDA_RUNS_PER_GPU if available else 16)


@pytest.mark.parametrize("executor", ["local", "submitit-local"])
def test_sweeps_plan_their_workers_from_the_runs_devices(executor, monkeypatch, tmp_path):
    """The local pool and submitit-local hand every run's device to plan_cpus, so CUDA runs get the per-GPU cap, and
    the processes a data-parallel run function starts."""
    from graphnorm.config import RunConfig
    from graphnorm.sweep import runner, slurm
    from graphnorm.sweep.slurm import SlurmOptions
    from graphnorm.train.launch import processes_run

    seen: list[tuple[set[str], int]] = []

    def spy(num_runs, workers=None, threads=None, *, devices=(), processes=1):
        seen.append((set(devices), processes))
        raise RuntimeError("planned")

    monkeypatch.setattr(runner, "plan_cpus", spy)
    monkeypatch.setattr(slurm, "plan_cpus", spy)
    todo = [RunConfig(device="cuda", seed=0), RunConfig(device="cpu", seed=1)]
    with pytest.raises(RuntimeError, match="planned"):
        if executor == "local":
            runner._run_process_pool(processes_run(2), todo, tmp_path, None, None, lambda run_id: None)
        else:
            devices = {c.device for c in todo}
            slurm.make_submitit_executor(tmp_path, executor, 2, None, None, SlurmOptions(), devices, processes=2)
    assert seen == [({"cuda", "cpu"}, 2)]
