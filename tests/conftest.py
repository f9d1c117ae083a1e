"""Shared test fixtures.

Datasets: tests load real data from a writable root. If ``$GRAPHNORM_DATA`` is unset, the root is
``~/.cache/graphnorm/data``; ``$GRAPHNORM_DATA_MIRROR`` (CI: ``../shared/data``) seeds it offline.
A test that needs a dataset that cannot be found fails loudly; it never skips.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


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
