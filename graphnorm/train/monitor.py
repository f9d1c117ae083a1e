"""CollapseMonitor: collapse metrics of the weights being trained, every N steps of the user's own training loop.

Built once with the model and a fixed sample, called once per optimizer step::

    monitor = CollapseMonitor(model, data, every=10, out_dir="runs/mine", tensorboard="runs/mine/tb")
    for step in range(steps):
        monitor.step(step)  # probes at step 0, 10, 20, ...: the weights before that step's update
        train_one_step()

It makes the trainer's ``probe_every_steps`` measurement (:mod:`graphnorm.train.collapse_steps`): the same rows and
TensorBoard tags, the random state restored after each probe so the loop trains exactly as without it, and a CSV
that grows by whole steps and lets an interrupted loop go on where it stopped (:mod:`.monitor_csv`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from graphnorm.analysis.probe import CollapseProbe, LayerSpec
from graphnorm.checks import check_count
from graphnorm.files import check_output_dir
from graphnorm.train.collapse_steps import STEP_SINGULAR_VALUES, log_step_rows, preserved_rng, step_scalars
from graphnorm.train.monitor_csv import StepCsv
from graphnorm.train.record import STEP_COLUMNS
from graphnorm.train.tensorboard_log import TensorBoardLog

__all__ = ["CollapseMonitor", "MONITOR_CSV", "monitor_sample", "preserved_random_state", "step_scalars"]

MONITOR_CSV = "collapse_steps.csv"  # in out_dir: the tidy rows, STEP_COLUMNS [+ split]


@contextlib.contextmanager
def preserved_random_state() -> Iterator[None]:
    """Restore, when the block ends, torch's random state (CPU and every CUDA device), Python's ``random`` and NumPy's
    global generator: whatever the block draws, the code after it draws what it would have drawn without it."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with preserved_rng():
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def monitor_sample(sample: Any) -> Any:
    """``sample`` checked and ready to probe: a PyG ``Data``/``Batch`` (node level: the graph; graph level: a batch
    of graphs, e.g. :func:`graphnorm.analysis.probe.evaluation_sample`), or a list of ``Data`` made one ``Batch``.

    Raises:
        TypeError: not a graph (no ``num_nodes``), or a list holding something else than graphs.
        ValueError: an empty list, a graph without nodes, or node features ``x`` that are not all finite.
    """
    if isinstance(sample, (list, tuple)):
        from torch_geometric.data import Batch, Data

        if not sample:
            raise ValueError("CollapseMonitor: sample is an empty list; give a graph or a non-empty list of graphs")
        if not all(isinstance(graph, Data) for graph in sample):
            kinds = sorted({type(graph).__name__ for graph in sample})
            raise TypeError(f"CollapseMonitor: a sample list must hold PyG Data graphs, got {', '.join(kinds)}")
        sample = Batch.from_data_list(list(sample))
    num_nodes = getattr(sample, "num_nodes", None)
    if num_nodes is None:
        raise TypeError(
            f"CollapseMonitor: sample must be a PyG Data or Batch (or a list of Data), got {type(sample).__name__}"
        )
    if num_nodes == 0:
        raise ValueError("CollapseMonitor: the sample has no nodes; give a graph (or graphs) with nodes to probe")
    x = getattr(sample, "x", None)
    if isinstance(x, Tensor) and x.is_floating_point() and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).any(dim=-1).sum()) if x.dim() > 1 else int((~torch.isfinite(x)).sum())
        raise ValueError(
            f"CollapseMonitor: the sample's node features x hold NaN or infinite values ({bad} of {num_nodes} nodes); "
            "every metric of every layer would be NaN: clean the features first"
        )
    return sample


class CollapseMonitor:
    """Per-layer collapse metrics of ``model`` on a fixed ``sample`` every ``every`` steps of any training loop.

    ``monitor.step(step)`` (or ``monitor(step)``) probes when ``step`` is a multiple of ``every``: call it once per
    optimizer step with the number of steps done so far, so step 0 measures the initial weights. It returns the
    probe's rows as a DataFrame (columns :data:`~graphnorm.train.record.STEP_COLUMNS` [+ split]; ``epoch`` when
    given), or None when the step is not probed: not a multiple of ``every``, or already in the table (a loop that
    calls twice per step, gradient accumulation, or a resumed loop repeating written steps).

    A probe is :class:`graphnorm.analysis.CollapseProbe` on the model as it is (its weights of that moment, eval
    mode, ``torch.no_grad``, the training mode restored afterwards) inside :func:`preserved_random_state`, so the
    training draws the same random numbers (dropout masks, shuffling) as without the monitor.

    Args:
        model: the model being trained (any ``nn.Module`` the probe can watch: see ``layers``).
        sample: what to probe (:func:`monitor_sample`): node level the graph, graph level a fixed batch or list of
            graphs (e.g. :func:`graphnorm.analysis.probe.evaluation_sample` of the validation split); never changed:
            when the model is on another device, the monitor probes a copy moved there.
        every: probe every ``every`` steps (> 0).
        out_dir: folder of the tidy CSV ``collapse_steps.csv`` (:data:`MONITOR_CSV`), created and checked here,
            and held by this monitor until :meth:`close` (or garbage collection, or exit): a second monitor on it is
            refused; None: rows kept in memory only (:attr:`table`).
        tensorboard: a log folder (a ``SummaryWriter`` is opened on it) or an open ``SummaryWriter`` (left open by
            :meth:`close`); scalars ``collapse/<metric>/layer_<k>`` at the step (:func:`step_scalars`).
        layers: which layers to watch, as in :class:`~graphnorm.analysis.CollapseProbe` (default: its choice).
        forward: ``forward(model, sample)`` running the model, as in the probe (default: its call).
        at: ``"output"`` (default) or ``"input"``: the rows leaving or entering the watched layers.
        num_singular_values: spectrum entries per layer and probe (``sv_000``...); default none, as the trainer's.
        split: a label added to every row as ``split``.
        start_step: the first step of a resumed loop: rows of steps ``>= start_step`` already in the CSV (written by
            the interrupted attempt, after its last checkpoint) are dropped, and TensorBoard hides its points from
            there. None: keep every written row (steps written are not probed again).

    Raises:
        ValueError: ``every`` not a positive integer, a bad sample (:func:`monitor_sample`), an existing CSV of
            other columns or with a row it cannot read (file and line named), or a model the probe cannot watch;
            :class:`graphnorm.files.OutputPathError` (a ``ValueError``) for an ``out_dir`` that cannot be written or
            a CSV path that is a symlink, FIFO, device or folder (also when one is put there later).
        RuntimeError: another monitor holds ``out_dir`` (:class:`graphnorm.files.OutputBusyError`); later, a probe
            whose rows cannot be written (a full disk: the file keeps its whole steps and the step can be probed
            again), a CSV changed by something else meanwhile, or a probe after :meth:`close`.
        TypeError: a sample that is not a graph, or ``tensorboard`` neither a folder nor a writer.
    """

    def __init__(
        self,
        model: nn.Module,
        sample: Any,
        every: int = 10,
        out_dir: str | os.PathLike | None = None,
        tensorboard: Any = None,
        *,
        layers: LayerSpec | None = None,
        forward: Callable[[nn.Module, Any], Any] | None = None,
        at: str = "output",
        num_singular_values: int = STEP_SINGULAR_VALUES,
        split: str | None = None,
        start_step: int | None = None,
    ) -> None:
        every = check_count(every, "every", "CollapseMonitor", needed="a positive integer (probe every N steps)")
        if start_step is not None:
            _check_step(start_step, "start_step")
        self.sample = monitor_sample(sample)
        self.every = every
        self.probe = CollapseProbe(
            model, layers=layers, forward=forward, at=at, num_singular_values=num_singular_values, split=split
        )
        self.columns = [*STEP_COLUMNS, *(["split"] if split is not None else [])]
        _check_writer(tensorboard)
        self._moved: tuple[torch.device, Any] | None = None  # the sample's copy on the model's device
        self.closed = False
        self.csv: StepCsv | None = None
        if out_dir is not None:
            check_output_dir(out_dir, "CollapseMonitor out_dir")
            self.csv = StepCsv(Path(out_dir), MONITOR_CSV, self.columns, start_step)
        try:
            self.writer, self._own_writer = _open_writer(tensorboard, start_step)
        except BaseException:
            self.close()
            raise
        self._tables: list[pd.DataFrame] = [self.csv.kept] if self.csv is not None else []
        self._written: set[int] = set(self.csv.kept["step"].tolist()) if self.csv is not None else set()
        self.seconds = 0.0  # time spent probing, logging and writing in this process

    @property
    def path(self) -> Path | None:
        """The CSV's path, or None without ``out_dir``."""
        return None if self.csv is None else self.csv.path

    @property
    def table(self) -> pd.DataFrame:
        """Every row so far: those already in the CSV when the monitor opened it, then this process's probes."""
        tables = [table for table in self._tables if len(table)]
        if not tables:
            return pd.DataFrame(columns=self.columns)
        return pd.concat(tables, ignore_index=True)

    def step(self, step: int, epoch: int | None = None) -> pd.DataFrame | None:
        """Probe if ``step`` is a multiple of ``every`` and not yet in the table; the rows, else None."""
        _check_step(step, "step")
        return None if step % self.every else self.probe_now(step, epoch)

    __call__ = step

    def probe_now(self, step: int, epoch: int | None = None) -> pd.DataFrame | None:
        """Probe now, whatever ``every`` says, and record the rows at ``step`` (e.g. the final weights); None, and no
        probe, when ``step`` is already in the table (a step is written once)."""
        _check_step(step, "step")
        if epoch is not None:
            _check_step(epoch, "epoch")
        if self.closed:
            raise RuntimeError(
                f"CollapseMonitor: probe of step {step} after close(); open a new monitor (the same out_dir goes on)"
            )
        if step in self._written:
            return None
        start = time.perf_counter()
        sample = self._sample_on_model_device()
        if any(parameter.is_meta for parameter in self.probe.model.parameters()):
            raise ValueError(
                "CollapseMonitor: the model's parameters are on the meta device (shapes without values): there is "
                "nothing to measure; give them values first (model.to_empty(device=...) and load the weights)"
            )
        with preserved_random_state():
            records = self.probe.probe_records(sample)
        rows = [{"step": step, "epoch": epoch, **record} for record in records]
        table = pd.DataFrame.from_records(rows, columns=self.columns).astype({"epoch": "Int64"})
        if self.csv is not None:
            self.csv.append(table, step)
        if self.writer is not None:
            log_step_rows(self.writer, rows)
        self._tables.append(table)
        self._written.add(step)
        self.seconds += time.perf_counter() - start
        return table

    def _sample_on_model_device(self) -> Any:
        """The sample, or when the model's parameters are on another device (a model moved to the GPU after the
        monitor was built) a copy of it there, made once per device. A copy: PyG's ``Data.to`` moves a graph in
        place, which would move (or, to the meta device, destroy) the caller's own tensors."""
        parameter = next(self.probe.model.parameters(), None)
        x = getattr(self.sample, "x", None)
        if parameter is None or not isinstance(x, Tensor) or x.device == parameter.device:
            return self.sample
        if self._moved is None or self._moved[0] != parameter.device:
            self._moved = (parameter.device, copy.copy(self.sample).to(parameter.device))
        return self._moved[1]

    def close(self) -> None:
        """Release ``out_dir`` (another monitor may open it) and close the TensorBoard writer the monitor opened
        (one given to it stays open); :attr:`table` stays readable, a later probe is an error."""
        self.closed = True
        if self.csv is not None:
            self.csv.close()
        if getattr(self, "writer", None) is not None and self._own_writer:
            self.writer.close()

    def __enter__(self) -> CollapseMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_step(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"CollapseMonitor: {what} must be an integer >= 0, got {value!r}")


def _check_writer(tensorboard: Any) -> None:
    writer = tensorboard is None or hasattr(tensorboard, "add_scalar")
    if not writer and not isinstance(tensorboard, (str, os.PathLike)):
        raise TypeError(
            f"CollapseMonitor: tensorboard must be a log folder or a SummaryWriter, got {type(tensorboard).__name__}"
        )


def _open_writer(tensorboard: Any, start_step: int | None) -> tuple[Any, bool]:
    """(writer, whether the monitor opened it): a ``SummaryWriter`` given as it is, or one on the log folder given
    (:class:`~graphnorm.train.tensorboard_log.TensorBoardLog`: points from ``start_step`` on hidden; none without)."""
    if tensorboard is None:
        return None, False
    if hasattr(tensorboard, "add_scalar"):
        return tensorboard, False
    folder = Path(tensorboard).expanduser()
    return TensorBoardLog(str(folder.parent), folder.name, purge_step=start_step).writer, True
