"""CollapseMonitorCallback: the :class:`~graphnorm.train.monitor.CollapseMonitor` as a PyTorch Lightning callback.

::

    trainer = lightning.Trainer(callbacks=[CollapseMonitorCallback(data, every_n_steps=10)], logger=CSVLogger("logs"))

At the start of training and after every ``every_n_steps``-th optimizer step (``trainer.global_step``), the callback
probes the Lightning module (or a submodule of it) on the fixed sample and hands one scalar per layer and metric,
``collapse/<metric>/layer_<k>`` (:func:`~graphnorm.train.monitor.step_scalars`), to every logger of the trainer at
that step. It calls ``logger.log_metrics`` itself rather than ``LightningModule.log``: the module's ``log`` passes
step metrics on only every ``log_every_n_steps`` batches, which would drop probes that fall between them. Lightning
is an optional extra: ``pip install 'graphnorm[lightning]'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from torch import nn

from graphnorm.checks import check_count
from graphnorm.files import check_output_dir
from graphnorm.train.monitor import CollapseMonitor, monitor_sample, step_scalars

try:
    from lightning.pytorch import Callback, LightningModule, Trainer
except ImportError:
    raise ImportError(
        "CollapseMonitorCallback needs PyTorch Lightning: pip install 'graphnorm[lightning]' (or pip install "
        "lightning); for a plain training loop use graphnorm.train.monitor.CollapseMonitor, which needs no Lightning"
    ) from None

__all__ = ["CollapseMonitorCallback"]

ModuleChoice = str | Callable[[nn.Module], nn.Module] | None


def _chosen(module: nn.Module, choice: Any, what: str) -> Any:
    """``module`` itself (None), its submodule at an attribute path (a string), or what a function returns for it."""
    if choice is None:
        return module
    if isinstance(choice, str):
        try:
            return module.get_submodule(choice)
        except AttributeError:
            raise ValueError(
                f"CollapseMonitorCallback: {what}={choice!r} names no submodule of {type(module).__name__}"
            ) from None
    if callable(choice):
        return choice(module)
    raise TypeError(f"CollapseMonitorCallback: {what} must be None, an attribute path or a function of the module")


class CollapseMonitorCallback(Callback):
    """Per-layer collapse metrics every ``every_n_steps`` optimizer steps of a Lightning fit, through its loggers.

    Probes at ``trainer.global_step`` 0 (before the first update) and whenever an optimizer step brings it to a
    multiple of ``every_n_steps`` (once per step also with gradient accumulation), on global rank 0 only. Each probe
    is :meth:`CollapseMonitor.step <graphnorm.train.monitor.CollapseMonitor.step>` (eval mode, no gradients, random
    state restored: the fit trains as without the callback); its rows are in :attr:`table` and, with ``out_dir``, in
    ``<out_dir>/collapse_steps.csv``. A fit resumed from a checkpoint at step k drops the CSV's rows from step k on
    (the interrupted attempt's) and probes again from there. A fresh fit (step 0) on a CSV holding an earlier fit's
    rows stops before its first step with a one-line ``RuntimeError`` and leaves them as they are, unless
    ``overwrite=True`` (then they are replaced). The monitor holds ``out_dir`` from the start of training until it
    ends or fails.

    Args:
        sample: the fixed graph (node level) or batch or list of graphs (graph level) to probe; left as it is (the
            monitor probes a copy on the module's device).
        every_n_steps: probe every N optimizer steps (> 0).
        model: what to probe: None (default) the Lightning module itself, an attribute path of a submodule (e.g.
            ``"gnn"``) or a function ``module -> nn.Module``.
        layers: which layers of it to watch (default: the probe's, :class:`graphnorm.analysis.CollapseProbe`): an
            attribute path of the probed module (e.g. ``"convs"``) or a function ``probed module -> layers``.
        forward: ``forward(model, sample)`` running the probed model; default the probe's.
        out_dir: also write the tidy CSV there (:class:`~graphnorm.train.monitor.CollapseMonitor`); created and
            checked here, before the fit.
        overwrite: let a fresh fit replace the rows of an earlier one in ``out_dir``'s CSV (default: refuse).
        probe_options: other keywords of :class:`~graphnorm.train.monitor.CollapseMonitor` (``at``,
            ``num_singular_values``, ``split``).
    """

    def __init__(
        self,
        sample: Any,
        every_n_steps: int = 50,
        model: ModuleChoice = None,
        layers: ModuleChoice = None,
        forward: Callable[[nn.Module, Any], Any] | None = None,
        out_dir: str | os.PathLike | None = None,
        overwrite: bool = False,
        **probe_options: Any,
    ) -> None:
        every_n_steps = check_count(every_n_steps, "every_n_steps", "CollapseMonitorCallback")
        if not isinstance(overwrite, bool):
            raise TypeError(f"CollapseMonitorCallback: overwrite must be True or False, got {overwrite!r}")
        self.sample = monitor_sample(sample)  # checked now, not after the model is built and the data loaded
        self.every_n_steps = every_n_steps
        self.model, self.layers, self.forward = model, layers, forward
        if out_dir is not None:
            check_output_dir(out_dir, "CollapseMonitorCallback out_dir")
        self.out_dir, self.overwrite = out_dir, overwrite
        self.probe_options = probe_options
        self.monitor: CollapseMonitor | None = None

    @property
    def table(self) -> Any:
        """Every probe row of the last fit (a DataFrame); None before training starts or on other ranks."""
        return None if self.monitor is None else self.monitor.table

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        self._close()  # an earlier fit's monitor (one that failed before on_train_end) lets the folder go
        probed = _chosen(pl_module, self.model, "model")
        layers = _chosen(probed, self.layers, "layers") if self.layers is not None else None
        step = trainer.global_step
        keep = step == 0 and self.out_dir is not None and not self.overwrite  # a fresh fit: refuse, never delete
        monitor = CollapseMonitor(
            probed,
            self.sample,  # the monitor probes a copy on the module's device; the caller's graph stays where it is
            every=self.every_n_steps,
            out_dir=self.out_dir,
            layers=layers,
            forward=self.forward,
            start_step=None if keep else step,
            **self.probe_options,
        )
        if keep and len(monitor.table):
            monitor.close()
            steps = monitor.table["step"]
            raise RuntimeError(
                f"CollapseMonitorCallback: {monitor.path} holds {len(steps)} rows of an earlier fit (steps "
                f"{steps.min()} to {steps.max()}), which this fresh fit would replace: give another out_dir, or "
                "overwrite=True to replace them"
            )
        self.monitor = monitor
        self._probe(trainer)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.monitor is not None:
            self._probe(trainer)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._close()

    def _close(self) -> None:
        """Release the folder; :attr:`table` keeps the rows."""
        if self.monitor is not None:
            self.monitor.close()

    def _probe(self, trainer: Trainer) -> None:
        """Probe at the trainer's optimizer step if due; log the scalars to every logger at that step."""
        step = trainer.global_step
        table = self.monitor.step(step, epoch=trainer.current_epoch)
        if table is None:
            return
        scalars = step_scalars(table.to_dict("records"))
        for logger in trainer.loggers:
            logger.log_metrics(scalars, step=step)
