"""Benchmark: one epoch of OGB's GIN with a virtual node on ogbg-molhiv (experiments/runs/molhiv_gin_virtual.yaml)
trained by 1 process and by 2 data-parallel processes (torchrun, gloo) on the same global batch of 32 graphs.

Each configuration runs ``graphnorm train`` under ``torchrun --nproc-per-node N`` with ``batch_size`` 32/N, one
epoch, no probe, no time budget, no checkpoint, ``--threads`` torch threads per process (default 1: on a shared
machine a second OpenMP thread waits on busy cores, docs/how-to/shared-machines.md). Reported from the record: the
epoch's training loop (graphs / ``train_graphs_per_s``: steps, no evaluation), the epoch with rank 0's evaluation
(the history's ``train_time_s``), the command's wall and CPU time (start, data, training, evaluation), the ratios,
and the load average before and after each configuration: on a shared machine other processes take cores too.

    python -m experiments.benchmarks.bench_ddp [--limit-graphs N] [--processes 1 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graphnorm.sweep.cpu_budget import usable_cores

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "experiments" / "runs" / "molhiv_gin_virtual.yaml"
GLOBAL_BATCH = 32


def busiest_processes(count: int = 6) -> list[str]:
    """The processes taking the most CPU now (``ps``): what else shares the machine."""
    try:
        listing = subprocess.run(
            ["ps", "-eo", "pcpu,comm", "--sort=-pcpu"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [" ".join(line.split()) for line in listing.splitlines()[1 : count + 1]]


def children_cpu_s() -> float:
    """User and system CPU seconds of this process's finished children and their descendants: on a loaded machine
    the work a configuration took, whatever share of the cores it got."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def train_graphs(limit_graphs: int | None) -> int:
    """The number of training graphs of the preset (with ``limit_graphs``)."""
    from graphnorm.config import RunConfig
    from graphnorm.files import load_yaml_file
    from graphnorm.train.loaders import prepare_task

    config = RunConfig.from_dict({**load_yaml_file(PRESET, "config"), "limit_graphs": limit_graphs})
    return len(prepare_task(config).train)


def run_epoch(processes: int, threads: int, limit_graphs: int | None, folder: Path) -> dict:
    """One epoch under ``torchrun --nproc-per-node processes``: the record's timings, wall time and load."""
    out = folder / f"record_{processes}.json"
    overrides = [f"batch_size={GLOBAL_BATCH // processes}", "epochs=1", "probe=false", "max_train_minutes=null"]
    overrides += ["checkpoint_dir=null", *([f"limit_graphs={limit_graphs}"] if limit_graphs else [])]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "GRAPHNORM_THREADS": str(threads)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    command += ["-m", "graphnorm.cli", "train", str(PRESET), *overrides, "--out", str(out)]
    load_before, start, cpu_before = os.getloadavg()[0], time.perf_counter(), children_cpu_s()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, children_cpu_s() - cpu_before
    if done.returncode != 0:
        raise RuntimeError(f"{processes} process(es) failed:\n{done.stderr[-4000:]}")
    record = json.loads(out.read_text())
    graphs = -(-train_graphs(limit_graphs) // processes) * processes  # padded to a multiple of the processes
    loop_s = graphs / record["train_graphs_per_s"]
    return {
        "processes": processes,
        "threads each": threads,
        "steps": record["steps"],
        "training loop s": loop_s,
        "epoch with eval s": record["history"][0]["train_time_s"],
        "command wall s": wall,
        "command CPU s": cpu,
        "load before": load_before,
        "load after": os.getloadavg()[0],
        "train_graphs_per_s": record["train_graphs_per_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-graphs", type=int, default=None, help="graphs per split (default: all of MolHIV)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    args = parser.parse_args(argv)
    print(f"usable cores: {usable_cores()}; busiest processes now: {busiest_processes()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for processes in args.processes:
            rows.append(run_epoch(processes, args.threads, args.limit_graphs, Path(folder)))
            print(json.dumps(rows[-1]), flush=True)
    print(f"busiest processes after: {busiest_processes()}")
    keys = ("training loop s", "epoch with eval s", "command wall s", "command CPU s")
    print("| processes x threads | steps | " + " | ".join(keys) + " | load before / after |")
    print("|---|---|" + "---|" * len(keys) + "---|")
    for row in rows:
        values = " | ".join("-" if row[k] is None else f"{row[k]:.1f}" for k in keys)
        load = f"{row['load before']:.1f} / {row['load after']:.1f}"
        print(f"| {row['processes']} x {row['threads each']} | {row['steps']} | {values} | {load} |")
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        ratios = {k: first[k] / last[k] for k in keys if first[k] and last[k]}
        named = ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
        print(f"ratio {first['processes']} / {last['processes']} processes (above 1: less with more): {named}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
