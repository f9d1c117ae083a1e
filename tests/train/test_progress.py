"""Progress a user can follow: a run's epoch lines in its sweep log, and a sweep's line per finished run when its
output is no terminal."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml

import graphnorm.train.progress as progress
from graphnorm.cli import main
from graphnorm.config import config_run_id
from graphnorm.sweep import expand_grid, run_sweep
from graphnorm.train.progress import EpochProgress, SweepProgress, format_seconds

pytestmark = pytest.mark.usefixtures("one_thread")


class Clock:
    """A fake ``time.monotonic``: each test sets the time it wants."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FlushCounter(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    return clock


def test_epoch_lines_first_then_every_interval_then_the_last(clock: Clock) -> None:
    stream = FlushCounter()
    bar = EpochProgress("none-L2-s0-abc", total=10, interval_s=10.0, stream=stream)
    for epoch in range(7):  # 3 s per epoch; early stopping after the 7th
        clock.now += 3.0
        bar.update(epoch, {"train_loss": 1.0 / (epoch + 1), "val_acc": 0.5, "lr": 1e-4})
    bar.close()
    lines = stream.getvalue().splitlines()
    # epoch 1 (first), 5 (12 s after the first line at 3 s... 15 s), then the last one run (7), held back till close
    assert [line.split()[2] for line in lines] == ["1/10", "5/10", "7/10"]
    assert lines[0] == "none-L2-s0-abc epoch 1/10 train_loss 1.0000 val_acc 0.5000 lr 1.000e-04 elapsed 3.0s"
    assert lines[2].endswith("train_loss 0.1429 val_acc 0.5000 lr 1.000e-04 elapsed 21.0s")
    assert stream.flushes >= 3  # each line on its own, not when the buffer fills


def test_last_epoch_already_written_is_not_repeated(clock: Clock) -> None:
    stream = io.StringIO()
    bar = EpochProgress("r", total=2, interval_s=0.0, stream=stream)
    for epoch in range(2):
        clock.now += 1.0
        bar.update(epoch, {"train_loss": 0.5})
    bar.close()
    assert [line.split()[2] for line in stream.getvalue().splitlines()] == ["1/2", "2/2"]


def test_sweep_line_counts_runs_and_estimates_the_time_left(clock: Clock) -> None:
    lines: list[str] = []
    bar = SweepProgress("demo", total=4, log=lines.append, bar=False)
    clock.now += 30.0
    bar.finished("none-L2-s0-abc", "ok", "test_acc", 0.8123, 29.5)
    clock.now += 60.0
    bar.finished("none-L4-s0-def", "failed", None, None, 59.0)
    assert lines == [
        "[1/4] none-L2-s0-abc ok test_acc 0.8123 run 29.5s elapsed 30.0s eta 1m30s",  # 30 s per run, 3 left
        "[2/4] none-L4-s0-def failed run 59.0s elapsed 1m30s eta 1m30s",  # 45 s per run, 2 left
    ]
    assert format_seconds(7384) == "2h03m"


def test_sweep_run_logs_hold_live_epoch_lines_and_no_bars(data_root: Path, tmp_path: Path) -> None:
    """Real Cora runs in a sweep: each log has the run's progress lines (its id, epoch k/N, loss, validation
    accuracy, elapsed), ending with the last epoch; never a tqdm bar (carriage returns); the sweep reports each run."""
    sweep = {
        "name": "progress",
        "base": {"dataset": "cora", "data_root": str(data_root), "epochs": 3, "probe": False},
        "grid": {"num_layers": [2, 3]},
    }
    printed: list[str] = []
    run_sweep(sweep, tmp_path / "out", executor="serial", make_plots=False, log=printed.append)
    run_ids = [config_run_id(config) for config in expand_grid(sweep, log=None)]
    for run_id in run_ids:
        log = (tmp_path / "out" / "logs" / f"{run_id}.log").read_text()
        assert "\r" not in log
        epochs = re.findall(rf"^{run_id} epoch (\d)/3 train_loss \S+ val_acc \S+ test_acc \S+ elapsed \S+s$", log, re.M)
        assert epochs[0] == "1" and epochs[-1] == "3"
    progress_lines = [line for line in printed if line.startswith("[")]
    assert [line.split()[:3] for line in progress_lines] == [["[1/2]", run_ids[0], "ok"], ["[2/2]", run_ids[1], "ok"]]
    assert all(re.search(r" test_acc 0\.\d{4} run \S+ elapsed \S+ eta \S+$", line) for line in progress_lines)


def test_cli_sweep_prints_a_line_per_finished_run_when_not_on_a_terminal(tmp_path: Path, capsys) -> None:
    sweep = {
        "name": "fake",
        "run_fn": "sweep_run_fns:exiting_run",  # test_acc 0.5 (seed 1 fails)
        "grid": {"seed": [0, 2]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--executor", "serial", "--no-plots"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("[")]
    assert [line.split()[0] for line in lines] == ["[1/2]", "[2/2]"]
    assert all(" ok test_acc 0.5000 run " in line for line in lines)
