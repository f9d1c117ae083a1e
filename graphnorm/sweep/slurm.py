"""A sweep on SLURM (or submitit's local executor): the runs submitted through submitit, as one job array, and
followed to their end (:func:`run_submitit`).

submitit learns a job's state from ``sacct`` alone, which knows nothing on a cluster without accounting: a task
cancelled before it wrote a result was never seen to end. Here each poll asks ``squeue`` for the sweep's tasks (it
keeps an ended job's state for ``MinJobAge``), and ``sacct`` for those squeue no longer lists, where the cluster
keeps accounting. A task that has ended without a result is recorded as failed, with its state as the reason, at
most ``2 * poll_s + grace_s`` after it ended (:class:`SlurmOptions`); a requeued task is waited for. The job ids
are kept in ``submitit/jobs.json`` (and a submission's job name beforehand), so that a sweep restarted after its
driver died follows the jobs still queued or running instead of submitting their runs again.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphnorm.config import RunConfig, config_run_id
from graphnorm.files import atomic_write_text
from graphnorm.sweep.cpu_budget import env_threads, passive_openmp_wait, plan_cpus, run_processes

RunFn = Callable[[RunConfig], dict[str, Any]]
JOBS_FILE = "jobs.json"  # in <out>/submitit: run_id -> {"job_id", "submitted_at"} of the runs in the queue
# In <out>/submitit while a submission is on its way: the job name it carries and its runs in array order, so that a
# driver killed between sbatch and jobs.json finds the job by its name instead of submitting the runs again.
SUBMITTING_FILE = "submitting.json"
SQUEUE_TIMEOUT_S = 60.0
# Job states in which a task may still run (and write its result); every other state is an end.
WAITING = {
    "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
    "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "SPECIAL_EXIT", "RESV_DEL_HOLD",
}  # fmt: skip
ENDED = {
    "CANCELLED": "was cancelled (scancel, or an administrator)",
    "TIMEOUT": "was killed at its time limit (--slurm-time)",
    "PREEMPTED": "was preempted",
    "NODE_FAIL": "lost its node",
    "BOOT_FAIL": "could not boot its node",
    "OUT_OF_MEMORY": "ran out of memory (--slurm-mem-gb)",
    "DEADLINE": "passed its deadline",
    "FAILED": "failed (non-zero exit)",
    "COMPLETED": "ended",
}
GONE = "left the queue (this cluster keeps no accounting that could say how: cancelled, killed or failed)"


@dataclass
class SlurmOptions:
    """Job resources for ``executor="slurm"`` (``time_min`` is also the per-run limit of ``"submitit-local"``), and
    how the sweep follows its jobs: it asks the scheduler every ``poll_s`` seconds, and records a task that ended
    without a result as failed ``grace_s`` after it saw it end (its result may lag on a network filesystem)."""

    partition: str | None = None
    time_min: int = 60
    cpus_per_task: int = 1
    mem_gb: float | None = None
    gpus_per_node: int = 0
    array_parallelism: int = 256
    account: str | None = None
    poll_s: float = 10.0
    grace_s: float = 15.0


@dataclass
class JobHooks:
    """What the jobs run and how a dead job's run is recorded (:mod:`graphnorm.sweep.runner` provides both):
    ``execute(run_fn, config_values, out_dir, threads)`` in the job, writing the run's result and returning
    ``{"run_id", "status"}``; ``record_failed(out, config, error)`` in the driver, for a run whose job died."""

    execute: Callable[..., dict[str, Any]]
    record_failed: Callable[[Path, RunConfig, str], None]


def check_cluster() -> None:
    """``RuntimeError`` in one line when no SLURM controller answers here (no ``srun``, or no cluster configured)."""
    if shutil.which("srun") is None or shutil.which("sbatch") is None:
        raise RuntimeError("--executor slurm: no SLURM here (srun and sbatch not found); run the sweep on a login node")
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S)
        answer = (ping.stdout + ping.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        ping, answer = None, str(e)
    if ping is None or " UP" not in answer:  # a backup controller that is down makes scontrol fail: no matter
        last = (answer.splitlines() or ["no answer"])[-1]  # scontrol's fatal error comes last
        raise RuntimeError(f"--executor slurm: srun is here but no SLURM controller answers (scontrol ping: {last})")


def make_submitit_executor(
    out: Path,
    executor_name: str,
    num_runs: int,
    workers: int | None,
    threads: int | None,
    slurm: SlurmOptions,
    devices: Iterable[str] = (),
    processes: int = 1,
) -> tuple[Any, int, int]:
    """The submitit executor, how many jobs may be in flight at once, and torch threads per run (``devices``: the
    runs' ``device`` values, which cap submitit-local's CUDA runs as :func:`~graphnorm.sweep.cpu_budget.plan_cpus`
    does; ``processes``: the processes each run starts, each given ``cpus_per_task`` CPUs on SLURM)."""
    import submitit

    cluster = "slurm" if executor_name == "slurm" else "local"
    if cluster == "slurm":
        check_cluster()
    ex = submitit.AutoExecutor(folder=out / "submitit" / "%j", cluster=cluster)
    params: dict[str, Any] = {"name": f"graphnorm-{out.name}", "timeout_min": slurm.time_min}
    if cluster == "slurm":
        params.update(
            cpus_per_task=slurm.cpus_per_task * processes if slurm.cpus_per_task else None,
            gpus_per_node=slurm.gpus_per_node,
            mem_gb=slurm.mem_gb,
            slurm_partition=slurm.partition,
            slurm_array_parallelism=slurm.array_parallelism,
            slurm_account=slurm.account,
            # submitit's warning signal before the time limit (a run still going then is recorded as timed out):
            # its default delay, or a tenth of a short limit, so that a run of a few minutes is not cut at once.
            slurm_signal_delay_s=min(90, slurm.time_min * 6),
        )
        max_in_flight = num_runs  # one job array; SLURM schedules it
        threads = threads or env_threads() or (slurm.cpus_per_task or 1) * processes  # a run's, over its processes
    else:
        plan = plan_cpus(num_runs, workers, threads, devices=devices, processes=processes)
        max_in_flight, threads = plan.workers, plan.threads
    ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return ex, max_in_flight, threads


def run_submitit(
    run_fn: RunFn,
    todo: list[RunConfig],
    out: Path,
    executor_name: str,
    workers: int | None,
    threads: int | None,
    slurm: SlurmOptions,
    finished: Callable[[str], None],
    hooks: JobHooks,
    log: Callable[[str], None] = print,
) -> None:
    """Run ``todo`` as submitit jobs, calling ``finished(run_id)`` as each run's result is written. An interrupt
    (Ctrl-C, SIGTERM, SIGHUP) cancels the jobs still running; they leave no result and run again on resume."""
    if not todo:
        return
    devices = {c.device for c in todo}
    ex, max_in_flight, threads = make_submitit_executor(
        out, executor_name, len(todo), workers, threads, slurm, devices, run_processes(run_fn)
    )
    if executor_name == "slurm":
        _Follower(out, slurm, finished, hooks, log).run(ex, run_fn, todo, threads)
    else:
        _run_local_jobs(ex, run_fn, todo, out, max_in_flight, threads, finished, hooks)


def _run_local_jobs(
    ex: Any,
    run_fn: RunFn,
    todo: list[RunConfig],
    out: Path,
    max_in_flight: int,
    threads: int,
    finished: Callable[[str], None],
    hooks: JobHooks,
) -> None:
    """submitit's LocalExecutor runs every submitted job at once, hence the cap; it knows its jobs' states."""
    pending = list(todo)
    running: dict[Any, RunConfig] = {}
    try:
        while pending or running:
            if pending and len(running) < max_in_flight:
                batch, pending = pending[: max_in_flight - len(running)], pending[max_in_flight - len(running) :]
                with ex.batch(), passive_openmp_wait():
                    jobs = [ex.submit(hooks.execute, run_fn, c.to_dict(), str(out), threads) for c in batch]
                running.update(zip(jobs, batch))
            done = [job for job in running if job.done()]
            for job in done:
                _job_finished(job, running.pop(job), out, None, finished, hooks)
            if not done:
                time.sleep(0.2)
    except BaseException:
        for job in running:
            with contextlib.suppress(Exception):
                job.cancel(check=False)
        raise


def _job_finished(
    job: Any,
    config: RunConfig,
    out: Path,
    submitted_at: float | None,
    finished: Callable[[str], None],
    hooks: JobHooks,
) -> None:
    """A job whose result pickle exists: its run's result, or a failed record when the job raised outside the run
    (and the run wrote no result of this attempt)."""
    try:
        finished(job.result()["run_id"])
    except Exception as e:  # the job died (timeout, preemption, node failure) before writing a result
        run_id = config_run_id(config)
        if submitted_at is None or not _result_written_since(out, run_id, submitted_at):
            hooks.record_failed(out, config, f"job {job.job_id} died: {type(e).__name__}: {e}")
        finished(run_id)


def _result_written_since(out: Path, run_id: str, since: float) -> bool:
    """Whether ``results/<run_id>.json`` was written at ``since`` or later (by this attempt, not an earlier one)."""
    try:
        return (out / "results" / f"{run_id}.json").stat().st_mtime >= since - 1.0  # coarse filesystem clocks
    except OSError:
        return False


@dataclass
class _Task:
    """One run in the queue: its submitit job, when it was submitted, and since when it has been seen ended."""

    job: Any
    config: RunConfig
    submitted_at: float
    ended_since: float | None = None
    state: str | None = None


class _Follower:
    """Submits the runs of a SLURM sweep and follows them to their end (see the module's docstring)."""

    def __init__(
        self,
        out: Path,
        slurm: SlurmOptions,
        finished: Callable[[str], None],
        hooks: JobHooks,
        log: Callable[[str], None],
    ):
        self.out, self.slurm, self.finished, self.hooks, self.log = out, slurm, finished, hooks, log
        self.jobs_file = out / "submitit" / JOBS_FILE
        self.submitting_file = out / "submitit" / SUBMITTING_FILE
        self.tasks: dict[str, _Task] = {}
        self.changed = False  # tasks left since jobs.json was last written

    def run(self, ex: Any, run_fn: RunFn, todo: list[RunConfig], threads: int) -> None:
        try:
            self._reattach(todo)
            self._submit(ex, run_fn, [c for c in todo if config_run_id(c) not in self.tasks], threads)
            while self.tasks:
                self._poll()
                if self.tasks:
                    time.sleep(self.slurm.poll_s)
        except BaseException:
            self._cancel()
            raise

    def _reattach(self, todo: list[RunConfig]) -> None:
        """Follow the recorded jobs of ``todo`` that are still queued or running (a driver that died left them)."""
        import submitit

        records = {**self._submitted_unrecorded(), **self._records()}
        known = {config_run_id(c): c for c in todo if config_run_id(c) in records}
        states = queue_states([records[r]["job_id"] for r in known])
        for run_id, config in known.items():
            record = records[run_id]
            job = submitit.SlurmJob(folder=self.out / "submitit" / "%j", job_id=record["job_id"])
            if states.get(record["job_id"]) in WAITING or job.paths.result_pickle.exists():
                self.tasks[run_id] = _Task(job, config, float(record["submitted_at"]))
        if self.submitting_file.exists():  # the jobs found by name are in jobs.json from now on
            self._save()
            self.submitting_file.unlink(missing_ok=True)
        if self.tasks:
            self.log(f"following {len(self.tasks)} run(s) already in the SLURM queue (submitted by an earlier driver)")

    def _submit(self, ex: Any, run_fn: RunFn, configs: list[RunConfig], threads: int) -> None:
        if not configs:
            return
        submitted_at = time.time()
        name = f"graphnorm-{self.out.name}-{secrets.token_hex(4)}"  # unique: a restart finds this job by it
        marker = {"name": name, "run_ids": [config_run_id(c) for c in configs], "submitted_at": submitted_at}
        self.submitting_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.submitting_file, json.dumps(marker), "the sweep's SLURM submission")
        ex.update_parameters(name=name)
        with ex.batch(), passive_openmp_wait():
            jobs = [ex.submit(self.hooks.execute, run_fn, c.to_dict(), str(self.out), threads) for c in configs]
        for job, config in zip(jobs, configs):
            self.tasks[config_run_id(config)] = _Task(job, config, submitted_at)
        self._save()
        self.submitting_file.unlink(missing_ok=True)
        self.log(f"submitted {len(jobs)} run(s) to SLURM as job {jobs[0].job_id.split('_')[0]}")

    def _submitted_unrecorded(self) -> dict[str, dict[str, Any]]:
        """The job records of a submission whose driver died before writing jobs.json: its array found by the job
        name it carries (squeue, else sacct), its tasks in the order of its runs; ``{}`` when none was found."""
        try:
            marker = json.loads(self.submitting_file.read_text())
            name, run_ids, submitted_at = marker["name"], list(marker["run_ids"]), float(marker["submitted_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        arrays = jobs_named(name)
        if len(arrays) != 1:  # never submitted (or gone without a trace): its runs are submitted again
            return {}
        (base,) = arrays
        ids = [base] if len(run_ids) == 1 else [f"{base}_{i}" for i in range(len(run_ids))]
        return {run_id: {"job_id": job_id, "submitted_at": submitted_at} for run_id, job_id in zip(run_ids, ids)}

    def _poll(self) -> None:
        """One look at every task: finished ones are reported, ended ones without a result recorded as failed."""
        states = queue_states([t.job.job_id for t in self.tasks.values()])
        missing = [t.job.job_id for t in self.tasks.values() if t.job.job_id not in states]
        if missing:
            states.update(accounting_states(missing))
        now = time.monotonic()
        for run_id, task in list(self.tasks.items()):
            task.state = states.get(task.job.job_id)
            if task.job.paths.result_pickle.exists():
                self._done(run_id)
                _job_finished(task.job, task.config, self.out, task.submitted_at, self.finished, self.hooks)
            elif task.state in WAITING:
                task.ended_since = None
            elif task.ended_since is None:
                task.ended_since = now  # ended (or gone): its result pickle may still be on its way
            elif now - task.ended_since >= self.slurm.grace_s:
                self._done(run_id)
                self._ended_without_result(run_id, task)
        if self.changed:  # once a poll: a large array would otherwise rewrite the file once per finished task
            self._save()

    def _ended_without_result(self, run_id: str, task: _Task) -> None:
        if not _result_written_since(self.out, run_id, task.submitted_at):  # else the run wrote it, then died
            state = task.state
            why = ENDED.get(state, f"ended {state}") if state else GONE
            error = f"SLURM job {task.job.job_id} {why} before its run wrote a result"
            detail = f"{error}\nstate: {state or 'unknown'}; the job's own output: {task.job.paths.stderr}"
            self.hooks.record_failed(self.out, task.config, detail)
        self.finished(run_id)

    def _done(self, run_id: str) -> None:
        del self.tasks[run_id]
        self.changed = True

    def _cancel(self) -> None:
        """Cancel every job still followed (interrupted driver); they are forgotten, their runs run on resume."""
        ids = [t.job.job_id for t in self.tasks.values()]
        if ids:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(["scancel", *ids], capture_output=True, timeout=SQUEUE_TIMEOUT_S)
        self.tasks.clear()
        with contextlib.suppress(OSError):
            self._save()

    def _records(self) -> dict[str, dict[str, Any]]:
        try:
            records = json.loads(self.jobs_file.read_text())
        except (OSError, ValueError):
            return {}
        ok = isinstance(records, dict) and all(
            isinstance(r, dict) and {"job_id", "submitted_at"} <= set(r) for r in records.values()
        )
        return records if ok else {}

    def _save(self) -> None:
        records = {run_id: {"job_id": t.job.job_id, "submitted_at": t.submitted_at} for run_id, t in self.tasks.items()}
        atomic_write_text(self.jobs_file, json.dumps(records, indent=1), "the sweep's SLURM job ids")
        self.changed = False


def queue_states(job_ids: list[str]) -> dict[str, str]:
    """``{job id: state}`` from ``squeue`` for the tasks of ``job_ids`` (``"123_4"``, or ``"123"`` for a single
    job) that the controller still knows, ended ones included; ``{}`` when it knows none. A failing squeue (the
    controller is down) says nothing either: every task counts as waiting, so that none is taken for gone."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    if not arrays:
        return {}
    command = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T", f"--jobs={','.join(arrays)}"]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return dict.fromkeys(job_ids, "PENDING")
    if answer.returncode != 0:
        if "Invalid job id" in answer.stderr:  # none of them is known any more
            return {}
        return dict.fromkeys(job_ids, "PENDING")
    return _parse_states(answer.stdout)


def jobs_named(name: str) -> list[str]:
    """The ids of the jobs (an array's own id) called ``name`` that squeue still lists, else that sacct knows."""
    commands = [
        ["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%F"],
        ["sacct", "--noheader", "--parsable2", "--allocations", f"--name={name}", "--format=JobID"],
    ]
    for command in commands:
        try:
            answer = subprocess.run(command, capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            continue
        found = sorted({line.strip().split("_")[0] for line in answer.stdout.splitlines() if line.strip()})
        if answer.returncode == 0 and found:
            return found
    return []


def accounting_states(job_ids: list[str]) -> dict[str, str]:
    """``{job id: state}`` from ``sacct`` (``"CANCELLED by 0"`` -> ``"CANCELLED"``); ``{}`` on a cluster without
    accounting (sacct fails) or for jobs it does not know."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    command = [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        "--format=JobID,State",
        f"--jobs={','.join(arrays)}",
    ]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return _parse_states(answer.stdout) if answer.returncode == 0 else {}


def _parse_states(text: str) -> dict[str, str]:
    """``id|STATE ...`` lines -> ``{id: STATE}``; lines of ranges (``123_[4-7]``, pending tasks) are skipped."""
    states = {}
    for line in text.splitlines():
        job_id, _, state = line.strip().partition("|")
        if job_id and state and "[" not in job_id:
            states[job_id] = state.split()[0].rstrip("+")
    return states
