"""The fixed per-run cost of a sweep of short runs: everything a run pays that is not training.

    python -m experiments.benchmarks.bench_sweep_overhead [--quick] [--out DIR]

A warm worker (``graphnorm.sweep.runner.execute_run`` in this process) with its phases timed, with and without the
worker's dataset cache (target: non-training time per run under 0.5 s with the cache), and ``run_sweep`` end to end
with the local executor, plus the start of a process that imports ``graphnorm.sweep``. Protocol:
``docs/results/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from graphnorm.analysis import probe as probe_module
from graphnorm.config import RunConfig
from graphnorm.data.root import resolve_root
from graphnorm.sweep import runner as sweep_module
from graphnorm.sweep.tables import markdown_table
from graphnorm.train import loop as train_module
from graphnorm.train.loaders import clear_task_cache

EPOCHS = 2
RUNS = 20
TARGET_S = 0.5  # non-training time per run on a warm worker, at most
# phase -> (module, function) wrapped with a timer; "training" is the epochs loop, with per-epoch evaluation
PHASES: dict[str, tuple[Any, str]] = {
    "dataset": (train_module, "prepare_task"),
    "model build": (train_module, "build_model"),
    "training": (train_module, "train_node_level"),
    "probe": (probe_module, "probe_records"),
    "result write": (sweep_module, "write_result"),
}


@contextlib.contextmanager
def timed_phases(times: dict[str, float]) -> Iterator[None]:
    """While inside, the :data:`PHASES` functions add their seconds to ``times[phase]``."""
    originals = {phase: getattr(module, name) for phase, (module, name) in PHASES.items()}

    def timer(phase: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times[phase] = times.get(phase, 0.0) + time.perf_counter() - start

        return timed

    for phase, (module, name) in PHASES.items():
        setattr(module, name, timer(phase, originals[phase]))
    try:
        yield
    finally:
        for phase, (module, name) in PHASES.items():
            setattr(module, name, originals[phase])


def _config(seed: int, data_root: str) -> dict[str, Any]:
    config = RunConfig(dataset="cora", num_layers=2, hidden_channels=64, epochs=EPOCHS, seed=seed, data_root=data_root)
    return config.to_dict()


def warm_worker_rows(runs: int, out: Path, data_root: str) -> list[dict]:
    """Per-run phase seconds of ``execute_run`` in this (warm) process, with and without the dataset cache."""
    sweep_module.execute_run(train_module.run, _config(10_000, data_root), str(out), 1)  # warm-up: lazy imports
    samples: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for index in range(2 * runs):
        cached = index % 2 == 0
        if not cached:
            clear_task_cache()
        times: dict[str, float] = {}
        with timed_phases(times):
            start = time.perf_counter()
            sweep_module.execute_run(train_module.run, _config(index, data_root), str(out), 1)
            times["execute_run"] = time.perf_counter() - start
        samples[cached].append(times)
    rows = []
    for cached in (False, True):
        runs_times = samples[cached]
        row: dict[str, Any] = {"dataset cache": "yes" if cached else "no (load per run)"}
        for phase in (*PHASES, "execute_run"):
            row[f"{phase} (ms)"] = _common.median([t.get(phase, 0.0) for t in runs_times]) * 1e3
        other = [t["execute_run"] - sum(t.get(p, 0.0) for p in PHASES) for t in runs_times]
        row["other: config checks, seeding, log (ms)"] = _common.median(other) * 1e3
        not_training = [t["execute_run"] - t.get("training", 0.0) for t in runs_times]
        row["not training (ms)"] = _common.median(not_training) * 1e3
        rows.append(row)
    return rows


def import_seconds(repeats: int) -> float:
    """Median seconds to start a Python process that imports ``graphnorm.sweep`` (a worker's start, paid once)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import graphnorm.sweep, graphnorm.train"], check=True)
        times.append(time.perf_counter() - start)
    return _common.median(times)


def end_to_end_row(runs: int, out: Path, data_root: str, training_s: float) -> dict:
    """A real local sweep of ``runs`` runs, 1 worker x 1 thread: wall time per run, and minus training."""
    sweep = {
        "name": "overhead",
        "base": {"dataset": "cora", "num_layers": 2, "epochs": EPOCHS, "data_root": data_root},
        "grid": {"seed": list(range(runs))},
    }
    start = time.perf_counter()
    table = sweep_module.run_sweep(
        sweep, out, executor="local", workers=1, threads=1, make_plots=False, progress=False, log=lambda line: None
    )
    wall = time.perf_counter() - start
    results = [json.loads(path.read_text()) for path in (Path(out) / "results").glob("*.json")]
    elapsed = [result["elapsed_s"] for result in results]
    assert len(table) == runs and (table.status == "ok").all(), table
    return {
        "runs": runs,
        "sweep wall (s)": wall,
        "wall per run (ms)": wall / runs * 1e3,
        "wall per run - training (ms)": (wall / runs - training_s) * 1e3,
        "execute_run, slowest (the worker's first, cold) (ms)": max(elapsed) * 1e3,
        "execute_run, median (ms)": _common.median(elapsed) * 1e3,
    }


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    runs = repeats or (2 if quick else RUNS)
    data_root = str(resolve_root())
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm = warm_worker_rows(runs, Path(tmp) / "warm", data_root)
            training_s = warm[1]["training (ms)"] / 1e3
            end_to_end = end_to_end_row(runs, Path(tmp) / "sweep", data_root, training_s)
            end_to_end["process start + imports (ms, once per worker)"] = import_seconds(1 if quick else 3) * 1e3
    finally:
        torch.set_num_threads(previous_threads)
    for row in (*warm, end_to_end):
        print(common.format_row(row), flush=True)
    not_training = warm[1]["not training (ms)"] / 1e3
    targets = [
        common.Target(
            "not-training time per run, warm worker with the dataset cache (s)",
            f"< {TARGET_S}",
            not_training,
            not_training < TARGET_S,
        ),
        common.Target(
            "not-training time per run, load per run (before the cache) (s)",
            "reported",
            warm[0]["not training (ms)"] / 1e3,
            None,
        ),
    ]
    setup = (
        f"Cora, 2-layer GCN (hidden 64), {EPOCHS} epochs, probe on, 1 thread; warm worker: {runs} runs with the "
        f"worker's dataset cache and {runs} with a cleared cache, alternating, medians per run; end to end: a local "
        f"sweep of {runs} runs on 1 worker; {_common.load_summary()}."
    )
    tables = [markdown_table(warm), markdown_table([end_to_end])]
    return common.BenchReport(
        name="sweep_overhead",
        title="10. Sweep overhead: per-run cost that is not training",
        setup=setup,
        tables=tables,
        targets=targets,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 runs (smoke test)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    print(run(quick=args.quick, out_dir=args.out).to_markdown())


if __name__ == "__main__":
    main()
