"""ContraNorm: streaming linear-memory kernel vs the dense reference, and its scaling in n.

    python -m experiments.benchmarks.bench_contranorm [--quick] [--out DIR] [--repeats R] [--neighbour]

Forward + backward of ``ContraNorm`` against a dense reference of the official formula at n = 2,708 and 20,000
(interleaved rounds, median, extra peak memory); the kernel's scaling in n (time, memory, FLOP rate against a
square ``torch.mm``); the process RSS growth a user sees (fresh processes); with ``--neighbour``, the speed-up
beside a CPU-bound neighbour process. Protocol and targets: ``docs/results/benchmarks.md``. The markdown report
goes to stdout and ``DIR/contranorm.md``, the plot to ``DIR/contranorm_scaling.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from experiments.benchmarks import _common as common
from graphnorm.norms import ContraNorm
from graphnorm.norms.ops import contranorm_symmetric_tiles as contranorm_symmetric
from graphnorm.sweep.tables import markdown_table

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "runs" / "benchmarks"


class DenseContraNorm(nn.Module):
    """The official 'CN' formula with the full ``n x n`` similarity (one graph), then LayerNorm: the baseline."""

    def __init__(self, channels: int, scale: float = 1.0, tau: float = 1.0) -> None:
        super().__init__()
        self.scale, self.tau = scale, tau
        self.layer_norm = nn.LayerNorm(channels)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x_hat = F.normalize(x, dim=1)
        sim = x_hat @ x_hat.T / self.tau  # [n, n]
        excluded = torch.zeros_like(sim, dtype=torch.bool)
        excluded[edge_index[0], edge_index[1]] = True
        excluded.fill_diagonal_(True)
        probs = torch.softmax(sim.masked_fill(excluded, -math.inf), dim=1)
        return self.layer_norm((1 + self.scale) * x - self.scale * (probs @ x))


def half_tile_matmul_flops(num_nodes: int, channels: int) -> float:
    """Matmul FLOPs of one forward + backward of the half-tile kernel on one graph, summed over its upper tiles.

    Per tile ``[bI, bJ]`` (inner sizes ``d + 1`` for ``[x_hat, 1]`` and ``[v, 1]``, ``2d + 2`` for ``dS + dS^T``):
    forward the tile and ``E [v, 1]`` for its rows (and ``E^T [v, 1]`` for its columns off the diagonal); backward
    the recomputed tile (unless the graph is one tile), ``E^T g``, the ``dS + dS^T`` product and ``(.) x_hat`` (each
    off-diagonal product twice, once per triangle, except the tile and ``dS + dS^T`` themselves).
    """
    d = channels
    bounds = contranorm_symmetric._tile_bounds(num_nodes)
    recompute = len(bounds) > 2
    flops = 0.0
    for i, j in contranorm_symmetric._upper_tiles(bounds):
        area = 2.0 * (bounds[i + 1] - bounds[i]) * (bounds[j + 1] - bounds[j])  # 2 FLOPs per multiply-add
        mirrored = 2 if i != j else 1
        flops += area * (d + 1) * (1 + recompute)  # the tile, in forward and again in backward
        flops += area * (d + 1) * mirrored  # E [v, 1]
        flops += area * d * mirrored  # E^T g / E g
        flops += area * (2 * d + 2)  # dS + dS^T
        flops += area * d * mirrored  # (dS + dS^T) x_hat, both triangles
    return flops


def random_graph(num_nodes: int, channels: int, degree: int = 4, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random features and a random undirected edge set with average degree ~``degree``."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, channels, generator=generator)
    half = torch.randint(0, num_nodes, (2, degree * num_nodes // 2), generator=generator)
    return x, torch.cat([half, half.flip(0)], dim=1)


def fwd_bwd(module: nn.Module, x: Tensor, edge_index: Tensor) -> Callable[[], None]:
    """One forward + backward through ``module`` (fresh leaf each call, gradients cleared)."""
    upstream = torch.randn_like(x)

    def step() -> None:
        leaf = x.detach().requires_grad_(True)
        module(leaf, edge_index=edge_index).backward(upstream)
        module.zero_grad(set_to_none=True)

    return step


def measure(candidates: dict[str, Callable[[], None]], repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds and extra peak memory (bytes) per candidate.

    The first round (one call per candidate, in order) measures memory and time together; ``repeats - 1`` further
    interleaved rounds add time samples. No warm-up round: one-time costs are negligible at these sizes (>= 0.1 s).
    """
    first = {name: common.time_and_peak_memory(fn) for name, fn in candidates.items()}
    samples = {name: [seconds] for name, (seconds, _) in first.items()}
    if repeats > 1:
        more = common.time_interleaved_samples(candidates, repeats=repeats - 1, warmup=0, min_seconds=0.0)
        for name, values in more.items():
            samples[name] += values
    return {name: common.median(v) for name, v in samples.items()}, {name: m for name, (_, m) in first.items()}


def compare_with_dense(sizes: list[int], channels: int, repeats: int, mm_rate: float) -> list[dict]:
    rows = []
    for n in sizes:
        x, edge_index = random_graph(n, channels)
        ours, dense = ContraNorm(channels), DenseContraNorm(channels)
        candidates = {"streaming": fwd_bwd(ours, x, edge_index), "dense": fwd_bwd(dense, x, edge_index)}
        seconds, memory = measure(candidates, repeats)
        print(f"[bench_contranorm] n={n}: {seconds}", file=sys.stderr, flush=True)
        rows.append(
            {
                "n": n,
                "d": channels,
                "streaming s": seconds["streaming"],
                "dense s": seconds["dense"],
                "speed-up": seconds["dense"] / seconds["streaming"],
                "streaming extra MB": common.megabytes(memory["streaming"]),
                "dense extra MB": common.megabytes(memory["dense"]),
                # the dense reference's 12 n^2 d matmul FLOPs (forward S, P x; backward dP, P^T g, dS x_hat twice)
                # are the least any exact method executes: at the mm rate they bound the reachable speed-up
                "dense fraction of mm rate": 12.0 * n * n * channels / seconds["dense"] / mm_rate,
                "max exact speed-up": seconds["dense"] * mm_rate / (12.0 * n * n * channels),
            }
        )
    return rows


def scaling(sizes: list[int], channels: int, repeats: int, mm_size: int) -> list[dict]:
    """Kernel time per size, with the square-mm rate timed in the SAME interleaved rounds: on a shared machine the
    mm rate moves by +-25% between calls, so a rate measured once at the start would make the fraction noise."""
    rows = []
    module = ContraNorm(channels)
    left, right = torch.randn(mm_size, mm_size), torch.randn(mm_size, mm_size)
    square_mm = {"mm": lambda: torch.mm(left, right)}
    for n in sizes:
        x, edge_index = random_graph(n, channels)
        seconds, memory = measure({"streaming": fwd_bwd(module, x, edge_index)} | square_mm, repeats)
        print(f"[bench_contranorm] scaling n={n}: {seconds}", file=sys.stderr, flush=True)
        flops = half_tile_matmul_flops(n, channels)
        mm_rate = 2.0 * mm_size**3 / seconds["mm"]
        rows.append(
            {
                "n": n,
                "seconds": seconds["streaming"],
                "extra MB": common.megabytes(memory["streaming"]),
                "GFLOP/s": flops / seconds["streaming"] / 1e9,
                "mm GFLOP/s (same rounds)": mm_rate / 1e9,
                "fraction of mm rate": flops / seconds["streaming"] / mm_rate,
            }
        )
    return rows


def rss_growth(impl: str, num_nodes: int, channels: int) -> dict:
    """Worker body (``--worker``): the process's resident-memory growth over two forward + backward calls of ``impl``
    (``"streaming"`` or ``"dense"``) on :func:`random_graph`, inputs (features, graph, upstream gradient, module)
    created before the first reading. Growths in bytes over ``VmRSS`` before the first call: ``VmHWM`` after the
    first call, ``VmHWM`` after the second (the peak over both calls: memory that piles up across calls shows here)
    and ``VmRSS`` after the second (what the process keeps). Meaningful only in a fresh process."""
    x, edge_index = random_graph(num_nodes, channels)
    module = ContraNorm(channels) if impl == "streaming" else DenseContraNorm(channels)
    step = fwd_bwd(module, x, edge_index)
    before = common.status_bytes("VmRSS")
    step()
    first_peak = common.status_bytes("VmHWM")
    step()
    second_peak, after = common.status_bytes("VmHWM"), common.status_bytes("VmRSS")
    if None in (before, first_peak, second_peak, after):
        raise RuntimeError("rss_growth needs /proc/self/status")
    return {
        "impl": impl,
        "n": num_nodes,
        "d": channels,
        "peak growth, 1 call": first_peak - before,
        "peak growth, 2 calls": second_peak - before,
        "kept after 2 calls": after - before,
    }


def rss_growth_rows(sizes: list[int], channels: int) -> list[dict]:
    """:func:`rss_growth` of the streaming kernel and of the dense reference, each in a fresh Python process with
    glibc malloc's default settings (no ``MALLOC_*`` / ``GLIBC_TUNABLES``) and this process's torch thread count:
    the extra memory a user sees (no fresh ``mmap`` forced, unlike :func:`_common.peak_memory`). MB = 2^20 bytes."""
    rows = []
    for n in sizes:
        for impl in ("streaming", "dense"):
            args = ["--worker", impl, str(n), str(channels), "--threads", str(torch.get_num_threads())]
            result = common.run_json_worker("experiments.benchmarks.bench_contranorm", args, default_allocator=True)
            row = {"n": n, "d": channels, "kernel": impl}
            row.update({f"{key} (MB)": common.megabytes(result[key]) for key in RSS_COLUMNS})
            print(f"[bench_contranorm] RSS growth {row}", file=sys.stderr, flush=True)
            rows.append(row)
    return rows


RSS_COLUMNS = ("peak growth, 1 call", "peak growth, 2 calls", "kept after 2 calls")


def beside_neighbour(sizes: list[int], channels: int, repeats: int) -> list[dict]:
    """Streaming vs dense speed-up, alone and beside a CPU-bound neighbour process (``bench_threads``'s
    :func:`~experiments.benchmarks.bench_threads.neighbour_process`, paused in the alone rounds): in every round both
    conditions, in alternating order, each timing both kernels once (interleaved). Speed-up: the condition's median
    dense time over its median streaming time, so alone and beside come from the same rounds."""
    from experiments.benchmarks.bench_threads import alone_and_beside_samples

    rows = []
    for n in sizes:
        x, edge_index = random_graph(n, channels)
        candidates = {
            "streaming": fwd_bwd(ContraNorm(channels), x, edge_index),
            "dense": fwd_bwd(DenseContraNorm(channels), x, edge_index),
        }
        samples = alone_and_beside_samples(candidates, repeats)
        median = {key: common.median(values) for key, values in samples.items()}
        for on in (False, True):
            row = {"n": n, "d": channels, "neighbour": "beside" if on else "alone", "rounds": repeats}
            row["streaming s"], row["dense s"] = median[("streaming", on)], median[("dense", on)]
            row["speed-up"] = row["dense s"] / row["streaming s"]
            print(f"[bench_contranorm] neighbour {row}", file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def plot(comparison: list[dict], scaling_rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(10, 4))
    ns = [r["n"] for r in scaling_rows]
    ax_time.loglog(ns, [r["seconds"] for r in scaling_rows], "o-", label="streaming kernel")
    ax_time.loglog([r["n"] for r in comparison], [r["dense s"] for r in comparison], "s--", label="dense reference")
    ax_time.set(xlabel="nodes n", ylabel="forward + backward (s)", title="time")
    ax_mem.loglog(ns, [max(r["extra MB"] or 0.0, 1e-2) for r in scaling_rows], "o-", label="streaming kernel")
    ax_mem.loglog(
        [r["n"] for r in comparison],
        [max(r["dense extra MB"] or 0.0, 1e-2) for r in comparison],
        "s--",
        label="dense reference",
    )
    ax_mem.set(xlabel="nodes n", ylabel="extra peak RSS (MB)", title="memory")
    for ax in (ax_time, ax_mem):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


TARGET_SPEEDUP = {2708: 1.0, 20_000: 1.5}  # dense time / streaming time, at least
TARGET_EXTRA_MB_20K = 200.0
TARGET_RSS_GROWTH_MB_20K = 150.0  # the streaming kernel's process RSS growth, default allocator
TARGET_MM_FRACTION_20K = 0.7  # FLOP rate of the streaming kernel over the square-mm rate, at least


def evaluate_targets(
    comparison: list[dict],
    scaling_rows: list[dict],
    rss_rows: list[dict] = (),
    neighbour_rows: list[dict] = (),
) -> list[tuple[str, str, float | None, bool]]:
    """``(what, required, measured, met)`` for every target whose size was measured (none in quick mode).

    RSS growth: the streaming kernel's peak over two calls (the larger of the two readings). Beside a neighbour:
    the speed-up of the beside rows, against the same bound as alone."""
    targets = []
    for row in comparison:
        if row["n"] in TARGET_SPEEDUP:
            required = TARGET_SPEEDUP[row["n"]]
            met = row["speed-up"] >= required
            targets.append((f"speed-up over dense, n = {row['n']}", f">= {required}x", row["speed-up"], met))
        if row["n"] == 20_000:
            extra = row["streaming extra MB"]
            met = extra is not None and extra < TARGET_EXTRA_MB_20K
            targets.append(("extra peak memory (MB), n = 20,000", f"< {TARGET_EXTRA_MB_20K:.0f}", extra, met))
    for row in rss_rows:
        if row["n"] == 20_000 and row["kernel"] == "streaming":
            growth = row["peak growth, 2 calls (MB)"]
            met = growth < TARGET_RSS_GROWTH_MB_20K
            what = "process RSS growth (MB), streaming, 2 calls, n = 20,000"
            targets.append((what, f"< {TARGET_RSS_GROWTH_MB_20K:.0f}", growth, met))
    for row in neighbour_rows:
        if row["n"] == 20_000 and row["neighbour"] == "beside":
            required = TARGET_SPEEDUP[20_000]
            met = row["speed-up"] >= required
            what = "speed-up over dense beside a neighbour, n = 20,000"
            targets.append((what, f">= {required}x", row["speed-up"], met))
    for row in scaling_rows:
        if row["n"] == 20_000:
            fraction = row["fraction of mm rate"]
            met = fraction >= TARGET_MM_FRACTION_20K
            targets.append(("FLOP rate / square-mm rate, n = 20,000", f">= {TARGET_MM_FRACTION_20K}", fraction, met))
    return targets


def run(quick: bool, out_dir: Path, repeats: int | None = None, neighbour: bool = False) -> str:
    """Run every part; return the markdown report (also written to ``out_dir/contranorm.md``)."""
    return run_with_targets(quick, out_dir, repeats, neighbour)[0]


def run_with_targets(
    quick: bool, out_dir: Path, repeats: int | None = None, neighbour: bool = False
) -> tuple[str, list[tuple[str, str, float | None, bool]]]:
    """:func:`run`, plus the targets as ``(what, required, measured, met)`` rows (also a table in the report).

    ``neighbour``: also the streaming vs dense comparison at the largest size beside a CPU-bound neighbour process
    (:func:`beside_neighbour`)."""
    if quick:
        compare_sizes, scaling_sizes, channels, mm_size = [200, 400], [300, 600], 8, 128
        repeats = repeats or 1
    else:
        compare_sizes, scaling_sizes, channels, mm_size = (
            [2708, 20_000],
            [1000, 2000, 5000, 10_000, 20_000, 50_000],
            64,
            2048,
        )
        repeats = repeats or 3
    load_start = common.load_summary()
    mm_rate = common.matmul_flop_rate(mm_size)
    comparison = compare_with_dense(compare_sizes, channels, repeats, mm_rate)
    scaling_rows = scaling(scaling_sizes, channels, max(repeats, 5), mm_size)
    rss_rows = rss_growth_rows(compare_sizes[-1:], channels)
    neighbour_rows = beside_neighbour(compare_sizes[-1:], channels, max(repeats, 2)) if neighbour else []
    mm_rate_end = common.matmul_flop_rate(mm_size)
    load_end = common.load_summary()

    time_exponent = common.loglog_slope([r["n"] for r in scaling_rows], [r["seconds"] for r in scaling_rows])
    memory_exponent = common.loglog_slope([r["n"] for r in scaling_rows], [r["extra MB"] for r in scaling_rows])
    figure = plot(comparison, scaling_rows, out_dir / "contranorm_scaling.png")
    lines = [
        "## ContraNorm: streaming kernel vs dense reference (forward + backward, float32)",
        "",
        f"Machine: {load_start} at start; {load_end} at end. Square {mm_size}x{mm_size} `torch.mm`: "
        f"{mm_rate / 1e9:.1f} GFLOP/s at start, {mm_rate_end / 1e9:.1f} at end.",
        "",
        markdown_table(comparison),
        "",
        f"### Scaling (d = {channels}); FLOPs counted: the matmuls the half-tile kernel executes (~10 n^2 d)",
        "",
        markdown_table(scaling_rows),
        "",
        f"Fitted log-log exponents: time ~ n^{time_exponent:.2f} (expected 2), extra memory ~ n^{memory_exponent:.2f}"
        " (expected 1; small sizes are dominated by allocator noise).",
        "",
        f"![scaling]({figure.name})",
        "",
        f"### Process RSS growth (fresh process per kernel, default allocator, {torch.get_num_threads()} thread(s))",
        "",
        "What a user sees: `VmHWM` after one and after two forward + backward calls, and `VmRSS` after the second, "
        "minus `VmRSS` before the first (inputs already created); glibc malloc keeps its default settings, so "
        "freed memory it holds on to counts (the table above forces fresh mmaps and reads less).",
        "",
        markdown_table(rss_rows),
    ]
    if neighbour_rows:
        lines += [
            "",
            "### Beside a CPU-bound neighbour process",
            "",
            "Alone and beside rounds alternate (neighbour paused / running); both kernels timed in every round; "
            "speed-up = median dense / median streaming within each condition.",
            "",
            markdown_table(neighbour_rows),
        ]
    targets = evaluate_targets(comparison, scaling_rows, rss_rows, neighbour_rows)
    if targets:
        target_rows = [{"target": t[0], "required": t[1], "measured": t[2], "met": t[3]} for t in targets]
        lines += ["", "### Targets", "", markdown_table(target_rows)]
    report = "\n".join(lines)
    common.write_markdown(out_dir / "contranorm.md", report)
    return report, targets


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per size (default 3, quick 1)")
    parser.add_argument(
        "--neighbour", action="store_true", help="also time the largest size beside a CPU-bound neighbour process"
    )
    parser.add_argument(
        "--worker", nargs=3, metavar=("KERNEL", "N", "D"), help="internal: print rss_growth(KERNEL, N, D) as JSON"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (worker)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        impl, num_nodes, channels = args.worker
        print(json.dumps(rss_growth(impl, int(num_nodes), int(channels))))
        return
    print(run(quick=args.quick, out_dir=args.out, repeats=args.repeats, neighbour=args.neighbour))


if __name__ == "__main__":
    main()
