"""The leaderboard's run function: :func:`graphnorm.train.run` with the run's CPU seconds (this process's, one torch
thread) added to its record as ``cpu_s``, so that the table shows CPU time, not a wall time that other work on the
machine lengthens, and the CPU kind torch's kernels used as ``cpu`` (``AVX2``, ``AVX512``, ...): another kind
rounds differently, so a cell re-run there differs in the last digits, or more after many steps.
A sweep names it as ``run_fn: analysis.leaderboard.timed:run``."""

from __future__ import annotations

import time
from typing import Any


def run(config: Any) -> dict[str, Any]:
    """Train one run (:func:`graphnorm.train.run`) and record its CPU seconds and CPU kind."""
    import torch

    from graphnorm.train import run as train_run

    start = time.process_time()
    record = dict(train_run(config))
    record["cpu_s"] = round(time.process_time() - start, 3)
    record["cpu"] = torch.backends.cpu.get_cpu_capability()
    return record
