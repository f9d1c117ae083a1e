"""Progress of a training run (:class:`EpochProgress`: its epochs) and of a sweep (:class:`SweepProgress`: its runs),
readable live wherever the output goes: flushed plain lines for logs and pipes, and on a terminal a tqdm bar with the
same lines written above it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from tqdm import tqdm

if TYPE_CHECKING:
    from graphnorm.train.tensorboard_log import TensorBoardLog

PROGRESS_INTERVAL_S = 10.0  # at most one epoch line per this many seconds (the first and last epochs always)


def format_seconds(seconds: float) -> str:
    """Seconds with one decimal under a minute, then ``1m05s``, ``2h03m``: short, for progress lines."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_value(value: Any) -> str:
    """A float with 4 decimals (a learning rate in scientific notation), anything else as ``str``."""
    if isinstance(value, float):
        return f"{value:.3e}" if value != 0 and abs(value) < 1e-3 else f"{value:.4f}"
    return str(value)


def on_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: the current ``sys.stderr``, where tqdm draws) is a terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())


class EpochProgress:
    """Progress lines (and, on a terminal, a bar) for the epochs of one run.

    The lines, ``<run_id> epoch 12/200 train_loss 0.4321 val_acc 0.7520 [extras] elapsed 1m05s``, go to stderr
    (stdout stays for results: ``graphnorm train`` prints its record there), flushed, at the first epoch, then at most
    every ``interval_s`` seconds, and at the last epoch run (early stopping and time budgets included), so ``tail -f``
    on a sweep's ``logs/<run_id>.log`` follows a live run. ``epoch k/N`` counts the epochs done (the history's
    ``epoch`` is 0-based: line ``epoch 12/200`` is history epoch 11). On a terminal (stderr is a tty) a tqdm bar of
    epochs is drawn as well, and the lines go through ``tqdm.write`` above it; a sweep worker writes to the run's log,
    which is no terminal, so workers never draw bars.

    ``update(epoch, values)`` after every epoch (``values``: name -> number, in the order to show, the training
    loss and the validation metric first), ``close()`` at the end: it writes the last epoch's line if the rate
    limit held it back.
    """

    def __init__(
        self,
        run_id: str,
        total: int,
        start_epoch: int = 0,
        interval_s: float = PROGRESS_INTERVAL_S,
        stream: TextIO | None = None,
    ) -> None:
        self.run_id, self.total, self.interval_s = run_id, total, interval_s
        self.stream = sys.stderr if stream is None else stream  # taken now: a sweep redirects it to the run's log
        self.bar = tqdm(
            total=total, initial=start_epoch, desc=run_id, unit="epoch", leave=False, disable=not on_terminal()
        )
        self.start = time.monotonic()
        self.last_line_at: float | None = None
        self.pending: str | None = None  # the latest epoch's line, not written yet

    def update(self, epoch: int, values: dict[str, Any]) -> None:
        self.bar.update(1)
        self.bar.set_postfix({name: format_value(value) for name, value in list(values.items())[:2]}, refresh=False)
        now = time.monotonic()
        self.pending = self.line(epoch, values, now - self.start)
        if self.last_line_at is None or now - self.last_line_at >= self.interval_s:
            self._write(now)

    def line(self, epoch: int, values: dict[str, Any], elapsed_s: float) -> str:
        shown = " ".join(f"{name} {format_value(value)}" for name, value in values.items())
        return f"{self.run_id} epoch {epoch + 1}/{self.total} {shown} elapsed {format_seconds(elapsed_s)}"

    def close(self) -> None:
        if self.pending is not None:
            self._write(time.monotonic())
        self.bar.close()

    def _write(self, now: float) -> None:
        if self.bar.disable:
            print(self.pending, file=self.stream, flush=True)
        else:
            tqdm.write(self.pending, file=self.stream)
            self.stream.flush()
        self.pending, self.last_line_at = None, now


class SweepProgress:
    """One line per finished run of a sweep (and, on a terminal or with ``bar=True``, a bar of runs).

    A line reads ``[k/N] <run_id> ok test_acc 0.8120 run 1m05s elapsed 4m10s eta 3m20s`` (the ETA: the mean time
    per finished run so far, times the runs left); it goes through the sweep's ``log`` and is flushed when the output
    is no terminal, and on a terminal it is written above the bar.
    """

    def __init__(self, name: str, total: int, log: Callable[[str], None] = print, bar: bool | None = None) -> None:
        self.total, self.log, self.done = total, log, 0
        # disable=None: tqdm shows the bar only on a terminal.
        self.bar = tqdm(total=total, desc=name, unit="run", disable=None if bar is None else not bar)
        self.start = time.monotonic()

    def finished(self, run_id: str, status: str, metric: str | None, value: Any, run_s: float | None) -> str:
        """Count a finished run and report it; returns the line."""
        self.done += 1
        elapsed = time.monotonic() - self.start
        left = self.total - self.done
        eta = elapsed / self.done * left
        score = f" {metric} {format_value(value)}" if metric is not None and value is not None else ""
        took = f" run {format_seconds(run_s)}" if run_s is not None else ""
        line = (
            f"[{self.done}/{self.total}] {run_id} {status}{score}{took} elapsed {format_seconds(elapsed)} "
            f"eta {format_seconds(eta)}"
        )
        if self.bar.disable:
            self.log(line)
            sys.stdout.flush()  # a pipe is block-buffered: show each line as its run finishes
        else:
            tqdm.write(line)
        self.bar.update(1)
        return line

    def close(self) -> None:
        self.bar.close()


def report_epoch(
    progress: EpochProgress, board: TensorBoardLog | None, row: dict[str, Any], lr: float, shown: tuple[str, ...]
) -> None:
    """One epoch's ``history`` row to the progress line (the keys ``shown``, in order) and to TensorBoard."""
    progress.update(row["epoch"], {key: row[key] for key in shown if key in row})
    if board is not None:
        board.epoch(row["epoch"], row, lr)
