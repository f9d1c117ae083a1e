"""TensorBoard logging of a run (``RunConfig.tensorboard_dir``): watch a long run live, compare runs side by side.

Every run writes to its own folder ``<tensorboard_dir>/<run_id>`` (the sweep's run id, also for a single
``graphnorm train``), so two runs never mix and ``tensorboard --logdir <tensorboard_dir>`` lists one run per
sub-folder: the epochs' curves there (:meth:`TensorBoardLog.epoch`), the final model's collapse metrics over depth in
its sub-folder ``collapse`` (:meth:`TensorBoardLog.probe`), and the collapse over training steps in
``collapse_steps`` (:mod:`graphnorm.train.collapse_steps`). A run that starts again from scratch hides the points of
its earlier attempts (``purge_step=0``); a graph-level run that resumes from its checkpoint at epoch k hides the
earlier attempt's points from step k on.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from graphnorm.config import RunConfig, config_run_id
from graphnorm.files import check_output_dir

FLUSH_SECS = 10  # the writer's own flush period (epoch() also flushes at the end of every epoch)
PARTS = ("collapse", "collapse_steps")  # the sub-folders of a run's folder (TensorBoardLog's ``part``)
SKIPPED_HISTORY_KEYS = ("epoch", "step", "train_time_s")  # counters and timings, not curves


def require_tensorboard() -> None:
    """``ImportError`` saying how to install it when the ``tensorboard`` package is missing (an optional extra)."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise ImportError(
            "tensorboard_dir needs the tensorboard package: pip install -e '.[tensorboard]' (or pip install "
            "tensorboard), or leave tensorboard_dir unset"
        ) from None


def run_log_dir(tensorboard_dir: str, run_id: str) -> Path:
    """``<tensorboard_dir>/<run_id>``: one folder per run."""
    return Path(tensorboard_dir).expanduser() / run_id


def check_tensorboard_dirs(config: RunConfig) -> None:
    """Before the run: ``tensorboard_dir`` accepts files, and the run's folder in it and that folder's parts
    (:data:`PARTS`), where they exist, are folders, not links (graphnorm makes them);
    :class:`graphnorm.files.OutputPathError` in one line otherwise. Nothing without ``tensorboard_dir``."""
    if config.tensorboard_dir is None:
        return
    check_output_dir(config.tensorboard_dir, f"tensorboard_dir {config.tensorboard_dir}")
    folder = run_log_dir(config.tensorboard_dir, config_run_id(config))
    for path in (folder, *(folder / part for part in PARTS)):
        check_output_dir(path, "the run's TensorBoard folder", links=False, create=False)


def history_tag(key: str) -> str:
    """``train_loss`` -> ``train/loss``, ``val_acc`` -> ``val/acc``; other keys (``lr``) as they are."""
    prefix, sep, rest = key.partition("_")
    return f"{prefix}/{rest}" if sep and prefix in ("train", "val", "test") else key


def collapse_tag(row: dict[str, Any]) -> str | None:
    """The scalar tag of one probe record: ``collapse/<metric>`` for node rows, ``collapse_<rows>/<metric>`` for
    graph-token rows; graph-level per-graph statistics as ``<metric>`` (the mean over graphs), ``<metric>_std`` and
    ``<metric>_pooled`` (the naming of :func:`graphnorm.analysis.collapse`). None for the singular-value spectrum
    (``sv_000``...: many series per layer, in the sweep's ``layers.csv``)."""
    metric = row["metric"]
    if metric.startswith("sv_"):
        return None
    stat = row.get("stat")
    name = metric if stat in (None, "value", "mean") else f"{metric}_{stat}"
    group = "collapse" if row.get("rows", "node") == "node" else f"collapse_{row['rows']}"
    return f"{group}/{name}"


def wait_for_a_later_second(log_dir: Path) -> None:
    """Return once the current second is later than that of every event file in ``log_dir``.

    TensorBoard reads a folder's event files in name order, and ``purge_step`` hides an earlier attempt's points only
    when the new attempt's file comes after it. A name is ``events.out.tfevents.<second>.<host>.<pid>.<counter>``:
    within one second the pid and the per-process counter decide, compared as text (``...10`` before ``...9``), so a
    resumed attempt opened in the same second as the last one waits for the next second.
    """
    while True:
        seconds = []
        for path in log_dir.glob("events.out.tfevents.*"):
            field = path.name.split(".")[3]
            if field.isdigit():
                seconds.append(int(field))
        if not seconds or max(seconds) < int(time.time()):
            return
        time.sleep(0.05)


class TensorBoardLog:
    """A ``SummaryWriter`` on ``<tensorboard_dir>/<run_id>`` (or its sub-folder ``part``); ``epoch(...)`` per epoch,
    ``probe(layers)`` once. ``purge_step``: earlier attempts' points from this step on are hidden (``None``: keep
    all). Raises ``ImportError`` without the ``tensorboard`` package (:func:`require_tensorboard`)."""

    def __init__(self, tensorboard_dir: str, run_id: str, purge_step: int | None = 0, part: str | None = None) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = run_log_dir(tensorboard_dir, run_id)
        if part is not None:  # e.g. "collapse": steps of another kind than epochs
            self.log_dir = self.log_dir / part
        wait_for_a_later_second(self.log_dir)
        self.writer = SummaryWriter(str(self.log_dir), purge_step=purge_step, flush_secs=FLUSH_SECS)

    def epoch(self, epoch: int, row: dict[str, Any], lr: float) -> None:
        """One epoch's row of the record's ``history`` and the learning rate, at step ``epoch`` (0-based, as in the
        history): ``train/loss``, ``val/loss`` (node level), ``val/<metric>``, ``test/<metric>`` (the history's
        ``train_loss``, ``val_loss``, ``val_<metric>``, ``test_<metric>``) and ``lr``; counters and timings
        (:data:`SKIPPED_HISTORY_KEYS`) are left out."""
        for key, value in {**row, "lr": lr}.items():
            if key not in SKIPPED_HISTORY_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(history_tag(key), value, epoch)
        self.writer.flush()  # on disk now: TensorBoard shows the epoch, and a killed run loses none of its points

    def probe(self, layers: list[dict[str, Any]]) -> None:
        """The collapse probe's records (``record["layers"]``) as ``collapse/<metric>`` (:func:`collapse_tag`), with
        the layer index as the step (1 = after the first layer): each metric is a curve over depth, and a sweep's
        runs overlay on the same axes. Write them to their own ``part`` (``"collapse"``): TensorBoard reads a
        folder's event files as one stream and drops the points of steps above a step that comes later, so layer
        steps after epoch steps in one folder could hide curves."""
        for row in layers:
            tag = collapse_tag(row)
            if tag is not None:
                self.writer.add_scalar(tag, row["value"], row["layer"])

    def close(self) -> None:
        self.writer.close()


def open_tensorboard(config: RunConfig, purge_step: int | None = 0, part: str | None = None) -> TensorBoardLog | None:
    """The run's :class:`TensorBoardLog` (``<tensorboard_dir>/<run_id>[/<part>]``), or None without
    ``tensorboard_dir``."""
    if config.tensorboard_dir is None:
        return None
    return TensorBoardLog(config.tensorboard_dir, config_run_id(config), purge_step, part)
