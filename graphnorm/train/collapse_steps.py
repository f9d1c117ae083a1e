"""Collapse over training steps: the probe's records every N optimizer steps of a run (``probe_every_steps``).

The final probe (``record["layers"]``, a sweep's ``layers.csv``) measures every layer once, on the trained model. With
``RunConfig.probe_every_steps = N > 0`` the trainer also measures the weights being trained at step 0 (before the
first update) and after every N-th optimizer step (node-level full-batch training: one step = one epoch), on the same
fixed sample the final probe uses (:func:`graphnorm.train.probe_sample`), with :func:`graphnorm.analysis.probe_records`
(eval mode, no gradients; the model's mode is restored). It probes the trained weights, not the weight average
(``ema_decay``) that is evaluated: the average lags the weights by about ``1 / (1 - decay)`` steps.

The probe draws no random numbers, and :class:`StepProbe` also saves and restores torch's global random state around
it, so a run with the key on trains exactly as with it off (same dropout draws, same batches): its metrics are
bit-identical. Its time counts in the training loop's time (``max_train_minutes``), as the per-epoch evaluation
does, but not in the training throughput (``train_graphs_per_s``); the record keeps it as ``collapse_steps_time_s``.

The rows (:data:`STEP_COLUMNS`; ``record["collapse_steps"]``, a sweep's ``steps.csv``) are the probe's records with
the ``step`` (optimizer steps done) and the ``epoch`` (0-based, the epoch whose training made that step; 0 at step 0)
in front. The singular-value spectrum (``sv_000``...) is left out (``layers.csv`` has it for the final model).
A graph-level run keeps its rows in its checkpoint, so a resumed run neither loses nor repeats any: rows probed
after the last checkpoint are probed again when their steps are trained again.
With ``tensorboard_dir`` every row is also a scalar ``<collapse tag>/layer_<k>`` at the optimizer step, in the run's
sub-folder ``collapse_steps`` (tags as :func:`graphnorm.train.tensorboard_log.collapse_tag`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from graphnorm.analysis.probe import probe_records
from graphnorm.train.record import STEPS_KEY
from graphnorm.train.tensorboard_log import TensorBoardLog, collapse_tag

__all__ = ["STEP_COLUMNS", "StepProbe", "check_step_rows", "preserved_rng"]

STEP_COLUMNS = ("step", "epoch", "layer", "layer_name", "rows", "metric", "stat", "value")
STEP_SINGULAR_VALUES = 0  # no spectrum per step: layers.csv has it for the final model


def preserved_rng() -> Any:
    """A context that restores torch's global random state (CPU and every CUDA device) when it ends."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    return torch.random.fork_rng(devices=devices)


@dataclass
class StepProbe:
    """Probes ``model`` on ``sample`` at step 0 and every ``every`` optimizer steps; appends the rows to ``rows``
    (the list the run's state keeps) and logs them to ``board``. ``every=0``: off (:meth:`after_step` does nothing)."""

    every: int = 0
    model: nn.Module | None = None
    sample: Any = None
    split: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    board: TensorBoardLog | None = None
    seconds: float = 0.0  # time spent probing in this process

    def after_step(self, step: int, epoch: int) -> None:
        """Probe if ``step`` (optimizer steps done so far) is 0 or a multiple of ``every``."""
        if self.every <= 0 or step % self.every:
            return
        start = time.perf_counter()
        with preserved_rng():
            records = probe_records(self.model, self.sample, split=self.split, num_singular_values=STEP_SINGULAR_VALUES)
        rows = [{"step": step, "epoch": epoch, **record} for record in records]
        self.rows.extend(rows)
        if self.board is not None:
            log_step_rows(self.board, rows)
        self.seconds += time.perf_counter() - start

    def close(self) -> None:
        if self.board is not None:
            self.board.close()


def log_step_rows(board: TensorBoardLog, rows: list[dict[str, Any]]) -> None:
    """One scalar per row: ``<collapse tag>/layer_<k>`` at the row's optimizer step."""
    for row in rows:
        tag = collapse_tag(row)
        if tag is not None:
            board.writer.add_scalar(f"{tag}/layer_{row['layer']}", row["value"], row["step"])
    board.writer.flush()


def check_step_rows(rows: Any) -> None:
    """A run record's ``collapse_steps``: a list of dicts, each with ``step``, ``layer``, ``metric`` and ``value``."""
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise TypeError(f"record[{STEPS_KEY!r}] must be a list of dicts, got {type(rows).__name__}")
    for row in rows:
        missing = [key for key in ("step", "layer", "metric", "value") if key not in row]
        if missing:
            raise ValueError(f"record[{STEPS_KEY!r}] row {row} lacks {missing}")
