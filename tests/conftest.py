"""Shared test fixtures.

Datasets: tests load real data from a writable root. If ``$GRAPHNORM_DATA`` is unset, the root is
``~/.cache/graphnorm/data``; ``$GRAPHNORM_DATA_MIRROR`` (CI: ``../shared/data``) seeds it offline.
A test that needs a dataset that cannot be found fails loudly; it never skips.

Side by side (``pytest -n auto``, pytest-xdist): each worker gets its share of the cores (:func:`pytest_configure`).
Workers share the data root, whose loaders take turns on a dataset (a file lock), and numba's cache of the probe
kernels, whose files are replaced whole (two workers compiling at once write the same entries).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown when xdist is not loaded
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core this process may use (affinity, container quota, SLURM), where pytest-xdist
    would count the machine's cores, and one more: about a fifth of the suite's time is spent waiting (on worker
    processes, signals, a SLURM scheduler, a browser), which the extra worker fills with another test."""
    from graphnorm.sweep.cpu_budget import usable_cores

    return usable_cores() + 1


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker, torch and BLAS get ``usable cores // workers`` threads: with a team per worker
    on every core, each small op would wait for threads that another worker keeps off their core."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        from threadpoolctl import threadpool_limits

        from graphnorm.sweep.cpu_budget import usable_cores

        threads = max(1, usable_cores() // workers)
        torch.set_num_threads(threads)
        threadpool_limits(threads, user_api="blas")


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _restore_threads():
    """torch's thread count as the test found it: a serial sweep sets its plan's threads in this process."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def one_thread():
    """One torch intra-op thread for a test module, restored after it: modules of many tiny tensor ops use it,
    because on a shared 2-core machine a second intra-op thread makes them several times slower, not faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def data_root() -> Path:
    from graphnorm.data.root import ENV_MIRROR, resolve_root

    if not os.environ.get(ENV_MIRROR) and (REPO.parent / "shared" / "data").is_dir():
        os.environ[ENV_MIRROR] = str(REPO.parent / "shared" / "data")
    return resolve_root()


TINY_SWEEP = {
    "name": "tiny",
    "base": {"dataset": "cora", "epochs": 1, "hidden_channels": 16},
    "grid": {"norm": ["none", "pairnorm"], "num_layers": [2, 4], "seed": [0]},
}


def build_tiny_sweep(base_dir: Path) -> Path:
    """Run (or resume: a finished sweep is not re-run) the tiny sweep with the collapse probe in each run."""
    from graphnorm.sweep import run_sweep

    out = base_dir / "tiny_sweep"
    run_sweep(
        TINY_SWEEP,
        out_dir=out,
        executor="serial",
        make_plots=False,
        progress=False,
        log=lambda message: None,
    )
    return out


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory, data_root) -> Path:
    """The tiny Cora sweep (2 norms x depths 2, 4, one seed, 1 epoch, every layer probed), run once a session."""
    return build_tiny_sweep(tmp_path_factory.getbasetemp())
