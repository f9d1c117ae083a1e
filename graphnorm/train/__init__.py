"""Training: one run of a :class:`graphnorm.config.RunConfig`, from data to a JSON-serializable record.

``run(config) -> record`` serves ``graphnorm train`` and every sweep; ``train(config)`` returns the model and task too.

* :mod:`~graphnorm.train.loop`: ``run`` and ``train``; :mod:`~graphnorm.train.record`: the record's keys;
  :mod:`~graphnorm.train.node_level`, :mod:`~graphnorm.train.graph_level`: the two training loops;
* :mod:`~graphnorm.train.schedules`: optimizer, schedules, clipping, early stopping; :mod:`~graphnorm.train.loaders`:
  the run's task, its mini-batches and the probe's sample; :mod:`~graphnorm.train.distributed`: under torchrun;
* :mod:`~graphnorm.train.checkpoints`, :mod:`~graphnorm.train.model_file`: resuming, and the saved model;
  :mod:`~graphnorm.train.progress`, :mod:`~graphnorm.train.tensorboard_log`: progress lines and curves;
* collapse metrics while training: :mod:`~graphnorm.train.collapse_steps`, :mod:`~graphnorm.train.monitor` (your own
  loop), :mod:`~graphnorm.train.lightning_monitor` (``CollapseMonitorCallback`` for PyTorch Lightning).
"""

from __future__ import annotations

from typing import Any

__all__ = ["run", "train", "CollapseMonitor"]
# Public name -> the module that defines it, imported on first use; CollapseMonitorCallback needs the optional
# lightning package, so it is not in __all__ (a star import would fail without it).
_LAZY = {
    "run": "loop",
    "train": "loop",
    "CollapseMonitor": "monitor",
    "CollapseMonitorCallback": "lightning_monitor",
}


def __getattr__(name: str) -> Any:
    # The entry points load on first use, so that the light submodules (e.g. the record's keys) import alone.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
