"""``--executor slurm`` against a real scheduler: a single-node SLURM cluster started on this machine by
``experiments/slurm/cluster.sh`` (Debian's slurm-wlm and munge; with accounting, slurmdbd and MariaDB too).

A machine that cannot start the cluster fails these tests with the script's output; they never skip. Each xdist
worker starts its own clusters (own state folder, ports and munge socket), once per module, and stops them at the
end. The sweeps poll the scheduler every ``POLL_S`` and give an ended task ``GRACE_S`` to show its result, so a
task that ended without one is recorded as failed within ``BOUND_S`` (plus the scheduler commands' own time).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sweep_run_fns import FAKE_SLEEP_ENV, LOG_ENV, SWEEP, executions, fake_run

from graphnorm.config import config_run_id
from graphnorm.sweep import SlurmOptions, expand_grid, run_sweep
from graphnorm.sweep.runner import execute_run, failed_result, write_result

TESTS = Path(__file__).resolve().parents[1]
CLUSTER_SH = TESTS.parent / "experiments" / "slurm" / "cluster.sh"
POLL_S, GRACE_S = 0.5, 1.0
BOUND_S = 2 * POLL_S + GRACE_S
COMMANDS_S = 5.0  # squeue/sacct calls and the test's own polling, on a loaded machine
WAIT_S = 180.0  # the longest any step may take here (jobs import torch on two shared cores)
OPTIONS = SlurmOptions(time_min=10, poll_s=POLL_S, grace_s=GRACE_S)


def start_cluster(folder: Path, accounting: bool) -> Path:
    """Start a cluster in ``folder``; its slurm.conf. Fails (never skips) when this machine cannot run one."""
    command = [str(CLUSTER_SH), "start", "--cpus", "4", *(["--accounting"] if accounting else []), str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.fail(f"cannot start a SLURM cluster on this machine:\n{result.stdout}\n{result.stderr}", pytrace=False)
    return folder / "etc" / "slurm.conf"


def stop_cluster(folder: Path) -> None:
    subprocess.run([str(CLUSTER_SH), "stop", str(folder)], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def plain_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("slurm")
    try:
        yield start_cluster(folder, accounting=False)
    finally:
        stop_cluster(folder)


@pytest.fixture(scope="module")
def accounting_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("slurmdbd")
    try:
        yield start_cluster(folder, accounting=True)
    finally:
        stop_cluster(folder)


@pytest.fixture
def slurm(plain_cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test talks to the cluster without accounting; returns the run log fake_run appends to."""
    return use_cluster(plain_cluster, tmp_path, monkeypatch)


def use_cluster(conf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SLURM_CONF", str(conf))
    # The jobs are fresh interpreters that unpickle fake_run by importing its module from tests/.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "executions.log"))
    return tmp_path / "executions.log"


def grid(norms: list[str], seeds: list[int]) -> dict[str, Any]:
    return {**SWEEP, "grid": {"norm": norms, "num_layers": [2], "seed": seeds}}


def wait_until(condition: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


class Background:
    """``run_sweep`` in a thread of this process (no signal handlers there; the test's main thread watches)."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.runs, self.error, self.logs = None, None, []
        kwargs.setdefault("log", self.logs.append)
        self.thread = threading.Thread(target=self._run, args=args, kwargs=kwargs, daemon=True)
        self.thread.start()

    def _run(self, *args: Any, **kwargs: Any) -> None:
        try:
            self.runs = run_sweep(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 (handed to the test)
            self.error = e

    def join(self) -> Any:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), f"the sweep did not finish; its log: {self.logs}"
        if self.error is not None:
            raise self.error
        return self.runs


def sweep_in_background(sweep: dict[str, Any], out: Path, options: SlurmOptions = OPTIONS) -> Background:
    return Background(sweep, out, run_fn=fake_run, executor="slurm", slurm=options, make_plots=False, progress=False)


def job_of(out: Path, run_id: str) -> str:
    """The SLURM job id of a run in the queue, from the sweep's own record of them."""
    return json.loads((out / "submitit" / "jobs.json").read_text())[run_id]["job_id"]


def started_run(log: Path, sweep: dict[str, Any], index: int = 0) -> str:
    """The run_id of the ``index``-th run that fake_run started (its line in the run log), once there is one."""
    line = wait_until(lambda: executions(log)[index] if len(executions(log)) > index else None, "a run to start")
    norm, layers, seed = line.split(",")
    (config,) = [c for c in expand_grid(sweep) if (c.norm, c.num_layers, c.seed) == (norm, int(layers), int(seed))]
    return config_run_id(config)


def result_of(out: Path, run_id: str) -> dict[str, Any] | None:
    try:
        return json.loads((out / "results" / f"{run_id}.json").read_text())
    except (OSError, ValueError):
        return None


def attempts(out: Path, run_id: str) -> int:
    return (out / "logs" / f"{run_id}.log").read_text().count("==== attempt started")


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, timeout=60)


def job_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def test_array_sweep_gives_the_local_records_and_a_second_sweep_is_refused(slurm: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv(FAKE_SLEEP_ENV, "1")
    sweep = grid(["none", "pairnorm"], [0])
    out = tmp_path / "slurm"
    first = sweep_in_background(sweep, out)
    wait_until(lambda: (out / "submitit" / "jobs.json").exists(), "the array's submission")
    with pytest.raises(RuntimeError, match="another sweep is running"):  # as for the local executor: one lock
        run_sweep(sweep, out, run_fn=fake_run, executor="slurm", slurm=OPTIONS, make_plots=False, progress=False)
    runs = first.join()
    assert runs.status.tolist() == ["ok", "ok"]
    assert any("as job" in line for line in first.logs)  # one array
    local = run_sweep(sweep, tmp_path / "local", run_fn=fake_run, executor="serial", make_plots=False, progress=False)
    for run_id in local.run_id:
        on_slurm, here = result_of(out, run_id), result_of(tmp_path / "local", run_id)
        assert on_slurm["host"] and on_slurm["pid"] != os.getpid()
        for result in (on_slurm, here):
            result["record"].pop("worker_pid")
        assert (on_slurm["status"], on_slurm["record"], on_slurm["layers"]) == (
            here["status"],
            here["record"],
            here["layers"],
        )
    assert len(executions(slurm)) == 2 + 2


@pytest.mark.parametrize("accounting", [False, True], ids=["no-accounting", "accounting"])
def test_scancel_of_a_running_task_is_a_failed_run_within_the_bound(accounting, request, tmp_path, monkeypatch):
    conf = request.getfixturevalue("accounting_cluster" if accounting else "plain_cluster")
    log = use_cluster(conf, tmp_path, monkeypatch)
    monkeypatch.setenv(FAKE_SLEEP_ENV, "8")  # the kill lands well before the run ends
    sweep = grid(["none"], [0, 1])
    out = tmp_path / "out"
    background = sweep_in_background(sweep, out)
    run_id = started_run(log, sweep)
    job = job_of(out, run_id)
    subprocess.run(["scancel", job], check=True, timeout=60)
    cancelled = time.monotonic()
    # The task ends once its processes are gone (SIGTERM, KillWait, SIGKILL); the bound counts from there.
    wait_until(lambda: job_state(job) not in ("RUNNING", "COMPLETING"), "the cancelled task to end")
    ended = time.monotonic()
    result = wait_until(lambda: result_of(out, run_id), "the cancelled run's record")
    recorded = time.monotonic()
    runs = background.join()
    print(
        f"\naccounting={accounting}: scancel -> task ended {ended - cancelled:.2f} s, -> failed record "
        f"{recorded - ended:.2f} s later (bound {BOUND_S} s + the commands' own time)"
    )
    assert result["status"] == "failed", result
    assert "was cancelled" in result["error"], result["error"]  # squeue keeps its state for MinJobAge; sacct too
    assert recorded - ended <= BOUND_S + COMMANDS_S
    assert sorted(runs.status) == ["failed", "ok"]  # the other one finishes


def test_a_task_killed_at_its_time_limit_is_a_failed_run(slurm: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv(FAKE_SLEEP_ENV, "300")
    sweep = grid(["none"], [0])
    out = tmp_path / "out"
    background = sweep_in_background(sweep, out)
    run_id = started_run(slurm, sweep)
    scontrol("update", f"JobId={job_of(out, run_id)}", "TimeLimit=0")  # over its limit: killed at the next check
    runs = background.join()
    assert runs.status.tolist() == ["failed"]
    assert "time" in runs.error.iloc[0].lower(), runs.error.iloc[0]  # SLURM's TIMEOUT, or submitit's timed-out signal


def test_a_requeued_task_runs_again_and_its_run_is_recorded_once(slurm: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv(FAKE_SLEEP_ENV, "6")  # the requeue lands well before the run ends
    sweep = grid(["none"], [0, 1])
    out = tmp_path / "out"
    background = sweep_in_background(sweep, out)
    run_id = started_run(slurm, sweep)
    job = job_of(out, run_id)
    scontrol("requeue", job)  # as a preemption with requeue does
    wait_until(lambda: job_state(job) == "PENDING", "the requeued task to wait again")
    scontrol("update", f"JobId={job}", "StartTime=now")  # SLURM holds a requeued job back for a while
    runs = background.join()
    assert runs.status.tolist() == ["ok", "ok"]
    assert attempts(out, run_id) == 2  # cut off once, then run to its end


def test_a_killed_sweep_restarted_follows_its_jobs_and_runs_nothing_twice(slurm: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv(FAKE_SLEEP_ENV, "6")  # the restart comes well before the runs end
    sweep = grid(["none"], [0, 1])
    out = tmp_path / "out"
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    driver = (
        "import json, sys; from graphnorm.sweep import SlurmOptions, run_sweep; from sweep_run_fns import fake_run; "
        f"run_sweep(json.load(open(sys.argv[1])), sys.argv[2], run_fn=fake_run, executor='slurm', "
        f"slurm=SlurmOptions(time_min=10, poll_s={POLL_S}, grace_s={GRACE_S}), make_plots=False, progress=False)"
    )
    process = subprocess.Popen([sys.executable, "-c", driver, str(tmp_path / "sweep.json"), str(out)])
    try:
        wait_until(lambda: len(executions(slurm)) == 2, "both runs to start")
    finally:
        process.send_signal(signal.SIGKILL)  # no cleanup: its jobs run on
        process.wait(60)
    logs: list[str] = []
    runs = run_sweep(sweep, out, run_fn=fake_run, executor="slurm", slurm=OPTIONS, make_plots=False, log=logs.append)
    assert runs.status.tolist() == ["ok", "ok"]
    assert any("already in the SLURM queue" in line for line in logs), logs  # followed, not submitted again
    assert len(executions(slurm)) == 2  # nothing ran twice
    assert [attempts(out, run_id) for run_id in runs.run_id] == [1, 1]


def test_a_sweep_killed_between_sbatch_and_its_job_record_finds_its_job_by_name(slurm: Path, tmp_path, monkeypatch):
    """The driver dies right after sbatch returned, before jobs.json holds the job ids: the restart finds the job by
    the name its submission recorded beforehand, follows it, and runs nothing twice."""
    monkeypatch.setenv(FAKE_SLEEP_ENV, "6")
    sweep = grid(["none"], [0, 1])
    out = tmp_path / "out"
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    driver = (
        "import json, os, sys; from graphnorm.sweep import SlurmOptions, run_sweep, slurm; "
        "from sweep_run_fns import fake_run; "
        "slurm._Follower._save = lambda self: os._exit(9); "  # killed before the job ids are written
        f"run_sweep(json.load(open(sys.argv[1])), sys.argv[2], run_fn=fake_run, executor='slurm', "
        f"slurm=SlurmOptions(time_min=10, poll_s={POLL_S}, grace_s={GRACE_S}), make_plots=False, progress=False)"
    )
    died = subprocess.run([sys.executable, "-c", driver, str(tmp_path / "sweep.json"), str(out)], timeout=WAIT_S)
    assert died.returncode == 9 and not (out / "submitit" / "jobs.json").exists()
    assert (out / "submitit" / "submitting.json").exists()
    logs: list[str] = []
    runs = run_sweep(sweep, out, run_fn=fake_run, executor="slurm", slurm=OPTIONS, make_plots=False, log=logs.append)
    assert runs.status.tolist() == ["ok", "ok"]
    assert any("following 2 run(s) already in the SLURM queue" in line for line in logs), logs
    assert not any(line.startswith("submitted") for line in logs), logs  # nothing submitted again
    assert len(executions(slurm)) == 2 and [attempts(out, run_id) for run_id in runs.run_id] == [1, 1]
    assert not (out / "submitit" / "submitting.json").exists()


def test_a_task_gone_from_the_queue_without_accounting_is_a_failed_run(tmp_path: Path, monkeypatch):
    # Past MinJobAge squeue forgets an ended task, and without accounting sacct knows nothing either.
    from types import SimpleNamespace

    from graphnorm.sweep import slurm as slurm_module

    monkeypatch.setattr(slurm_module, "queue_states", lambda job_ids: {})
    monkeypatch.setattr(slurm_module, "accounting_states", lambda job_ids: {})
    (config,) = expand_grid(grid(["none"], [0]))
    finished: list[str] = []
    hooks = slurm_module.JobHooks(
        execute=execute_run, record_failed=lambda out, c, e: write_result(out, failed_result(c, e))
    )
    follower = slurm_module._Follower(tmp_path, SlurmOptions(poll_s=0.0, grace_s=0.0), finished.append, hooks, print)
    job = SimpleNamespace(job_id="7_0", paths=SimpleNamespace(result_pickle=tmp_path / "none.pkl", stderr="x.err"))
    follower.tasks[config_run_id(config)] = slurm_module._Task(job, config, time.time())
    (tmp_path / "submitit").mkdir()
    follower._poll()  # seen gone: its result may still be on its way
    assert finished == []
    follower._poll()
    assert finished == [config_run_id(config)] and not follower.tasks
    result = result_of(tmp_path, config_run_id(config))
    assert result["status"] == "failed" and "left the queue" in result["error"] and "no accounting" in result["error"]
    assert json.loads((tmp_path / "submitit" / "jobs.json").read_text()) == {}


def test_scheduler_states_are_read_per_task():
    lines = "12_0|RUNNING\n12_[3-5%2]|PENDING\n13|CANCELLED by 0\n12_1|COMPLETED+\n"
    from graphnorm.sweep.slurm import _parse_states

    assert _parse_states(lines) == {"12_0": "RUNNING", "13": "CANCELLED", "12_1": "COMPLETED"}
