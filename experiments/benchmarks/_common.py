"""Small shared helpers for the benchmarks: interleaved median timing, peak memory, FLOP rates, and the
ours-vs-baseline comparison over depths that the model benchmarks share (:func:`compare_by_depth`).

On a shared machine absolute times drift with the load; ratios between candidates timed in the same process, in
interleaved rounds, are what carries over. Every helper here is deterministic given the measurements.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from experiments.benchmarks.run_all import Target, format_row

REPO = Path(__file__).resolve().parents[2]


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


def time_interleaved_samples(
    fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1, min_seconds: float = 0.02
) -> dict[str, list[float]]:
    """Seconds per call of every candidate, one sample per round, in interleaved rounds.

    Each round calls every candidate once; the order rotates between rounds so no candidate always follows the same
    neighbour. A candidate faster than ``min_seconds`` is called ``number`` times per round (calibrated once) and its
    time divided by ``number``. ``warmup`` untimed rounds come first.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    number: dict[str, int] = {}
    for name in names:
        start = time.perf_counter()
        fns[name]()
        elapsed = time.perf_counter() - start
        number[name] = 1 if elapsed >= min_seconds else min(1000, int(min_seconds / max(elapsed, 1e-9)) + 1)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            fn, count = fns[name], number[name]
            start = time.perf_counter()
            for _ in range(count):
                fn()
            samples[name].append((time.perf_counter() - start) / count)
    return samples


def time_interleaved(
    fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1, min_seconds: float = 0.02
) -> dict[str, float]:
    """Median seconds per call of every candidate (see :func:`time_interleaved_samples`)."""
    samples = time_interleaved_samples(fns, repeats=repeats, warmup=warmup, min_seconds=min_seconds)
    return {name: median(values) for name, values in samples.items()}


def round_settings(quick: bool, repeats: int | None, default_repeats: tuple[int, int] = (3, 7)) -> tuple[int, float]:
    """Interleaved rounds (``repeats``, else ``default_repeats`` for quick / full mode) and the shortest timed call:
    a candidate faster than it is looped within a round."""
    return repeats or default_repeats[0 if quick else 1], 0.002 if quick else 0.02


def compare_by_depth(
    depths: Sequence[int],
    candidates: Callable[[int], dict[str, Callable[[], object]]],
    ours: str,
    baseline: str,
    target: float,
    *,
    repeats: int,
    min_seconds: float,
    leading: dict[str, object] | None = None,
    more_ratios: dict[str, str] | None = None,
) -> tuple[list[dict], list[Target]]:
    """Time ``ours`` against ``baseline`` (and any other candidate) at every depth: the table rows and the targets.

    At each depth, ``candidates(depth)`` gives the calls to compare by name (one training epoch of each model, say):
    they are timed in interleaved rounds (:func:`time_interleaved`, median), then the extra peak memory of one call of
    each is measured (:func:`peak_memory`). The row's columns, in order: the ``leading`` ones, ``"layers"``,
    ``"<name> (ms)"`` of every candidate, ``"<ours> / <baseline>"``, each column of ``more_ratios`` (ours over the
    candidate it names), ``"peak MB <ours>"`` and ``"peak MB <baseline>"``. Each row is printed as soon as it is
    measured. The target of each row is ``ours / baseline <= target``, named by the leading values and the depth.
    """
    leading = leading or {}
    more_ratios = more_ratios or {}
    ratio_name = f"{ours} / {baseline}"
    where = "".join(f"{value}, " for value in leading.values())
    rows: list[dict] = []
    targets: list[Target] = []
    for depth in depths:
        fns = candidates(depth)
        times = time_interleaved(fns, repeats=repeats, min_seconds=min_seconds)
        peak = {name: peak_memory(fn) for name, fn in fns.items()}
        ratio = times[ours] / times[baseline]
        row = {**leading, "layers": depth}
        row.update({f"{name} (ms)": seconds * 1e3 for name, seconds in times.items()})
        row[ratio_name] = ratio
        row.update({column: times[ours] / times[other] for column, other in more_ratios.items()})
        row[f"peak MB {ours}"] = megabytes(peak[ours])
        row[f"peak MB {baseline}"] = megabytes(peak[baseline])
        rows.append(row)
        print(format_row(row), flush=True)
        targets.append(Target(f"{where}{depth} layers: {ratio_name}", f"<= {target}", ratio, ratio <= target))
    return rows, targets


def status_bytes(field_name: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``, ...) in bytes; None where there is no procfs."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# environment variables that change glibc malloc's settings (mallopt's M_* parameters, glibc.malloc tunables)
ALLOCATOR_ENV_PREFIXES = ("MALLOC_", "GLIBC_TUNABLES")


def run_json_worker(
    module: str,
    args: Sequence[str],
    default_allocator: bool = False,
    environment: dict[str, str | None] | None = None,
    timeout_s: float | None = None,
) -> dict:
    """``python -m <module> <args>`` in a fresh interpreter from the repository root; its JSON result (the last
    stdout line). ``default_allocator``: without the environment variables that change glibc malloc's settings
    (``MALLOC_*``, ``GLIBC_TUNABLES``), so the worker's memory is what a user with the defaults sees.
    ``environment``: variables to set in the worker's environment (``None``: removed). ``timeout_s``: kill a worker
    that runs longer (``subprocess.TimeoutExpired``)."""
    env = dict(os.environ)
    if default_allocator:
        env = {key: value for key, value in env.items() if not key.startswith(ALLOCATOR_ENV_PREFIXES)}
    for key, value in (environment or {}).items():
        env.pop(key, None)
        if value is not None:
            env[key] = value
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    command = [sys.executable, "-m", module, *args]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=timeout_s)
    if result.returncode != 0:
        raise RuntimeError(f"worker {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_EXACT_MMAP_THRESHOLD = 64 * 1024
_GLIBC_MAX_MMAP_THRESHOLD = 32 * 1024 * 1024  # where glibc's dynamic threshold ends up after large frees


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (has ``mallopt`` and ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 (AttributeError where they do not exist)
    except (OSError, AttributeError):
        return None
    return libc


def _mallopt(parameter: int, value: int) -> bool:
    """``mallopt(parameter, value)``; False where there is no glibc or it refuses."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(parameter, value))


def peak_memory(fn: Callable[[], object]) -> float | None:
    """Extra resident memory (bytes) at the peak of one ``fn()`` call over the resident memory just before it.

    Linux only: resets the process's peak RSS (``/proc/self/clear_refs`` = 5), runs ``fn`` and reads
    ``VmHWM - VmRSS``. During the call glibc is told to serve every allocation of 64 KB or more by a fresh ``mmap``
    returned to the system on free (``mallopt(M_MMAP_THRESHOLD)``), so memory freed by earlier calls (the heap
    glibc otherwise keeps and reuses for blocks up to 32 MB) cannot hide the call's own allocations; smaller ones
    can still reuse freed heap, a few MB at most. ``None`` without procfs.
    """
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return None
    exact = _mallopt(_M_MMAP_THRESHOLD, _EXACT_MMAP_THRESHOLD)
    if exact:
        _mallopt(_M_TRIM_THRESHOLD, 0)  # hand freed heap back now, so the baseline below is the live memory
        _glibc().malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    before = status_bytes("VmRSS")
    try:
        fn()
    finally:
        if exact:  # back to the threshold glibc's dynamic rule reaches anyway, so timing runs are unaffected
            _mallopt(_M_MMAP_THRESHOLD, _GLIBC_MAX_MMAP_THRESHOLD)
            _mallopt(_M_TRIM_THRESHOLD, 2 * _GLIBC_MAX_MMAP_THRESHOLD)
    peak = status_bytes("VmHWM")
    if before is None or peak is None:
        return None
    return float(max(0, peak - before))


def time_and_peak_memory(fn: Callable[[], object]) -> tuple[float, float | None]:
    """Seconds and extra peak resident memory (see :func:`peak_memory`) of ONE ``fn()`` call.

    For calls of seconds or more, where an extra untimed call just for memory would double the cost.
    """
    elapsed = 0.0

    def timed() -> None:
        nonlocal elapsed
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start

    memory = peak_memory(timed)
    return elapsed, memory


def megabytes(value: float | None) -> float | None:
    """Bytes as MB (2^20 bytes); ``None`` stays ``None``."""
    return None if value is None else value / 2**20


def matmul_flop_rate(size: int = 2048, repeats: int = 3) -> float:
    """This machine's float32 FLOP/s for one large square ``torch.mm`` (median of ``repeats``), the reference rate."""
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    seconds = time_interleaved({"mm": lambda: torch.mm(a, b)}, repeats=repeats, warmup=1)["mm"]
    return 2.0 * size**3 / seconds


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (the exponent ``k`` of ``y ~ x^k``)."""
    pairs = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y is not None and y > 0]
    if len(pairs) < 2:
        return float("nan")
    mean_x = sum(p[0] for p in pairs) / len(pairs)
    mean_y = sum(p[1] for p in pairs) / len(pairs)
    var_x = sum((p[0] - mean_x) ** 2 for p in pairs)
    cov = sum((p[0] - mean_x) * (p[1] - mean_y) for p in pairs)
    return cov / var_x if var_x > 0 else float("nan")


def format_ratio(baseline_seconds: float, candidate_seconds: float) -> str:
    """``"2.31x faster"`` / ``"1.20x slower"``: how the candidate compares with the baseline."""
    if candidate_seconds <= 0 or baseline_seconds <= 0:
        return "n/a"
    ratio = baseline_seconds / candidate_seconds
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def load_summary() -> str:
    """The 1/5/15-minute load averages and CPU count, to state under which load numbers were taken."""
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} CPUs, "
        f"torch threads {torch.get_num_threads()}"
    )


def write_markdown(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (parents created) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")
    return path
