"""graphnorm's numba kernels: one decorator, :func:`kernel`, and the on-disk cache its kernels share.

numba caches a compiled function beside its source file (``__pycache__``) and reuses it while that file's content is
unchanged. A kernel that calls a kernel of another file (the cone solver of ``analysis/cone.py`` calls Wolfe's
algorithm in ``analysis/min_norm_point.py``) holds the callee's compiled code in its own cache entry, and numba keeps
that entry when only the callee's file changes: the caller would go on running the old callee, after an edit or an
upgrade of graphnorm that changed only the callee. So every kernel made by :func:`kernel` is cached under one stamp,
the digest of every file in :data:`KERNEL_MODULES`: a change to any of them compiles them all again, once (see
:func:`graphnorm.analysis.collapse.warm_kernels`). Processes that find a kernel missing from the same cache (a sweep's
workers, a test run's) take turns to compile it: the first compiles and caches it, the others load it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numba
from numba.core import caching
from numba.core.compiler_lock import global_compiler_lock

try:
    import fcntl
except ImportError:  # not POSIX (Windows): each process compiles what it misses, as numba alone does
    fcntl = None

PACKAGE = Path(__file__).resolve().parent
# Every module that defines a kernel, relative to the package (a test checks the list against the sources).
KERNEL_MODULES = (
    "analysis/collapse/kernels.py",
    "analysis/collapse/measure.py",
    "analysis/cone.py",
    "analysis/metrics.py",
    "analysis/min_norm_point.py",
    "models/propagation.py",
)


@functools.lru_cache(maxsize=8)
def _digest(files: tuple[tuple[str, int, int], ...]) -> bytes:
    """sha256 over the contents of ``files`` ((path, mtime_ns, size): a file changed in this process is read
    again)."""
    hasher = hashlib.sha256()
    for path, _, _ in files:
        hasher.update(Path(path).read_bytes())
    return hasher.digest()


def kernels_stamp() -> bytes:
    """The cache stamp of every kernel: the digest of the files of :data:`KERNEL_MODULES`."""
    files = []
    for module in KERNEL_MODULES:
        path = PACKAGE / module
        status = path.stat()
        files.append((str(path), status.st_mtime_ns, status.st_size))
    return _digest(tuple(files))


class _SharedStamp:
    """Locator mixin: graphnorm's source files are stamped with :func:`kernels_stamp`, not their own content."""

    def get_source_stamp(self) -> bytes:
        return kernels_stamp()

    @classmethod
    def from_function(cls, py_func: Callable, py_file: str) -> Any:
        """This locator for a file of the package whose kernel files are all on disk (else numba's own: a frozen
        application or a zip import has no such files to stamp)."""
        if not Path(py_file).resolve().is_relative_to(PACKAGE):
            return None
        if not all((PACKAGE / module).is_file() for module in KERNEL_MODULES):
            return None
        return super().from_function(py_func, py_file)


def _numba_name(name: str) -> Any:
    """A name of numba's caching module, public or with the leading underscore of older numba versions."""
    return getattr(caching, name, None) or getattr(caching, "_" + name, None)


# numba's locators, in numba's order: NUMBA_CACHE_DIR when it is set, else beside the source file when its
# __pycache__ is writable, else in the user's cache folder.
_USER_PROVIDED = _numba_name("UserProvidedCacheLocator")
_IN_TREE = _numba_name("InTreeCacheLocator")
_USER_WIDE = _numba_name("UserWideCacheLocator")
_CACHE_IMPL = _numba_name("CacheImpl")
_LOCATORS = (
    [
        type("UserProvidedKernelLocator", (_SharedStamp, _USER_PROVIDED), {}),
        type("InTreeKernelLocator", (_SharedStamp, _IN_TREE), {}),
        type("UserWideKernelLocator", (_SharedStamp, _USER_WIDE), {}),
    ]
    if None not in (_USER_PROVIDED, _IN_TREE, _USER_WIDE, _CACHE_IMPL)
    else []  # a numba without these names: each kernel keeps numba's own stamp (its file's content)
)


def _use_shared_stamp() -> None:
    """Put the shared-stamp locators first in numba's list (once), in numba's order, ahead of numba's own for the
    same folders."""
    if not _LOCATORS:
        return
    registered = _CACHE_IMPL._locator_classes
    for locator in reversed(_LOCATORS):
        if locator not in registered:
            registered.insert(0, locator)


# The file, in a kernel's cache folder, whose exclusive flock is a process's turn to compile into that folder.
COMPILE_LOCK = "graphnorm-kernels.lock"


class _CompileTurns:
    """This process's turn to compile, held by its outermost kernel compile (a kernel's callees compile inside it)."""

    def __init__(self) -> None:
        self._depth = 0
        self._lock_fd: int | None = None
        self._owner = os.getpid()

    @contextlib.contextmanager
    def turn(self, folder: str | None) -> Iterator[None]:
        # numba's own lock first, as its compile takes it: one order for the two locks, and one thread here at a time.
        with global_compiler_lock:
            if self._depth == 0:
                self._lock_fd, self._owner = _wait_for_turn(folder), os.getpid()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._lock_fd is not None:
                    from graphnorm.files import release_lock  # (imports fcntl: only where there is one)

                    release_lock(self._lock_fd, self._owner)  # not kept by a child forked during the turn
                    self._lock_fd = None


def _wait_for_turn(folder: str | None) -> int | None:
    """A descriptor of ``folder``'s lock file, once this process holds its exclusive flock; None where there is no
    such lock (no fcntl, no cache folder, a folder that cannot hold the file): then the process compiles unaided."""
    if fcntl is None or folder is None:
        return None
    from graphnorm.files import wait_for_lock

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return wait_for_lock(Path(folder) / COMPILE_LOCK)
    except OSError:  # (a lock file that is not a regular file too: graphnorm.files.OutputPathError)
        return None


_TURNS = _CompileTurns()


def _compile_in_turn(dispatcher: Any) -> Any:
    """``dispatcher`` whose compile waits for this process's turn: numba's compile looks in the on-disk cache before
    it compiles, so a kernel another process compiled while this one waited is loaded, not compiled again."""
    compile_unaided = dispatcher.compile
    folder = getattr(dispatcher._cache, "_cache_path", None)

    def compile(signature: Any) -> Any:
        with _TURNS.turn(folder):
            return compile_unaided(signature)

    dispatcher.compile = compile  # numba calls it for a call it has no code for and for a caller's type inference
    return dispatcher


def kernel(**options: Any) -> Callable[[Callable], Any]:
    """``numba.njit(cache=True, **options)`` with the shared cache stamp, compiled in turn with other processes:
    every graphnorm kernel is made by it."""
    _use_shared_stamp()  # before njit: numba picks a function's locator when the decorator runs
    jit = numba.njit(cache=True, **options)
    return lambda function: _compile_in_turn(jit(function))
