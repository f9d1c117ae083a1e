"""The CPU cores this process may use, and how a sweep splits them into worker processes x torch threads.

Why it matters: torch runs a CPU op on an OpenMP team, and every op ends at a barrier that waits for all threads of
the team. When the team has more threads than free cores (another process is busy on the machine, or a sweep starts
more workers x threads than there are cores), an op waits for a descheduled thread to get a time slice, and a deep
GCN's hundreds of small ops per pass each pay that wait: a second thread per run then makes a run many times slower
instead of faster (``experiments/benchmarks/bench_threads.py`` measures it, and shows that subnormal floats are not
the cause). So a sweep never starts more threads than usable cores (:func:`usable_cores`, :func:`plan_cpus`), with one
thread per run whenever the machine already looks busy (:func:`machine_busy`); ``--threads`` or
``$GRAPHNORM_THREADS`` set the threads per run explicitly. Runs on CUDA share one GPU, whose processes take turns:
at most :data:`CUDA_RUNS_PER_GPU` of them run at once by default (:func:`plan_cpus`).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_THREADS = "GRAPHNORM_THREADS"  # torch threads per run, overriding the default of plan_cpus
CGROUP_V2_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
CGROUP_V1_PERIOD = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
# Runs at once when they use CUDA, unless --workers says otherwise. Every local run's "cuda" is the same GPU (the
# first of CUDA_VISIBLE_DEVICES), and each worker process holds its own CUDA context (hundreds of MB of device
# memory, plus a caching allocator whose free blocks no other process can use). The GPU runs one process's kernels
# at a time, switching by time slice, so past a few processes (enough to overlap one's Python and CPU work with
# another's kernels) more add memory and switches, not speed; and a process waiting for its kernels spins on a
# core, so more of them than cores starve the ones whose turn it is of the CPU they need to launch work.
CUDA_RUNS_PER_GPU = 4


def affinity_cores() -> int:
    """Cores this process may run on (its CPU affinity: ``taskset``, a cpuset, SLURM's binding)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _read(path: Path) -> str | None:
    """The stripped text of ``path``, or None when it cannot be read (no such cgroup file)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def quota_cores() -> float | None:
    """The container's CPU quota in cores (cgroup v2 ``cpu.max``, else v1 ``cfs_quota_us / cfs_period_us``);
    ``None`` without a quota."""
    cpu_max = _read(CGROUP_V2_CPU_MAX)
    if cpu_max is not None:
        quota, _, period = cpu_max.partition(" ")
    else:
        quota, period = _read(CGROUP_V1_QUOTA) or "max", _read(CGROUP_V1_PERIOD) or "100000"
    try:
        quota_us, period_us = int(quota), int(period or "100000")
    except ValueError:  # "max": no quota
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def slurm_cores() -> int | None:
    """``$SLURM_CPUS_PER_TASK`` inside a SLURM job that set it, else ``None``."""
    value = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def usable_cores() -> int:
    """The cores this process may keep busy: the least of its affinity, its CPU quota (rounded down, at least 1)
    and ``$SLURM_CPUS_PER_TASK``."""
    limits = [affinity_cores()]
    quota = quota_cores()
    if quota is not None:
        limits.append(max(1, math.floor(quota)))
    slurm = slurm_cores()
    if slurm is not None:
        limits.append(slurm)
    return max(1, min(limits))


def machine_busy(cores: int) -> bool:
    """Whether other processes already keep our cores busy: the 1-minute load average exceeds what the machine's
    other cores (``os.cpu_count() - cores``) can absorb by half a core or more. Read before the sweep starts work,
    so the load is other people's."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available: assume the cores are free
        return False
    return load >= max(0, (os.cpu_count() or cores) - cores) + 0.5


def env_threads() -> int | None:
    """``$GRAPHNORM_THREADS`` as a positive integer, ``None`` when unset; ``ValueError`` when it is not one."""
    value = os.environ.get(ENV_THREADS, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"${ENV_THREADS} must be a positive integer (torch threads per run), got {value!r}")
    return int(value)


@contextlib.contextmanager
def passive_openmp_wait() -> Iterator[None]:
    """While inside, ``OMP_WAIT_POLICY=PASSIVE`` in the environment (unless the user set a policy), so processes
    started here (a sweep's forkserver and workers, submitit jobs) get threads that sleep when they wait instead of
    spinning; GNU OpenMP reads it once, when a process starts. Beside busy neighbours a spinning thread takes the
    core from the thread that has the work, which makes a multi-threaded forward far slower under the default or
    ``ACTIVE`` policy than under ``PASSIVE`` (``bench_threads``' spin-policy table). The price on a quiet machine is
    waking a sleeping thread per op, a modest slow-down: set ``OMP_WAIT_POLICY=ACTIVE`` for dedicated cores and many
    threads."""
    if os.environ.get("OMP_WAIT_POLICY"):
        yield
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        yield
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)


@dataclass(frozen=True)
class CpuPlan:
    """How many runs at once (``workers``) and torch threads each (``threads``), out of ``cores`` usable cores."""

    cores: int
    workers: int
    threads: int
    why: str  # where the thread count comes from, for the sweep's log line

    @property
    def oversubscribed(self) -> bool:
        """Whether ``workers x threads`` exceeds the usable cores."""
        return self.workers * self.threads > self.cores


def uses_cuda(devices: Iterable[str]) -> bool:
    """Whether any of the runs' ``device`` values runs on CUDA: ``"cuda"``, or ``"auto"`` where CUDA is available."""
    devices = set(devices)
    if "cuda" in devices:
        return True
    if "auto" not in devices:
        return False
    import torch  # here: only a sweep that may use CUDA pays for the import

    return torch.cuda.is_available()


def run_processes(run_fn: Callable[..., Any]) -> int:
    """The processes one call of ``run_fn`` starts: its ``processes`` attribute (a data-parallel run function,
    :func:`graphnorm.train.launch.processes_run`), else 1."""
    processes = getattr(run_fn, "processes", 1)
    return processes if isinstance(processes, int) and processes >= 1 else 1


def plan_cpus(
    num_runs: int,
    workers: int | None = None,
    threads: int | None = None,
    *,
    devices: Iterable[str] = (),
    processes: int = 1,
) -> CpuPlan:
    """Workers and threads per run for ``num_runs`` runs on this machine.

    ``workers`` defaults to the usable cores (at most ``num_runs``), and to at most :data:`CUDA_RUNS_PER_GPU` when
    the runs' ``devices`` (their ``device`` values; none given: CPU runs) use CUDA (:func:`uses_cuda`); a
    ``workers`` given is kept. ``threads``, else ``$GRAPHNORM_THREADS``, else the cores left per worker
    (``cores // workers``), and 1 when the machine is busy (:func:`machine_busy`): more threads than free cores make
    each op wait for a descheduled thread (module docstring). ``processes``: the processes each run starts (a
    data-parallel run function); the default ``workers`` is then the cores divided by them, and ``threads`` a run's
    total, which its processes share. ``why`` says where the threads, and a CUDA or process cap, come from.
    """
    cores = usable_cores()
    slots = max(1, cores // processes)  # runs whose processes fit the cores together
    caps = ""
    if processes > 1 and workers is None and min(slots, num_runs) < min(cores, num_runs):
        caps = f"; at most {slots} run(s) at once, as each run starts {processes} processes"
    elif processes > 1 and workers is not None and workers * processes > cores:
        caps = f"; {workers} runs of {processes} processes each exceed the {cores} usable cores"
    if uses_cuda(devices) and min(workers or slots, num_runs) > CUDA_RUNS_PER_GPU:
        if workers is None:
            workers = CUDA_RUNS_PER_GPU
            caps += (
                f"; at most {CUDA_RUNS_PER_GPU} runs at once, as CUDA runs share one GPU: each process holds a CUDA "
                "context and waits its turn on the device; --workers overrides"
            )
        else:
            caps += (
                f"; {workers} CUDA runs at once share one GPU, above the default cap of {CUDA_RUNS_PER_GPU}: each "
                "holds a CUDA context and waits its turn on the device, so more add memory and waiting, not speed"
            )
    workers = max(1, min(workers or slots, num_runs))
    if threads is not None:
        return CpuPlan(cores, workers, threads, "--threads" + caps)
    from_env = env_threads()
    if from_env is not None:
        return CpuPlan(cores, workers, from_env, f"${ENV_THREADS}" + caps)
    if cores // workers > 1 and machine_busy(cores):
        return CpuPlan(cores, workers, 1, "1: the machine is busy (load average), more would wait on busy cores" + caps)
    return CpuPlan(cores, workers, max(1, cores // workers), "usable cores / workers" + caps)
