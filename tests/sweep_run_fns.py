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


# fake_run: the sweep engine tests' run function, steered by environment variables so that it behaves the same
# in worker processes and submitit jobs.
LOG_ENV = "GRAPHNORM_TEST_RUN_LOG"  # each execution appends a line here
FAKE_SLEEP_ENV = "GRAPHNORM_TEST_RUN_SLEEP"
FAIL_ENV = "GRAPHNORM_TEST_FAIL_NORM"  # runs of this norm raise
EXIT_ENV = "GRAPHNORM_TEST_EXIT_NORM"  # runs of this norm kill their process (as an out-of-memory kill would)


def fake_run(config: RunConfig) -> dict:
    """A deterministic run: accuracy falls with depth; per-layer rows like the collapse probe's."""
    if os.environ.get(LOG_ENV):
        with open(os.environ[LOG_ENV], "a") as f:
            f.write(f"{config.norm},{config.num_layers},{config.seed}\n")
    time.sleep(float(os.environ.get(FAKE_SLEEP_ENV, "0")))
    print("training output that belongs in the run's log")
    if config.norm == os.environ.get(FAIL_ENV):
        raise RuntimeError(f"deliberate failure of {config.norm}")
    if config.norm == os.environ.get(EXIT_ENV):
        os._exit(3)
    acc = 0.8 - 0.01 * config.num_layers + 0.01 * config.seed
    layers = [
        {"layer": i, "layer_name": f"conv{i}", "rows": "node", "metric": "effective_rank", "value": 10.0 - i}
        for i in range(config.num_layers)
    ]
    return {"val_acc": acc + 0.05, "test_acc": acc, "worker_pid": os.getpid(), "layers": layers}


def executions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


SWEEP = {
    "name": "t",
    "base": {"dataset": "cora", "epochs": 3, "hidden_channels": 8},
    "grid": {"norm": ["none", "pairnorm"], "num_layers": [2, 4], "seed": [0, 1]},
    "norm_settings": {"pairnorm": {"norm_kwargs": {"scale": 2.0}}},
}
