"""Speed on shared cores: a deep GCN's forward and training epoch alone and beside a CPU-bound neighbour process,
with 1 and with as many torch threads as usable cores; subnormal floats and flush-to-zero.

    python -m experiments.benchmarks.bench_threads [--quick] [--out DIR]

Why: a deep model's forward with as many intra-op threads as cores can be many times slower beside another busy
process than with one thread (each op waits for a descheduled thread). Also the OpenMP spin policy (not in
``--quick``), subnormal counts in every module output and gradient, and the trained model's epoch and collapse probe
with and without ``torch.set_flush_denormal(True)``. Targets: none as numbers; the ratios say whether a thread count
collapses beside a neighbour. Protocol: ``docs/results/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from experiments.benchmarks.bench_gcn import load_cora, synthetic_graph
from graphnorm.models.gcn import DeepGCN
from graphnorm.sweep.cpu_budget import usable_cores
from graphnorm.sweep.tables import markdown_table
from graphnorm.threads import single_thread

HIDDEN = 64
TRAIN_EPOCHS = 30  # vanilla 64-layer model trained this long before counting subnormals (30: ~4.5% of gradients)
TINY = torch.finfo(torch.float32).tiny
NEIGHBOUR = "while True: pass"


def openmp_runtime() -> str:
    """torch's intra-op backend and OpenMP runtime, from ``torch.__config__.parallel_info()``."""
    info = torch.__config__.parallel_info()
    lines = [line.strip() for line in info.splitlines()]
    backend = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("ATen parallel backend")), "?")
    openmp = next((line for line in lines if line.startswith("OpenMP")), "no OpenMP")
    return f"{backend} backend, {openmp}"


@contextlib.contextmanager
def neighbour_process() -> Iterator[Callable[[bool], None]]:
    """A CPU-bound neighbour (``python -c 'while True: pass'``), paused; yields ``run(on)`` to resume or pause it.
    Killed on exit."""
    process = subprocess.Popen([sys.executable, "-c", NEIGHBOUR])
    os.kill(process.pid, signal.SIGSTOP)

    def run(on: bool) -> None:
        os.kill(process.pid, signal.SIGCONT if on else signal.SIGSTOP)

    try:
        yield run
    finally:
        process.kill()
        process.wait()


def alone_and_beside_samples(candidates: dict, repeats: int) -> dict[tuple, list[float]]:
    """Seconds per ``(candidate, beside)``: in every round both conditions, in alternating order (the neighbour
    process paused, then running, or the reverse), each timing every candidate once (interleaved)."""
    samples: dict[tuple, list[float]] = {(name, on): [] for name in candidates for on in (False, True)}
    with neighbour_process() as neighbour:
        for round_index in range(repeats):
            for on in (False, True) if round_index % 2 == 0 else (True, False):
                neighbour(on)
                times = _common.time_interleaved_samples(candidates, repeats=1, warmup=0, min_seconds=0.0)
                for name, values in times.items():
                    samples[(name, on)] += values
            neighbour(False)
    return samples


def _model(data: Data, num_layers: int, norm: str) -> nn.Module:
    torch.manual_seed(0)
    return DeepGCN(data.num_features, HIDDEN, int(data.y.max()) + 1, num_layers, norm=norm, dropout=0.5)


def _calls(model: nn.Module, data: Data) -> dict[str, Callable[[], None]]:
    # RunConfig's defaults; the weight decay shrinks a vanilla deep model's weights until its gradients underflow
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def forward() -> None:
        model.eval()
        with torch.no_grad():
            model(data.x, data.edge_index)

    def epoch() -> None:
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()

    return {"eval forward": forward, "training epoch": epoch}


def _with_threads(threads: int, fn: Callable[[], None]) -> Callable[[], None]:
    def call() -> None:
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            fn()
        finally:
            torch.set_num_threads(previous)

    return call


def threads_beside_neighbour(data: Data, num_layers: int, repeats: int) -> list[dict]:
    """Rows: per call kind and thread count, median alone / beside the neighbour, ratio, peak memory."""
    model = _model(data, num_layers, "none")
    thread_counts = sorted({1, max(2, usable_cores())})
    rows = []
    for kind, fn in _calls(model, data).items():
        candidates = {threads: _with_threads(threads, fn) for threads in thread_counts}
        samples = alone_and_beside_samples(candidates, repeats)
        for threads in thread_counts:
            alone, beside = _common.median(samples[(threads, False)]), _common.median(samples[(threads, True)])
            memory = _common.peak_memory(candidates[threads])
            rows.append(
                {
                    "call": f"{kind}, {num_layers} layers",
                    "threads": threads,
                    "alone (ms)": alone * 1e3,
                    "beside neighbour (ms)": beside * 1e3,
                    "beside / alone": beside / alone,
                    "worst beside (ms)": max(samples[(threads, True)]) * 1e3,
                    "peak extra memory (MB)": _common.megabytes(memory),
                }
            )
    return rows


def subnormals(tensor: torch.Tensor) -> int:
    magnitude = tensor.detach().abs()
    return int(((magnitude > 0) & (magnitude < TINY)).sum())


def count_subnormals(model: nn.Module, data: Data) -> dict[str, int]:
    """Subnormal values in one train-mode forward (module outputs) and its backward (their grads, parameter grads)."""
    counts = {"forward values": 0, "forward subnormal": 0, "backward values": 0, "backward subnormal": 0}

    def on_grad(grad: torch.Tensor) -> None:
        counts["backward values"] += grad.numel()
        counts["backward subnormal"] += subnormals(grad)

    def on_output(module: nn.Module, inputs: object, output: object) -> None:
        if isinstance(output, torch.Tensor) and output.is_floating_point():
            counts["forward values"] += output.numel()
            counts["forward subnormal"] += subnormals(output)
            if output.requires_grad:
                output.register_hook(on_grad)

    handles = [m.register_forward_hook(on_output) for m in model.modules() if m is not model]
    try:
        model.train()
        model.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    finally:
        for handle in handles:
            handle.remove()
    for parameter in model.parameters():
        if parameter.grad is not None:
            on_grad(parameter.grad)
    model.zero_grad()
    return counts


def subnormal_rows(data: Data, depths: tuple[int, ...], norms: tuple[str, ...]) -> list[dict]:
    rows = []
    for norm in norms:
        for num_layers in depths:
            counts = count_subnormals(_model(data, num_layers, norm), data)
            rows.append({"model": f"{norm}, {num_layers} layers, initial weights", **counts})
    return rows


def train_model(model: nn.Module, data: Data, epochs: int) -> None:
    epoch = _calls(model, data)["training epoch"]
    for _ in range(epochs):
        epoch()


def flush_rows(model: nn.Module, data: Data, repeats: int) -> tuple[list[dict], bool]:
    """The trained model's training epoch (1 thread) with and without flush-to-zero, and whether its probe values
    are equal bit for bit."""
    from graphnorm.analysis.probe import probe_records

    state = {k: v.clone() for k, v in model.state_dict().items()}
    step = _calls(model, data)["training epoch"]

    def epoch_with(flush: bool) -> Callable[[], None]:
        def call() -> None:
            model.load_state_dict(state)  # every call from the same trained weights
            torch.set_flush_denormal(flush)
            try:
                step()
            finally:
                torch.set_flush_denormal(False)

        return _with_threads(1, call)

    times = _common.time_interleaved({"no flush": epoch_with(False), "flush": epoch_with(True)}, repeats=repeats)
    model.load_state_dict(state)
    model.eval()
    probes = []
    for flush in (False, True):
        torch.set_flush_denormal(flush)
        try:
            probes.append([row["value"] for row in probe_records(model, data)])
        finally:
            torch.set_flush_denormal(False)
    equal = json.dumps(probes[0]) == json.dumps(probes[1])
    rows = [
        {
            "call": "training epoch of the trained vanilla model, 1 thread",
            "no flush (ms)": times["no flush"] * 1e3,
            "flush-to-zero (ms)": times["flush"] * 1e3,
            "no flush / flush": times["no flush"] / times["flush"],
            "probe values equal": equal,
        }
    ]
    return rows, equal


def wait_policy_rows(num_layers: int, passes: int) -> list[dict]:
    """The 2-thread eval forward beside the neighbour, in fresh processes, per ``OMP_WAIT_POLICY``."""
    rows = []
    with neighbour_process() as neighbour:
        neighbour(True)
        for policy in ("", "PASSIVE", "ACTIVE"):
            times = _common.run_json_worker(
                "experiments.benchmarks.bench_threads",
                ["--child", str(num_layers), str(passes)],
                environment={"OMP_WAIT_POLICY": policy or None},
                timeout_s=600,
            )
            rows.append(
                {
                    "OMP_WAIT_POLICY": policy or "(unset)",
                    "2 threads, median (ms)": _common.median(times["2"]) * 1e3,
                    "1 thread, median (ms)": _common.median(times["1"]) * 1e3,
                    "2 / 1 threads": _common.median(times["2"]) / _common.median(times["1"]),
                }
            )
    return rows


def child(num_layers: int, passes: int) -> None:
    """``--child``: eval forwards with 2 and 1 threads in interleaved rounds; prints their times as JSON."""
    data = load_cora()
    forward = _calls(_model(data, num_layers, "none"), data)["eval forward"]
    fns = {"2": _with_threads(2, forward), "1": _with_threads(1, forward)}
    print(json.dumps(_common.time_interleaved_samples(fns, repeats=passes, warmup=1, min_seconds=0.0)))


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    data: Data = synthetic_graph() if quick else load_cora()
    num_layers = 2 if quick else 64
    repeats = repeats or (1 if quick else 6)
    tables, targets = [], []
    rows = threads_beside_neighbour(data, num_layers, repeats)
    for row in rows:
        print(common.format_row(row), flush=True)
    tables.append(markdown_table(rows))
    for row in rows:
        what = f"{row['call']}, {row['threads']} thread(s): beside / alone"
        targets.append(common.Target(what, "reported", row["beside / alone"], None))
    if not quick:
        policy = wait_policy_rows(num_layers, passes=3)
        for row in policy:
            print(common.format_row(row), flush=True)
        tables.append("Spin policy, beside the neighbour, fresh processes:\n\n" + markdown_table(policy))
    depths = (2,) if quick else (16, 64)
    norms = ("none", "pairnorm") if quick else ("none", "pairnorm", "contranorm")
    epochs = 2 if quick else TRAIN_EPOCHS
    model = _model(data, num_layers, "none")
    with single_thread():  # counting and training are not what is timed here: 1 thread, the fast setting
        counts = subnormal_rows(data, depths, norms)
        train_model(model, data, epochs)
        counts.append({"model": f"none, {num_layers} layers, after {epochs} epochs", **count_subnormals(model, data)})
    for row in counts:
        print(common.format_row(row), flush=True)
    tables.append("Subnormal float32 values (0 < |x| < tiny), train-mode forward and backward:\n\n")
    tables[-1] += markdown_table(counts)
    flush, equal = flush_rows(model, data, repeats)
    print(common.format_row(flush[0]), flush=True)
    tables.append(markdown_table(flush))
    targets.append(common.Target("flush-to-zero changes the probe's values", "reported", float(not equal), None))
    graph = "random graph" if quick else "Cora"
    setup = (
        f"{graph} ({data.num_nodes} nodes), DeepGCN {num_layers} layers, hidden {HIDDEN}, norm none; torch "
        f"{openmp_runtime()}; {usable_cores()} usable cores; neighbour: one `python -c '{NEIGHBOUR}'` paused "
        f"(SIGSTOP) in the alone rounds, {repeats} rounds of each, median; {_common.load_summary()}."
    )
    return common.BenchReport(
        name="threads",
        title="9. Shared cores: threads beside a busy neighbour, subnormals",
        setup=setup,
        tables=tables,
        targets=targets,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", nargs=2, type=int, metavar=("LAYERS", "PASSES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return
    print(run(quick=args.quick, out_dir=args.out).to_markdown())


if __name__ == "__main__":
    main()
