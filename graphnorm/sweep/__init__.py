"""Depth sweeps: a YAML grid of runs, executed in local processes or on SLURM, resumable, summarized in tables and
figures.

``run_sweep(sweep, out)`` is the entry point behind ``graphnorm sweep``. Where to look next:

* :mod:`~graphnorm.sweep.grid`: the sweep YAML, loaded, checked and expanded into run configs;
* :mod:`~graphnorm.sweep.runner`: the executors and the one function a run is;
* :mod:`~graphnorm.sweep.results`, :mod:`~graphnorm.sweep.tables`: the results files and the CSV tables built
  from them;
* :mod:`~graphnorm.sweep.report`: figures and the markdown summary of a sweep folder;
* :mod:`~graphnorm.sweep.processes`, :mod:`~graphnorm.sweep.cpu_budget`: worker processes and their threads.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SlurmOptions",
    "execute_run",
    "expand_grid",
    "load_sweep_config",
    "resolve_run_fn",
    "run_sweep",
    "status_table",
]


GRID_NAMES = ("expand_grid", "load_sweep_config")  # from graphnorm.sweep.grid; the others from graphnorm.sweep.runner


def __getattr__(name: str) -> Any:
    # The entry points load on first use, so that the light submodules (e.g. the grid) import alone.
    if name in GRID_NAMES:
        from graphnorm.sweep import grid

        return getattr(grid, name)
    if name in __all__:
        from graphnorm.sweep import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
