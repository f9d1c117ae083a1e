"""Collapse over training steps: the probe's records every N optimizer steps of a run (``probe_every_steps``).

The final probe (``record["layers"]``, a sweep's ``layers.csv``) measures every layer once, on the trained model. With
``RunConfig.probe_every_steps = N > 0`` the trainer also measures the weights being trained at step 0 (before the
first update) and after every N-th optimizer step (node-level full-batch training: one step = one epoch), on the same
fixed sample the final probe uses (:func:`graphnorm.train.loaders.probe_sample`), without changing the run's results
(:class:`StepProbe`). The rows (:data:`graphnorm.train.record.STEP_COLUMNS`) go to the record's ``collapse_steps``
(a sweep's ``steps.csv``) and, with ``tensorboard_dir``, to the run's TensorBoard sub-folder ``collapse_steps``
(:func:`log_step_rows`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from graphnorm.analysis.probe import probe_records
from graphnorm.config import RunConfig
from graphnorm.data import GraphTask
from graphnorm.train.loaders import probe_sample
from graphnorm.train.record import STEPS_KEY
from graphnorm.train.tensorboard_log import TensorBoardLog, collapse_tag, open_tensorboard

__all__ = ["StepProbe", "check_step_rows", "open_step_probe", "preserved_rng", "step_rows_record"]

STEP_SINGULAR_VALUES = 0  # no spectrum per step: layers.csv has it for the final model


def preserved_rng() -> Any:
    """A context that restores torch's global random state (CPU and every CUDA device) when it ends."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    return torch.random.fork_rng(devices=devices)


@dataclass
class StepProbe:
    """Probes ``model`` on ``sample`` at step 0 and every ``every`` optimizer steps; appends the rows to ``rows``
    (the list the run's state keeps) and logs them to ``board``. ``every=0``: off (:meth:`after_step` does nothing).

    Each probe is :func:`graphnorm.analysis.probe_records` (eval mode, no gradients; the model's mode is restored)
    of the weights being trained, not of the weight average (``ema_decay``) that is evaluated: the average lags the
    weights by about ``1 / (1 - decay)`` steps. A row is a probe record with the ``step`` (optimizer steps done) and
    the ``epoch`` (0-based, the epoch whose training made that step; 0 at step 0) in front; the singular-value
    spectrum is left out (``layers.csv`` has it for the final model). The probe draws no random numbers, and torch's
    global random state is saved and restored around it besides, so a run with the probe on trains exactly as with it
    off: its metrics are bit-identical. Its time (``seconds``) counts in the training loop's time
    (``max_train_minutes``), as the per-epoch evaluation does, but not in the training throughput. A graph-level run
    keeps its rows in its checkpoint, so a resumed run neither loses nor repeats any: rows probed after the last
    checkpoint are probed again when their steps are trained again.
    """

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
            log_step_rows(self.board.writer, rows)
        self.seconds += time.perf_counter() - start

    def close(self) -> None:
        if self.board is not None:
            self.board.close()


def step_scalars(rows: list[dict[str, Any]]) -> dict[str, float]:
    """One scalar per probe row, by tag ``<collapse tag>/layer_<k>`` (``collapse/effective_rank/layer_3``, from
    :func:`graphnorm.train.tensorboard_log.collapse_tag`); the singular-value spectrum is left out."""
    scalars = {}
    for row in rows:
        tag = collapse_tag(row)
        if tag is not None:
            scalars[f"{tag}/layer_{row['layer']}"] = float(row["value"])
    return scalars


def log_step_rows(writer: Any, rows: list[dict[str, Any]]) -> None:
    """The rows of one probe (one optimizer ``step``) as TensorBoard scalars (:func:`step_scalars`) at that step, on
    ``writer`` (a ``SummaryWriter``)."""
    if not rows:
        return
    for tag, value in step_scalars(rows).items():
        writer.add_scalar(tag, value, rows[0]["step"])
    writer.flush()


def check_step_rows(rows: Any) -> None:
    """A run record's ``collapse_steps``: a list of dicts, each with ``step``, ``layer``, ``metric`` and ``value``."""
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise TypeError(f"record[{STEPS_KEY!r}] must be a list of dicts, got {type(rows).__name__}")
    for row in rows:
        missing = [key for key in ("step", "layer", "metric", "value") if key not in row]
        if missing:
            raise ValueError(f"record[{STEPS_KEY!r}] row {row} lacks {missing}")


def open_step_probe(
    config: RunConfig, model: nn.Module, task: GraphTask, device: torch.device, rows: list, start_step: int = 0
) -> StepProbe:
    """The run's collapse-over-steps probe on :func:`graphnorm.train.loaders.probe_sample`, appending to ``rows``;
    off (a probe that does nothing) when ``probe_every_steps`` is 0. ``start_step``: a resumed run's first step, from
    which its earlier attempt's TensorBoard points are hidden."""
    if config.probe_every_steps == 0:
        return StepProbe(rows=rows)
    with preserved_rng():  # building the sample (padded inputs: preprocessing) draws nothing from the training RNG
        sample, split = probe_sample(model, task, config)
    board = open_tensorboard(config, purge_step=start_step, part="collapse_steps")
    return StepProbe(config.probe_every_steps, model, sample.to(device), split, rows, board)


def step_rows_record(config: RunConfig, rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The record's collapse-over-steps keys: :data:`~graphnorm.train.record.STEPS_KEY` (the rows) and
    ``collapse_steps_time_s``; none when ``probe_every_steps`` is 0."""
    if config.probe_every_steps == 0:
        return {}
    return {STEPS_KEY: rows, f"{STEPS_KEY}_time_s": seconds}
