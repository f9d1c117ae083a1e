"""One thread for torch and NumPy's BLAS inside a block: :func:`single_thread`.

The collapse metrics and the probe's forward pass work on small matrices, where more threads cost more than they
save; a block sets one torch thread for its own thread and limits BLAS, one setting for the process, while any
thread is inside one.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController

__all__ = ["single_thread"]


@functools.lru_cache(maxsize=1)
def _numpy_blas_pools(loaded_modules: int) -> ThreadpoolController | None:
    """The BLAS thread pools of the loaded NumPy / SciPy (OpenBLAS); None without threadpoolctl. Cached for one
    count of ``sys.modules``: an import since the last call (SciPy brings its own OpenBLAS) finds the pools again."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # a dependency of scikit-learn, so normally present
        return None
    return ThreadpoolController().select(user_api="blas")


# Each thread's single_thread() blocks open (torch's thread count is the calling thread's own: OpenMP keeps it per
# thread), so nested blocks (a probe's hooks inside its forward) cost nothing. BLAS's thread count is one setting
# for the process: the first thread in limits it, the last one out restores it.
_thread_blocks = threading.local()
_blas_lock = threading.Lock()
_blas_users = 0
_blas_limiter: Any = None


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run torch ops and NumPy's BLAS (the cone solver's products) on one thread, restoring the settings after. The
    matrices here are small (n x 64): thread start-up and spinning cost more than they save, badly so on an
    oversubscribed machine. The thread count changes no result: each product's sums run in the same order.
    Inside another ``single_thread()`` block of the same thread it does nothing (setting threadpoolctl's limit has a
    cost per call). Threads may use it at once: each gets one torch thread, and BLAS stays on one thread until the
    last of them leaves."""
    if getattr(_thread_blocks, "open", False):
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    _thread_blocks.open = True
    _limit_blas()
    try:
        yield
    finally:
        _release_blas()
        _thread_blocks.open = False
        torch.set_num_threads(previous)


def _limit_blas() -> None:
    """One more thread inside :func:`single_thread`: the first limits the BLAS pools to one thread."""
    global _blas_users, _blas_limiter
    with _blas_lock:
        _blas_users += 1
        if _blas_users == 1:
            pools = _numpy_blas_pools(len(sys.modules))
            _blas_limiter = pools.limit(limits=1) if pools is not None else None


def _release_blas() -> None:
    """One thread fewer inside :func:`single_thread`: the last restores the BLAS pools' thread counts."""
    global _blas_users, _blas_limiter
    with _blas_lock:
        _blas_users -= 1
        if _blas_users == 0 and _blas_limiter is not None:
            _blas_limiter.restore_original_limits()
            _blas_limiter = None
