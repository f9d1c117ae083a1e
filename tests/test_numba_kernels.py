"""graphnorm.numba_kernels: every kernel shares one cache stamp, so an edit to a kernel a cached kernel of another file
calls compiles the caller again (numba alone would keep running the old callee)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numba
from numba.core.registry import CPUDispatcher

from graphnorm import numba_kernels

CALLEE = """
from graphnorm.numba_kernels import kernel

@kernel()
def offset(x):
    return x + {value}
"""
CALLER = """
from graphnorm.numba_kernels import kernel
from callee import offset

@kernel()
def twice_offset(x):
    return 2 * offset(x)
"""
# Runs in a fresh process: the two modules above stand for graphnorm's kernel files, cached beside them.
RUN = """
import sys
from pathlib import Path
from graphnorm import numba_kernels
numba_kernels.PACKAGE = Path(sys.argv[1]).resolve()
numba_kernels.KERNEL_MODULES = ("callee.py", "caller.py")
sys.path.insert(0, sys.argv[1])
from caller import twice_offset
print(twice_offset(1.0), type(twice_offset._cache._impl._locator).__name__)
"""


def test_every_kernel_module_is_listed_and_uses_the_shared_stamp():
    defining = {
        path.relative_to(numba_kernels.PACKAGE).as_posix()
        for path in numba_kernels.PACKAGE.rglob("*.py")
        if "@kernel(" in path.read_text()
    }
    assert defining == set(numba_kernels.KERNEL_MODULES)
    sources = "".join((numba_kernels.PACKAGE / module).read_text() for module in numba_kernels.KERNEL_MODULES)
    assert "numba.njit" not in sources
    for module_path in numba_kernels.KERNEL_MODULES:
        module = importlib.import_module("graphnorm." + module_path.removesuffix(".py").replace("/", "."))
        kernels = [value for value in vars(module).values() if isinstance(value, CPUDispatcher)]
        assert kernels, module_path
        for dispatcher in kernels:
            assert dispatcher._cache._impl._locator.get_source_stamp() == numba_kernels.kernels_stamp()


def test_stamp_follows_the_content_of_every_kernel_file(tmp_path: Path, monkeypatch):
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    monkeypatch.setattr(numba_kernels, "PACKAGE", tmp_path)
    monkeypatch.setattr(numba_kernels, "KERNEL_MODULES", ("a.py", "b.py"))
    first = numba_kernels.kernels_stamp()
    assert numba_kernels.kernels_stamp() == first
    (tmp_path / "b.py").write_text("# b.py, edited\n")
    edited = numba_kernels.kernels_stamp()
    assert edited != first
    (tmp_path / "b.py").write_text("# b.py\n")  # the content back: the stamp back, whatever the file's time
    assert numba_kernels.kernels_stamp() == first


def test_editing_a_callee_file_recompiles_its_cached_callers(tmp_path: Path):
    def run() -> list[str]:
        # The in-tree cache (beside the source) is the subject: a user's NUMBA_CACHE_DIR would move it elsewhere.
        env = {key: value for key, value in os.environ.items() if key != "NUMBA_CACHE_DIR"}
        command = [sys.executable, "-c", RUN, str(tmp_path)]
        result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    (tmp_path / "callee.py").write_text(textwrap.dedent(CALLEE.format(value=1.0)))
    (tmp_path / "caller.py").write_text(textwrap.dedent(CALLER))
    assert run() == ["4.0", "InTreeKernelLocator"]  # compiled, then cached
    assert list((tmp_path / "__pycache__").glob("caller.twice_offset*.nbi"))
    assert run() == ["4.0", "InTreeKernelLocator"]  # from the cache
    # Only the callee's file changes: numba's own stamp (the caller file's content) would load the old code (4.0).
    (tmp_path / "callee.py").write_text(textwrap.dedent(CALLEE.format(value=2.0)))
    assert run() == ["6.0", "InTreeKernelLocator"]


def test_numba_cache_dir_is_honoured(tmp_path: Path):
    """With NUMBA_CACHE_DIR set (a read-only install, a cluster's scratch), the kernels are cached there, as numba's own
    locators would, still with the shared stamp; else beside the sources."""
    (tmp_path / "callee.py").write_text(textwrap.dedent(CALLEE.format(value=1.0)))
    (tmp_path / "caller.py").write_text(textwrap.dedent(CALLER))
    cache_dir = tmp_path / "numba-cache"
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    result = subprocess.run(
        [sys.executable, "-c", RUN, str(tmp_path)], capture_output=True, text=True, check=False, env=environment
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["4.0", "UserProvidedKernelLocator"]
    assert list(cache_dir.rglob("caller.twice_offset*.nbi")) and not list(tmp_path.glob("__pycache__/*.nbi"))


def test_kernel_is_njit_with_the_cache_on():
    @numba_kernels.kernel(nogil=True)
    def add_one(x):
        return x + 1

    assert isinstance(add_one, CPUDispatcher) and add_one(1) == 2
    assert add_one.targetoptions["nogil"] and add_one._cache is not None
    assert numba.njit is not numba_kernels.kernel


def test_numba_keeps_its_own_locators_where_the_kernel_files_are_not_on_disk(tmp_path: Path, monkeypatch):
    source = tmp_path / "kernels.py"
    source.write_text("def f(x):\n    return x\n")
    spec = importlib.util.spec_from_file_location("kernels_on_disk", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(numba_kernels, "PACKAGE", tmp_path.resolve())
    monkeypatch.setattr(numba_kernels, "KERNEL_MODULES", ("kernels.py",))
    in_tree = numba_kernels._LOCATORS[1]
    assert in_tree.from_function(module.f, str(source)) is not None
    monkeypatch.setattr(numba_kernels, "KERNEL_MODULES", ("kernels.py", "gone.py"))  # e.g. a frozen application
    assert in_tree.from_function(module.f, str(source)) is None
    assert in_tree.from_function(module.f, str(Path(numba.__file__))) is None  # not graphnorm's file


# Two of these start together; each says when its kernels are made, calls one, and reports whether it compiled it.
RUN_AFTER_READY = """
import sys
from pathlib import Path
from graphnorm import numba_kernels
numba_kernels.PACKAGE = Path(sys.argv[1]).resolve()
numba_kernels.KERNEL_MODULES = ("callee.py", "caller.py")
sys.path.insert(0, sys.argv[1])
from caller import twice_offset
print("ready", flush=True)
value = twice_offset(1.0)
print(value, sum(twice_offset.stats.cache_misses.values()), sum(twice_offset.stats.cache_hits.values()))
"""


def test_processes_missing_a_kernel_take_turns_and_compile_it_once(tmp_path: Path):
    """Two processes wait on the same missing kernel (the test holds their compile lock until both wait): one
    compiles and caches it, the other loads it. numba alone would compile it in both."""
    import fcntl

    (tmp_path / "callee.py").write_text(textwrap.dedent(CALLEE.format(value=1.0)))
    (tmp_path / "caller.py").write_text(textwrap.dedent(CALLER))
    (tmp_path / "__pycache__").mkdir()
    env = {key: value for key, value in os.environ.items() if key != "NUMBA_CACHE_DIR"}
    with open(tmp_path / "__pycache__" / numba_kernels.COMPILE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", RUN_AFTER_READY, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
            )
            for _ in range(2)
        ]
        assert [process.stdout.readline().strip() for process in processes] == ["ready", "ready"]
        time.sleep(1.0)  # both now call the kernel and wait for their turn
    reports = [process.communicate(timeout=120)[0].split() for process in processes]
    assert [process.returncode for process in processes] == [0, 0]
    assert sorted(reports) == [["4.0", "0", "1"], ["4.0", "1", "0"]]  # one compiled (a miss), one loaded (a hit)


def test_a_child_forked_during_a_turn_does_not_keep_it(tmp_path: Path):
    """A flock lasts while any process holds its file open: the parent unlocks before it closes the file, so its
    turn ends when its compile does, however long a child forked meanwhile lives."""
    import fcntl

    forked, started = os.pipe()
    with numba_kernels._TURNS.turn(str(tmp_path)):
        child = os.fork()
        if child == 0:  # the child says it has started, then outlives its parent's turn
            os.write(started, b"1")
            time.sleep(5)
            os._exit(0)
        assert os.read(forked, 1) == b"1"
    try:
        with open(tmp_path / numba_kernels.COMPILE_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError where the child kept the turn
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
        os.close(forked)
        os.close(started)
