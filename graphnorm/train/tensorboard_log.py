"""TensorBoard logging of a run (``RunConfig.tensorboard_dir``): watch a long run live, compare runs side by side.

Every run writes to its own folder ``<tensorboard_dir>/<run_id>`` (the sweep's run id, also for a single
``graphnorm train``), so two runs never mix and ``tensorboard --logdir <tensorboard_dir>`` lists one run per
sub-folder. Scalars, with the epoch (0-based, as in the record's ``history``) as the step:

* ``train/loss``, ``val/loss`` (node level), ``val/<metric>``, ``test/<metric>`` (``acc``, ``mae``, ``rocauc``): the
  history's columns ``train_loss``, ``val_loss``, ``val_<metric>``, ``test_<metric>``, one point per epoch run;
* ``lr``: the learning rate at the end of the epoch.

The collapse probe of the final (best-validation) model writes ``collapse/<metric>`` (node rows; ``collapse_token/
<metric>`` for the Graphormer graph token or virtual-node rows) with the **layer index as the step** (1 = after the
first layer), in the run's sub-folder ``collapse`` (``<tensorboard_dir>/<run_id>/collapse``): in TensorBoard's scalar
view each metric is a curve over depth, and the runs of a sweep overlay on the same axes (the depth figure of the
collapse papers). Layer steps live apart from the epoch steps because TensorBoard reads a folder's event files as one
stream and drops the points of steps above a step that comes later (a "restart"): layer steps after epoch steps in
one folder could hide curves. Graph-level runs have per-graph statistics: ``<metric>`` is the
mean over graphs, ``<metric>_std`` and ``<metric>_pooled`` the std and the value over all rows together (the
naming of :func:`graphnorm.analysis.collapse`). The singular-value spectrum (``sv_000``...) is left out (16 series
per layer; it is in the sweep's ``layers.csv``).

A run that starts again from scratch hides the points of its earlier attempts (``purge_step=0``); a graph-level run
that resumes from its checkpoint at epoch k hides the earlier attempt's points from step k on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FLUSH_SECS = 10  # the writer's own flush period (epoch() also flushes at the end of every epoch)
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


def history_tag(key: str) -> str:
    """``train_loss`` -> ``train/loss``, ``val_acc`` -> ``val/acc``; other keys (``lr``) as they are."""
    prefix, sep, rest = key.partition("_")
    return f"{prefix}/{rest}" if sep and prefix in ("train", "val", "test") else key


def collapse_tag(row: dict[str, Any]) -> str | None:
    """The scalar tag of one probe record, or None for the spectrum entries (left out)."""
    metric = row["metric"]
    if metric.startswith("sv_"):
        return None
    stat = row.get("stat")
    name = metric if stat in (None, "value", "mean") else f"{metric}_{stat}"
    group = "collapse" if row.get("rows", "node") == "node" else f"collapse_{row['rows']}"
    return f"{group}/{name}"


class TensorBoardLog:
    """A ``SummaryWriter`` on ``<tensorboard_dir>/<run_id>``; ``epoch(...)`` per epoch, ``probe(layers)`` once."""

    def __init__(self, tensorboard_dir: str, run_id: str, purge_step: int | None = 0, part: str | None = None) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = run_log_dir(tensorboard_dir, run_id)
        if part is not None:  # e.g. "collapse": steps of another kind than epochs
            self.log_dir = self.log_dir / part
        self.writer = SummaryWriter(str(self.log_dir), purge_step=purge_step, flush_secs=FLUSH_SECS)

    def epoch(self, epoch: int, row: dict[str, Any], lr: float) -> None:
        """One epoch's row of the record's ``history`` and the learning rate, at step ``epoch``."""
        for key, value in {**row, "lr": lr}.items():
            if key not in SKIPPED_HISTORY_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(history_tag(key), value, epoch)
        self.writer.flush()  # on disk now: TensorBoard shows the epoch, and a killed run loses none of its points

    def probe(self, layers: list[dict[str, Any]]) -> None:
        """The collapse probe's records (``record["layers"]``), with the layer index as the step."""
        for row in layers:
            tag = collapse_tag(row)
            if tag is not None:
                self.writer.add_scalar(tag, row["value"], row["layer"])

    def close(self) -> None:
        self.writer.close()
