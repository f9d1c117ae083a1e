"""Run functions for the sweep's process tests, imported by the sweep's worker processes (``PYTHONPATH=tests``).

``slow_run`` marks its start and end with files named after its process, so a test can tell which worker pids ran,
whether they are still alive, and whether any run finished after the test interrupted the sweep.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from graphnorm.config import RunConfig
from graphnorm.files import atomic_write_text

MARK_DIR_ENV = "GRAPHNORM_TEST_MARK_DIR"  # slow_run writes <pid>-s<seed>.started / .finished here
SLEEP_ENV = "GRAPHNORM_TEST_SLEEP"  # seconds slow_run sleeps


def slow_run(config: RunConfig) -> dict:
    marks = Path(os.environ[MARK_DIR_ENV])
    # Atomic: a test polling the folder must never read a mark that exists but is still empty.
    atomic_write_text(marks / f"{os.getpid()}-s{config.seed}.started", str(time.time()))
    time.sleep(float(os.environ.get(SLEEP_ENV, "1")))
    atomic_write_text(marks / f"{os.getpid()}-s{config.seed}.finished", str(time.time()))
    return {"test_acc": 0.5 + 0.01 * config.seed}


def exiting_run(config: RunConfig) -> dict:
    """A run function that ends its process the polite way, as some training scripts do on an error."""
    if config.seed == 1:
        raise SystemExit(3)
    return {"test_acc": 0.5}


def threaded_run(config: RunConfig) -> dict:
    """Elementwise ops large enough that torch splits them over its threads (an OpenMP parallel region when the
    worker has two or more), then a collapse measurement through the probe's compiled kernels."""
    import torch

    from graphnorm.analysis.collapse import collapse_records

    x = torch.rand(2_000_000, generator=torch.Generator().manual_seed(config.seed))
    total = sum(float((x * step).abs().sum()) for step in range(1, 6))
    records = collapse_records(torch.rand(64, 8, generator=torch.Generator().manual_seed(config.seed)))
    return {"test_acc": 0.5, "threads": torch.get_num_threads(), "sum": total, "records": len(records)}
