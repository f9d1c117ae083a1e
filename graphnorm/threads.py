"""Thread control in one place: one thread for torch and NumPy's BLAS inside a block (:func:`single_thread`), and
the process's pool of worker threads (:func:`shared_pool`).

The collapse metrics and the probe's forward pass work on small matrices, where more threads cost more than they
save; a block sets one torch thread for its own thread and limits BLAS, one setting for the process, while any
thread is inside one. Kernels that split their work over plain threads (ContraNorm's tiles, the sparse product) take
their workers from one pool kept for the process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController

__all__ = ["shared_pool", "single_thread"]


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


# The worker pool of this process (shared_pool): (process id, workers, pool), created under _pool_lock.
_pool: tuple[int, int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def shared_pool(workers: int) -> ThreadPoolExecutor:
    """A pool of at least ``workers`` threads, kept for the process and shared by every kernel that splits its work
    over plain threads; a larger one replaces it when a caller needs more workers, and a forked child makes its own
    (the parent's threads do not exist there).

    Kept because a new thread each call costs memory every call: each thread's first products give it its own
    malloc arena and MKL buffers (tens of MB for a large graph), which a fresh thread would claim again. The pool's
    size changes no number: each task writes its own rows or its own copy."""
    global _pool
    if workers < 1:
        raise ValueError(f"shared_pool: workers must be at least 1, got {workers}")
    with _pool_lock:
        pid = os.getpid()
        if _pool is None or _pool[0] != pid or _pool[1] < workers:
            if _pool is not None and _pool[0] == pid:
                _pool[2].shutdown(wait=False)  # its idle threads end; a forked child's copy has no threads to end
            _pool = (pid, workers, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="graphnorm-worker"))
        return _pool[2]


def _after_fork_in_child() -> None:
    """A forked child starts with no pool and a free lock (a parent thread may have held it at the fork)."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
