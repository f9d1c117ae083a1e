"""Sweep reliability: interrupts stop the driver and its workers, results files are validated, bad input at the
edges of ``graphnorm sweep`` / ``graphnorm train`` gets one line.

The interrupt tests run the real command line (``python -m graphnorm.cli sweep``) in a subprocess whose runs are
``tests/sweep_run_fns.py:slow_run``; each run leaves files named after its worker's pid, so the tests can check
that no worker outlives its driver and that no run finishes after the interrupt.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sweep_run_fns import LOG_ENV, MARK_DIR_ENV, SLEEP_ENV, SWEEP, executions, fake_run

from graphnorm.cli import main
from graphnorm.config import config_run_id
from graphnorm.sweep import expand_grid, run_sweep
from graphnorm.sweep.processes import default_sigterm

TESTS = Path(__file__).resolve().parents[1]
FAKE = ["--run-fn", "sweep_run_fns:fake_run", "--executor", "serial", "--no-plots"]
STARTUP_S = 180  # the driver and its forkserver each import torch: slow on a loaded 2-core machine


@pytest.fixture
def run_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """fake_run appends a line per execution here."""
    log = tmp_path / "executions.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    return log


def write_yaml(tmp_path: Path, sweep: dict, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(sweep))
    return path


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (the driver's session: driver, forkserver, workers)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def wait_until(condition, timeout: float, what: str) -> float:
    """Poll ``condition`` until true; return the seconds it took; fail naming ``what`` after ``timeout``."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"{what} (waited {timeout} s)"
        time.sleep(0.05)
    return time.monotonic() - start


# Sets the driver's signal dispositions, then execs the command in argv[2:]: an ignored signal survives exec, so the
# driver would otherwise get whatever the test runner has (a CI runner may ignore SIGTERM).
LAUNCH = """
import os, signal, sys
for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, signal.SIG_DFL)
if sys.argv[1] == "ignore-sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.execv(sys.argv[2], sys.argv[2:])
"""


class SweepProcess:
    """``graphnorm sweep`` in its own session, running ``slow_run`` over ``seeds`` with two workers; started with
    every signal at its default, or (``ignore_sigterm``) with SIGTERM ignored, as a CI runner or supervisor may
    leave it."""

    def __init__(
        self, tmp_path: Path, seeds: int = 6, sleep: float = 4.0, workers: int = 2, ignore_sigterm: bool = False
    ):
        self.out, self.marks = tmp_path / "out", tmp_path / "marks"
        self.marks.mkdir()
        self.config = tmp_path / "sweep.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "name": "t",
                    "run_fn": "sweep_run_fns:slow_run",
                    "base": {"dataset": "cora", "epochs": 1},
                    "grid": {"seed": list(range(seeds))},
                }
            )
        )
        pythonpath = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": pythonpath, MARK_DIR_ENV: str(self.marks), SLEEP_ENV: str(sleep)}
        command = [sys.executable, "-m", "graphnorm.cli", "sweep", str(self.config), "--out", str(self.out)]
        command += ["--workers", str(workers), "--no-plots"]
        command = [sys.executable, "-c", LAUNCH, "ignore-sigterm" if ignore_sigterm else "default", *command]
        self.stderr = tmp_path / "driver.err"
        with open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(
                command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err
            )

    def wait_for(self, condition, what: str) -> None:
        """wait_until ``condition`` for up to STARTUP_S, failing at once, with the driver's stderr, if the driver
        exits first (e.g. a broken import): it would never come true."""

        def met() -> bool:
            if condition():
                return True
            assert self.proc.poll() is None or condition(), f"{what}: the driver exited: {self.stderr.read_text()}"
            return False

        wait_until(met, STARTUP_S, what)

    def worker_pids(self) -> set[int]:
        return {int(p.name.split("-")[0]) for p in self.marks.glob("*.started")}

    def finished_at(self) -> list[float]:
        return [float(p.read_text()) for p in self.marks.glob("*.finished")]

    def result_ids(self) -> set[str]:
        return {p.stem for p in (self.out / "results").glob("*.json")}

    def kill_all(self) -> None:
        """Test cleanup: whatever is left of the sweep's process group."""
        for pid in self.worker_pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def start_sweep(tmp_path: Path):
    """Start a :class:`SweepProcess` (its keywords), and kill what is left of it after the test."""
    started = []

    def start(**kwargs) -> SweepProcess:
        started.append(SweepProcess(tmp_path, **kwargs))
        return started[-1]

    yield start
    for process in started:
        process.kill_all()


def lock_is_free(out: Path) -> bool:
    with open(out / ".sweep.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "whole_group", "code"),
    [(signal.SIGINT, False, 130), (signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
    ids=["sigint-driver", "ctrl-c-group", "sigterm-driver"],
)
def test_interrupt_stops_driver_and_workers(start_sweep, signum, whole_group: bool, code: int):
    # SIGTERM with SIGTERM ignored where the driver started: `kill PID` must stop a sweep whatever launched it.
    sweep = start_sweep(ignore_sigterm=signum == signal.SIGTERM)
    sweep.wait_for(lambda: len(sweep.finished_at()) >= 2, "the sweep finished no run")
    wait_until(lambda: len(sweep.worker_pids()) >= 2 and len(sweep.result_ids()) >= 2, 10, "no second run started")
    workers = sweep.worker_pids()
    interrupted_at = time.time()
    if whole_group:  # Ctrl-C on a terminal: the driver, its forkserver and its workers all get SIGINT
        os.killpg(sweep.proc.pid, signum)
    else:
        os.kill(sweep.proc.pid, signum)
    # Seconds, with slack for a heavily loaded 2-core machine; a driver that ignored the signal would not exit
    # before the whole grid had run, and the assertion on finish times below catches any run let through.
    took = wait_until(lambda: sweep.proc.poll() is not None, 20, "the driver did not exit")
    assert sweep.proc.returncode == code, sweep.stderr.read_text()
    assert took < 15
    assert not [pid for pid in workers if alive(pid)], "workers outlived their driver"
    assert "interrupted" in sweep.stderr.read_text()
    time.sleep(1.0)
    assert all(t < interrupted_at for t in sweep.finished_at()), "a run finished after the interrupt"
    finished = sweep.result_ids()
    assert 2 <= len(finished) < 6
    runs = pd.read_csv(sweep.out / "runs.csv")  # current: every finished run, nothing else
    assert set(runs.run_id) == finished and (runs.status == "ok").all()
    assert lock_is_free(sweep.out)


def test_default_sigterm_undoes_only_an_inherited_ignore():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup's: stays
        default_sigterm()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN

        def handler(signum, frame):  # the embedding program's own
            pass

        signal.signal(signal.SIGTERM, handler)
        default_sigterm()
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        for signum, disposition in saved.items():
            signal.signal(signum, disposition)


@pytest.mark.slow
def test_workers_exit_when_their_driver_is_killed(start_sweep):
    # kill -9 of the driver alone: no cleanup code runs in it, so each worker must notice on its own.
    sweep = start_sweep()
    sweep.wait_for(lambda: len(sweep.worker_pids()) >= 2, "the sweep started no runs")
    workers = sweep.worker_pids()
    os.kill(sweep.proc.pid, signal.SIGKILL)
    killed_at = time.time()
    sweep.proc.wait()
    wait_until(lambda: not any(alive(pid) for pid in workers), 15, "workers outlived their killed driver")
    time.sleep(1.0)
    assert all(t < killed_at for t in sweep.finished_at()), "a run finished after its driver was killed"
    assert not any(alive(pid) for pid in sweep.worker_pids())
    # The forkserver ends itself when its driver is gone (its interpreter's exit takes a few seconds under load).
    wait_until(lambda: not group_members(sweep.proc.pid), 10, "the forkserver outlived its killed driver")


# ----------------------------------------------------------------------------------------------------------------
# Results files are validated: an invalid one is named and its run redone, never silently dropped

SMALL = {**SWEEP, "grid": {"norm": ["none"], "num_layers": [2], "seed": [0, 1, 2]}}
INVALID_RESULTS = {
    "null": ("null", "not a JSON object"),
    "empty-object": ("{}", "lacks"),
    "list": ("[]", "not a JSON object"),
    "status-only": ('{"status": "ok"}', "lacks"),
    "bad-status": (None, "status"),
    "other-run-id": (None, "run_id"),
    "config-list": (None, "config"),
    "layers-mapping": (None, "layers"),
    "history-rows-without-epoch": (None, "history"),
    "record-list": (None, "record"),
    "truncated": (None, "not valid JSON"),
    "binary": (None, "not valid JSON"),
}


def corrupt(path: Path, case: str) -> None:
    text, _ = INVALID_RESULTS[case]
    if text is not None:
        path.write_text(text)
        return
    valid = json.loads(path.read_text())
    if case == "truncated":
        path.write_text(path.read_text()[:40])
    elif case == "binary":
        path.write_bytes(bytes(range(256)))
    else:
        key, value = {
            "bad-status": ("status", "done"),
            "other-run-id": ("run_id", "none-L2-s9-0000000000"),
            "config-list": ("config", []),
            "layers-mapping": ("layers", {}),
            "history-rows-without-epoch": ("history", [{"loss": 1.0}]),
            "record-list": ("record", [0.5]),
        }[case]
        path.write_text(json.dumps({**valid, key: value}))


@pytest.mark.parametrize("case", list(INVALID_RESULTS))
def test_invalid_results_file_is_named_and_its_run_redone(tmp_path, run_log, capsys, case):
    out = tmp_path / "out"
    run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False)
    victim = out / "results" / f"{config_run_id(expand_grid(SMALL)[1])}.json"
    corrupt(victim, case)
    capsys.readouterr()

    # --dry-run names it, and calls its run invalid (to be run again).
    assert main(["sweep", "--dry-run", str(write_yaml(tmp_path, SMALL)), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "1 invalid" in captured.out and "2 done" in captured.out
    warnings = [line for line in captured.err.splitlines() if str(victim) in line]
    assert len(warnings) == 1 and INVALID_RESULTS[case][1] in warnings[0], captured.err

    # --retry-failed (a crash before) and a plain resume both run it again and keep every grid point.
    runs = run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False, retry_failed=True)
    assert len(executions(run_log)) == 4
    assert str(victim) in capsys.readouterr().err
    assert len(runs) == 3 and (runs.status == "ok").all()
    assert len(pd.read_csv(out / "runs.csv")) == 3
    assert json.loads(victim.read_text())["status"] == "ok"
    run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False)
    assert len(executions(run_log)) == 4 and capsys.readouterr().err == ""


def test_valid_results_of_old_layout_still_resume(tmp_path, run_log):
    # A results file without 'history' (written before learning curves were recorded) is valid.
    out = tmp_path / "out"
    run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False)
    for path in (out / "results").glob("*.json"):
        result = json.loads(path.read_text())
        del result["history"]
        path.write_text(json.dumps(result))
    runs = run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False)
    assert len(executions(run_log)) == 3 and len(runs) == 3


# ----------------------------------------------------------------------------------------------------------------
# Output paths are checked before any work


def one_line_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_train_out_creates_missing_folders(tmp_path: Path, data_root: Path, capsys):
    config = write_yaml(tmp_path, {"dataset": "cora", "num_layers": 2, "hidden_channels": 8, "epochs": 1}, "run.yaml")
    record = tmp_path / "new" / "folders" / "record.json"
    assert main(["train", str(config), "probe=false", "--out", str(record)]) == 0
    assert json.loads(record.read_text())["test_acc"] == json.loads(capsys.readouterr().out.split("\n(")[0])["test_acc"]


def test_diverged_run_is_one_line_for_train_and_a_failed_run_for_sweep(tmp_path: Path, data_root: Path, capsys):
    base = {"dataset": "cora", "num_layers": 2, "hidden_channels": 8, "epochs": 4, "probe": False}
    config = write_yaml(tmp_path, {**base, "lr": 1.0e30}, "run.yaml")
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip()  # the first epoch's progress line, then the error
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("graphnorm train: error: training diverged: the training loss is nan at epoch 2;")
    # In a sweep the diverged run is recorded as failed with the same words, and the others run.
    sweep = write_yaml(tmp_path, {"name": "d", "base": base, "grid": {"lr": [0.01, 1.0e30]}})
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--executor", "serial", "--no-plots"]) == 1
    runs = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("lr")
    assert runs.loc[0.01, "status"] == "ok" and runs.loc[1.0e30, "status"] == "failed"
    assert "training diverged" in runs.loc[1.0e30, "error"]


@pytest.mark.parametrize("where", ["under-a-file", "a-directory"])
def test_train_out_that_cannot_be_written_fails_before_training(tmp_path: Path, capsys, where: str):
    config = write_yaml(tmp_path, {"dataset": "cora", "num_layers": 2, "epochs": 1}, "run.yaml")
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "record.json" if where == "under-a-file" else tmp_path
    # The data root is a file: training would fail loudly, so exit 2 with this one line means it never started.
    assert main(["train", str(config), f"data_root={tmp_path / 'file'}", "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert f"--out {out}" in err and ("is a directory" in err or "cannot be written" in err)
    assert capsys.readouterr().out == ""


def test_sweep_out_that_cannot_be_written_is_one_line(tmp_path: Path, run_log: Path, capsys):
    (tmp_path / "file").write_text("")
    for out in (tmp_path / "file", tmp_path / "file" / "out"):
        assert main(["sweep", str(write_yaml(tmp_path, SMALL)), "--out", str(out), *FAKE]) == 2
        err = one_line_error(capsys)
        assert f"--out {out}" in err and "cannot be written" in err
    assert executions(run_log) == []


# ----------------------------------------------------------------------------------------------------------------
# Sweep and train inputs: YAML files, grids, overrides, metrics, norm: all


@pytest.mark.parametrize("command", ["sweep", "train"])
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("base:\n  epochs: 3\n  lr: 0.1\n  epochs: 4\n", r"config.yaml:4:3: duplicate key 'epochs'"),
        ("name: a\nname: b\n", r"config.yaml:2:1: duplicate key 'name'"),
        ("base: {epochs: 3\ngrid: [", r"config.yaml:\d+:\d+: YAML syntax error: "),
        ("base:\n\tepochs: 3\n", r"config.yaml:2:1: YAML syntax error: found character '\\t'"),
        (b"\xff\xfe\x00bin", "cannot be read"),
    ],
    ids=["duplicate-nested", "duplicate-top", "unclosed", "tab", "binary"],
)
def test_yaml_errors_name_file_line_and_column(tmp_path, capsys, command, text, message):
    path = tmp_path / "config.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main([command, str(path), "--dry-run"] if command == "sweep" else [command, str(path)]) == 2
    err = one_line_error(capsys)
    assert str(path) in err
    assert __import__("re").search(message, err), err


@pytest.mark.parametrize("command", ["sweep", "train"])
def test_config_path_that_is_a_directory_or_empty(tmp_path, capsys, command):
    assert main([command, str(tmp_path)]) == 2
    assert "is a directory" in one_line_error(capsys)
    if command == "sweep":  # (an empty train config is all defaults, as before)
        (tmp_path / "empty.yaml").write_text("# nothing yet\n")
        assert main([command, str(tmp_path / "empty.yaml")]) == 2
        assert "is empty" in one_line_error(capsys)


@pytest.mark.parametrize("grid", ["grid: {}", "grid: null", ""], ids=["empty", "null", "missing"])
def test_sweep_without_grid_is_an_error(tmp_path, run_log, capsys, grid):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"name: t\nbase: {{dataset: cora, epochs: 1}}\n{grid}\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), *FAKE]) == 2
    assert "grid" in one_line_error(capsys)
    assert executions(run_log) == [] and not (tmp_path / "out").exists()


def test_overrides_after_options(tmp_path, run_log, capsys):
    path, out = write_yaml(tmp_path, SMALL), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), *FAKE, "base.epochs=5", "--workers", "1", "grid.seed=[7]"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs.epochs.tolist() == [5] and runs.seed.tolist() == [7] and len(executions(run_log)) == 1
    dry_run = ["sweep", "--dry-run", str(path), "--out", str(out), "grid.seed=[7]", "--metric", "test_acc"]
    assert main([*dry_run, "base.epochs=5"]) == 0
    assert "1 runs (1 done, 0 failed, 0 missing)" in capsys.readouterr().out


def test_unknown_metric_names_the_valid_ones(tmp_path, run_log, capsys):
    path, out = write_yaml(tmp_path, SMALL), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), *FAKE]) == 0
    capsys.readouterr()
    for extra in (["--dry-run"], FAKE):
        assert main(["sweep", str(path), "--out", str(out), "--metric", "test_acc_typo", *extra]) == 2
        err = one_line_error(capsys)
        assert "metric 'test_acc_typo'" in err and "test_acc" in err and "val_acc" in err
    assert len(executions(run_log)) == 3


def test_norm_all_leaves_out_norms_the_model_cannot_run(tmp_path, capsys):
    from graphnorm.config import RunConfig, unsupported_norm_reason
    from graphnorm.norms import available_norms

    sweep = {"name": "all", "base": {"dataset": "cora", "epochs": 1}, "grid": {"norm": "all", "num_layers": [2]}}
    path = write_yaml(tmp_path, sweep)
    assert main(["sweep", "--dry-run", str(path), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    left_out = {n for n in available_norms() if unsupported_norm_reason(RunConfig(dataset="cora", norm=n))}
    assert left_out == {"sepnorm"}  # the norms this test is about; a new one extends it
    notes = [line for line in printed.splitlines() if "leaves out" in line]
    assert len(notes) == 1 and "sepnorm" in notes[0] and "graph-token rows" in notes[0]
    assert f"{len(available_norms()) - 1} runs" in printed and "sepnorm-L2" not in printed
    # Listed by name, the same norm is an error before any run.
    assert main(["sweep", "--dry-run", str(path), "grid.norm=[none, sepnorm]"]) == 2
    assert "sepnorm needs graph-token rows" in one_line_error(capsys)


@pytest.mark.slow
def test_second_sweep_in_one_out_and_config_edited_while_running(tmp_path: Path, monkeypatch, capsys):
    sweep = SweepProcess(tmp_path, seeds=2, sleep=3.0)
    try:
        sweep.wait_for(lambda: len(sweep.worker_pids()) >= 1, "the sweep started no run")
        # A second sweep into the same --out (another process) is refused while the first runs.
        assert main(["sweep", str(sweep.config), "--out", str(sweep.out), "--no-plots"]) == 2
        assert "another sweep is running" in one_line_error(capsys)
        # Editing the config does not change the running sweep: it read its grid once, at start.
        edited = yaml.safe_load(sweep.config.read_text())
        sweep.config.write_text(yaml.safe_dump({**edited, "grid": {"seed": [0, 1, 2]}}))
        wait_until(lambda: sweep.proc.poll() is not None, 60, "the sweep did not finish")
    finally:
        sweep.kill_all()
    assert sweep.proc.returncode == 0, sweep.stderr.read_text()
    assert pd.read_csv(sweep.out / "runs.csv").seed.tolist() == [0, 1]
    # The next invocation says the config changed since the last sweep into OUT, and runs only the new point.
    monkeypatch.setenv(MARK_DIR_ENV, str(sweep.marks))
    monkeypatch.setenv(SLEEP_ENV, "0")
    monkeypatch.syspath_prepend(str(TESTS))
    assert main(["sweep", str(sweep.config), "--out", str(sweep.out), "--executor", "serial", "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert "differs from the one last run" in printed and "grid" in printed
    assert "3 runs, 2 already done, 1 to run" in printed


# ----------------------------------------------------------------------------------------------------------------
# Resume after an interrupt: leftover temporary files, logs of earlier attempts


def test_resume_removes_leftover_temporary_files(tmp_path, run_log):
    out = tmp_path / "out"
    run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False)
    victim = config_run_id(expand_grid(SMALL)[2])
    (out / "results" / f"{victim}.json").unlink()
    # What a kill between writing and renaming leaves (atomic_write_text's names), here and in results/.
    leftovers = [out / "results" / f".{victim}.json.4242.tmp", out / ".runs.csv.4242.tmp", out / ".layers.csv.7.tmp"]
    for path in leftovers:
        path.write_text('{"run_id": "half')
    unrelated = out / "results" / "notes.tmp"  # not an atomic write's file: left alone
    unrelated.write_text("mine")
    run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False)
    assert not [p for p in leftovers if p.exists()] and unrelated.exists()
    assert len(executions(run_log)) == 4


def test_rerun_appends_to_the_log_of_the_earlier_attempt(tmp_path, run_log):
    out = tmp_path / "out"
    run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False)
    run_id = config_run_id(expand_grid(SMALL)[0])
    (out / "results" / f"{run_id}.json").unlink()  # as if the first attempt had been interrupted
    run_sweep(SMALL, out, run_fn=fake_run, executor="serial", make_plots=False)
    lines = (out / "logs" / f"{run_id}.log").read_text().splitlines()
    # Two attempts, each under its own line saying when it started: the first one's output is kept.
    assert len(lines) == 4 and lines[1] == lines[3] == "training output that belongs in the run's log"
    assert lines[0].startswith("==== attempt started ") and lines[2].startswith("==== attempt started ")


# ----------------------------------------------------------------------------------------------------------------
# What else users and broken machines do


def test_run_function_that_fails_to_import_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    path = write_yaml(tmp_path, {**SMALL, "run_fn": "sweep_import_error_fns:run"})
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = one_line_error(capsys)
    assert "sweep_import_error_fns" in err and "RuntimeError: this module is broken on purpose" in err


def test_run_function_calling_sys_exit_is_a_failed_run(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    out = tmp_path / "out"
    args = ["sweep", str(write_yaml(tmp_path, SMALL)), "--out", str(out), "--executor", "serial", "--no-plots"]
    assert main([*args, "--run-fn", "sweep_run_fns:exiting_run"]) == 1  # finished, with a failed run
    runs = pd.read_csv(out / "runs.csv")
    assert runs.status.tolist() == ["ok", "failed", "ok"] and runs.error.iloc[1] == "SystemExit: 3"


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_workers_below_one_is_one_line(tmp_path, run_log, capsys, workers):
    assert (
        main(["sweep", str(write_yaml(tmp_path, SMALL)), "--out", str(tmp_path / "out"), *FAKE, "--workers", workers])
        == 2
    )
    assert f"workers must be >= 1, got {workers}" in one_line_error(capsys)
    assert executions(run_log) == []


def test_results_folder_taken_by_a_file_is_refused_before_any_run(tmp_path, run_log, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results").write_text("not a folder")
    assert main(["sweep", str(write_yaml(tmp_path, SMALL)), "--out", str(out), *FAKE]) == 2
    err = one_line_error(capsys)
    assert "results" in err and "not a folder" in err
    assert executions(run_log) == []  # checked before the first run, not after it trained
    assert (out / "results").read_text() == "not a folder"


def test_results_that_cannot_be_written_stop_the_sweep_in_one_line(tmp_path, run_log, capsys, monkeypatch):
    # Every results write fails, as on a full disk: the sweep stops at the first lost result, not after the grid.
    from graphnorm import files

    def full_disk(path, text, what=None):
        if Path(path).parent.name == "results":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        files.atomic_write_text(path, text, what)

    monkeypatch.setattr("graphnorm.sweep.runner.atomic_write_text", full_disk)
    out = tmp_path / "out"
    assert main(["sweep", str(write_yaml(tmp_path, SMALL)), "--out", str(out), *FAKE]) == 2
    err = one_line_error(capsys)
    assert "cannot write" in err and "results" in err
    assert len(executions(run_log)) == 1
    assert pd.read_csv(out / "runs.csv").empty
