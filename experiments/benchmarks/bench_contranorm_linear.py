"""ContraNorm in linear time: the random-feature estimator (``ContraNorm(random_features=m)``) against the exact kernel.

    python -m experiments.benchmarks.bench_contranorm_linear [--quick] [--out DIR] [--features M ...]
        [--sizes N ...] [--skip-error] [--skip-scale]

The relative error of the output and of the mix term ``P x`` against the exact kernel for several m (n = 20,000,
Gaussian and clustered rows), and the time and extra peak memory of one call at 10^5 and 10^6 nodes beside the
exact kernel's at 20,000 (its time at larger n estimated from its n^2 growth, not run). Protocol:
``docs/results/benchmarks.md``. The markdown report goes to stdout and ``DIR/contranorm_linear.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from experiments.benchmarks import _common as common
from experiments.benchmarks import run_all
from experiments.benchmarks.bench_contranorm import random_graph
from graphnorm.norms import ContraNorm
from graphnorm.sweep.tables import markdown_table

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "runs" / "benchmarks"
FEATURES = (16, 64, 256, 1024)


def clustered_rows(num_nodes: int, channels: int, seed: int = 0) -> Tensor:
    """Rows around 8 random centres with noise of half their scale."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(8, channels, generator=generator)
    labels = torch.randint(0, 8, (num_nodes,), generator=generator)
    return centres[labels] + 0.5 * torch.randn(num_nodes, channels, generator=generator)


def relative_error(estimate: Tensor, exact: Tensor) -> float:
    return float((estimate - exact).norm() / exact.norm())


def error_rows(num_nodes: int, channels: int, features: list[int], seeds: int = 3) -> list[dict]:
    """Relative errors of the output and of ``P x`` for every input, exclusion setting and ``m``: the mean and the
    largest over ``seeds`` feature seeds (one draw is noisy: positive features have heavy tails), and the CPU seconds
    of one estimated mix against one exact mix."""
    x_gauss, edge_index = random_graph(num_nodes, channels, degree=10)
    inputs = {"gaussian": x_gauss, "clustered": clustered_rows(num_nodes, channels)}
    rows = []
    for (name, x), exclude in ((item, exclude) for item in inputs.items() for exclude in (True, False)):
        edges = edge_index if exclude else None
        exact = ContraNorm(channels, exclude_neighbors=exclude)
        with torch.no_grad():
            start = time.process_time()
            exact_mix = exact.negative_mix(x, None, edges)
            exact_cpu = time.process_time() - start
            exact_out = exact(x, edge_index=edges)
        for m in features:
            out_errors, mix_errors, cpu = [], [], []
            for seed in range(seeds):
                approx = ContraNorm(channels, exclude_neighbors=exclude, random_features=m, feature_seed=seed)
                with torch.no_grad():
                    start = time.process_time()
                    mix = approx.negative_mix(x, None, edges)
                    cpu.append(time.process_time() - start)
                    out = approx(x, edge_index=edges)
                out_errors.append(relative_error(out, exact_out))
                mix_errors.append(relative_error(mix, exact_mix))
            row = {
                "input": name,
                "neighbours excluded": exclude,
                "m": m,
                "output rel. error (mean)": sum(out_errors) / seeds,
                "output rel. error (max)": max(out_errors),
                "mix rel. error (mean)": sum(mix_errors) / seeds,
                "mix rel. error (max)": max(mix_errors),
                "|Px| / |x|": float(exact_mix.norm() / x.norm()),
                "mix CPU s (approx)": common.median(cpu),
                "mix CPU s (exact)": exact_cpu,
            }
            print(f"[bench_contranorm_linear] {row}", file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _rough_need_bytes(call: str, num_nodes: int, num_edges: int, channels: int, m: int) -> float:
    """A generous estimate of a call's peak (measured at 10^5 nodes: 0.3 GB forward, 0.7 GB forward + backward for
    m = 256, d = 32): about six ``[n, m]`` and twenty ``[n, d]`` float32 tensors in forward + backward, half of that
    in forward, plus the deduplicated pairs and their CSR indices (int64)."""
    share = 1.0 if call == "forward + backward" else 0.5
    return share * 4.0 * num_nodes * (6 * m + 20 * channels) + 8.0 * 4 * (num_edges + num_nodes)


def _calls(module: ContraNorm, x: Tensor, edge_index: Tensor) -> dict[str, Callable[[], None]]:
    upstream = torch.randn_like(x)

    def forward() -> None:
        with torch.no_grad():
            module(x, edge_index=edge_index)

    def forward_backward() -> None:
        leaf = x.detach().requires_grad_(True)
        module(leaf, edge_index=edge_index).backward(upstream)
        module.zero_grad(set_to_none=True)

    return {"forward": forward, "forward + backward": forward_backward}


def _time_memory_cpu(fn: Callable[[], None]) -> tuple[float, float | None, float]:
    """Wall seconds and extra peak RSS of one ``fn()`` (:func:`_common.time_and_peak_memory`), and the process's CPU
    seconds inside the call alone (the memory reading's own garbage collection and heap trim left out)."""
    cpu = 0.0

    def counted() -> None:
        nonlocal cpu
        start = time.process_time()
        fn()
        cpu = time.process_time() - start

    seconds, memory = common.time_and_peak_memory(counted)
    return seconds, memory, cpu


def cost_rows(sizes: list[int], channels: int, features: list[int], exact_size: int) -> list[dict]:
    """One forward and one forward + backward call per (kernel, n): wall and CPU seconds, extra peak RSS.

    The process's CPU seconds are the steadier figure on a shared machine (with one torch thread they are close to
    the wall time of a quiet one); the exact kernel's n^2 estimate scales its CPU seconds."""
    rows = []
    cases = [("exact", exact_size, None)] + [("random features", n, m) for n in sizes for m in features]
    exact_cpu = {}
    for kernel, n, m in cases:
        x, edge_index = random_graph(n, channels, degree=10)
        module = ContraNorm(channels, random_features=m)
        for call, fn in _calls(module, x, edge_index).items():
            available = _available_bytes()
            need = _rough_need_bytes(call, n, edge_index.size(1), channels, m or 0)
            if m is not None and available is not None and need > available / 2:
                skipped = f"{call}: skipped, needs ~{need / 2**30:.1f} GB of {available / 2**30:.1f} GB free"
                rows.append({"kernel": kernel, "n": n, "edges": edge_index.size(1), "m": m, "call": skipped})
                continue
            seconds, memory, cpu_seconds = _time_memory_cpu(fn)
            if kernel == "exact":
                exact_cpu[call] = cpu_seconds
            row = {
                "kernel": kernel,
                "n": n,
                "edges": edge_index.size(1),
                "m": m if m is not None else "-",
                "call": call,
                "wall s": seconds,
                "CPU s": cpu_seconds,
                "extra peak MB": common.megabytes(memory),
                "exact CPU s, n^2 estimate": exact_cpu.get(call, 0.0) * (n / exact_size) ** 2
                if kernel != "exact"
                else cpu_seconds,
            }
            print(f"[bench_contranorm_linear] {row}", file=sys.stderr, flush=True)
            rows.append(row)
        del x, edge_index, module
    return rows


def run(
    quick: bool = False,
    out_dir: Path | None = None,
    features: list[int] | None = None,
    sizes: list[int] | None = None,
    error: bool = True,
    scale: bool = True,
) -> run_all.BenchReport:
    out_dir = out_dir or DEFAULT_OUT
    if quick:
        error_n, error_d, cost_sizes, cost_d, exact_size = 400, 8, [1000, 2000], 8, 500
        error_features, cost_features = features or [16, 64], features or [16]
    else:
        error_n, error_d, cost_sizes, cost_d, exact_size = 20_000, 64, sizes or [100_000, 1_000_000], 32, 20_000
        error_features, cost_features = features or list(FEATURES), features or [64, 256]
    load_start = common.load_summary()
    errors = error_rows(error_n, error_d, error_features) if error else []
    costs = cost_rows(cost_sizes, cost_d, cost_features, exact_size) if scale else []
    load_end = common.load_summary()
    tables = [f"Machine: {load_start} at start; {load_end} at end. Single calls, float32, torch threads: "
              f"{torch.get_num_threads()}."]  # fmt: skip
    if errors:
        tables += [
            f"### Error vs the number of random features m (n = {error_n}, d = {error_d}, degree 10, feature seeds "
            "0-2)",
            markdown_table(errors),
        ]
    if costs:
        tables += [
            f"### Time and extra peak memory per call (d = {cost_d}, degree 10)",
            f"The exact kernel is measured at n = {exact_size} only: its time grows with n^2, so at 10^5 and 10^6 "
            "nodes one call would take the estimate in the last column (not run).",
            markdown_table(costs),
        ]
    report = run_all.BenchReport(
        name="contranorm_linear",
        title="ContraNorm in linear time: random-feature estimator vs exact kernel (bench_contranorm_linear)",
        setup="`ContraNorm(random_features=m)` (positive random features, "
        "`graphnorm/norms/ops/contranorm_random_features.py`) against the exact kernel: output and mix-term error vs "
        "m, and time and memory per call at scale.",
        tables=tables,
        targets=[run_all.Target("none: error and cost are reported, the Cora cell is the acceptance", "-", None, None)],
    )
    common.write_markdown(out_dir / "contranorm_linear.md", "\n\n".join(tables))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--features", type=int, nargs="+", default=None, help="values of m (default per part)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="node counts of part 2 (default 1e5 1e6)")
    parser.add_argument("--skip-error", action="store_true", help="leave out part 1")
    parser.add_argument("--skip-scale", action="store_true", help="leave out part 2")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    report = run(args.quick, args.out, args.features, args.sizes, not args.skip_error, not args.skip_scale)
    print(report.to_markdown())


if __name__ == "__main__":
    main()
