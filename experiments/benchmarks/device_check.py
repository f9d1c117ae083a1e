"""Device check: the main job on a GPU against the CPU, ContraNorm's exact kernels, and the 10^6-node epoch.

    python -m experiments.benchmarks.device_check [--device cuda|cpu] [--quick] [--out DIR]

Three parts, printed as one table (part, item, value, check): the README's main job
(``experiments/sweeps/cora_depth_quick.yaml``) on the device and on the CPU, every cell's test accuracy within
``TABLE_TOLERANCE`` and the same cells at the majority-class level; ContraNorm's dense, tiled and streaming kernels
(forward and backward) at a few graph sizes, each against the dense output, with the kernel the rule picks
(:func:`graphnorm.norms.ops.contranorm_kernel_choice.choose_contranorm_kernel`); and an 8-layer PairNorm DeepGCN
epoch on a CSBM graph of 10^6 nodes, default arguments and each propagation. Meant to take at most 5 minutes on a
GPU; ``--quick`` shrinks every size (seconds on a CPU: the smoke test runs it with ``--device cpu``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
MAIN_JOB = REPO / "experiments" / "sweeps" / "cora_depth_quick.yaml"
# CUDA draws dropout masks from its own generator, so the device's run is the CPU's with other masks: like another
# seed. The main job's 3-seed check (analysis/data/cora_depth_quick_3seeds) moves a cell by up to 0.19 between seeds,
# and never moves a cell across the majority-class level; so each cell within 0.2, and the same cells at that level.
TABLE_TOLERANCE = 0.2
MAJORITY_MARGIN = 0.01  # "at the majority level": at most this above it, as the README's table marks cells
QUICK_OVERRIDES = ["grid.norm=[contranorm,none]", "grid.num_layers=[2]", "base.epochs=2"]
KERNEL_SIZES = {"cuda": (2708, 10_000, 30_000), "cpu": (1000, 2708), "quick": (300,)}
EPOCH_NODES = {"full": 1_000_000, "quick": 2000}
KERNEL_RTOL = 1e-4  # float32 sums in another order: the kernels agree with the dense one to rounding
CHANNELS, LAYERS, HIDDEN, DEGREE = 32, 8, 32, 10


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> float:
    """Peak device memory allocated by torch (CUDA), else the process's peak resident memory, MB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def row(part: str, item: str, value: object, check: str = "") -> dict:
    return {"part": part, "item": item, "value": value, "check": check}


# --------------------------------------------------------------------------------------------------------------------
# The main job


def main_job_table(device: str, quick: bool, out: Path) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """The main job on ``device``: (test accuracy at the last epoch, norm x depth; majority-level marks; seconds)."""
    from graphnorm.sweep import load_sweep_config, run_sweep
    from graphnorm.sweep.cpu_budget import CUDA_RUNS_PER_GPU, usable_cores

    sweep = load_sweep_config(MAIN_JOB, [*(QUICK_OVERRIDES if quick else []), f"base.device={device}"])
    executor = "serial" if quick else "local"
    workers = min(CUDA_RUNS_PER_GPU, usable_cores()) if device == "cuda" else None
    start = time.perf_counter()
    runs = run_sweep(sweep, out / device, executor=executor, workers=workers, make_plots=False, progress=False,
                     log=lambda line: None)  # fmt: skip
    seconds = time.perf_counter() - start
    failed = runs[runs["status"] != "ok"]
    if len(failed):
        raise RuntimeError(f"{len(failed)} run(s) of the main job failed on {device}: {failed['error'].iloc[0]}")
    metric = sweep["metric"]
    table = runs.pivot_table(index="norm", columns="num_layers", values=metric)
    marks = runs.assign(low=runs[metric] <= runs["majority_acc"] + MAJORITY_MARGIN)
    return table, marks.pivot_table(index="norm", columns="num_layers", values="low"), seconds


def compare_main_job(device: str, quick: bool, out: Path) -> list[dict]:
    """The device's table against the CPU's: the largest cell difference and the majority-level marks."""
    ours, our_marks, our_s = main_job_table(device, quick, out)
    cpu, cpu_marks, cpu_s = main_job_table("cpu", quick, out / "reference")
    largest = float((ours - cpu).abs().max().max())
    marks_agree = bool((our_marks.astype(bool) == cpu_marks.astype(bool)).all().all())
    cells = ", ".join(f"{norm}/{depth}: {ours.loc[norm, depth]:.3f} vs {cpu.loc[norm, depth]:.3f}"
                      for norm in ours.index for depth in ours.columns)  # fmt: skip
    return [
        row("main job", f"sweep wall time on {device} / on cpu (s)", f"{our_s:.1f} / {cpu_s:.1f}"),
        row(
            "main job",
            f"largest |{device} - cpu| test accuracy",
            largest,
            "ok" if largest <= TABLE_TOLERANCE else f"FAIL (> {TABLE_TOLERANCE})",
        ),  # fmt: skip
        row("main job", "same cells at the majority-class level", marks_agree, "ok" if marks_agree else "FAIL"),
        row("main job", f"cells ({device} vs cpu)", cells),
    ]


# --------------------------------------------------------------------------------------------------------------------
# ContraNorm's kernels


def undirected_graph(num_nodes: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features ``[n, CHANNELS]`` and a random undirected edge list without self-loops, sorted row-major."""
    from torch_geometric.utils import coalesce, to_undirected

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(num_nodes, CHANNELS, generator=generator)
    edges = torch.randint(0, num_nodes, (2, 2 * num_nodes), generator=generator)
    edges = coalesce(to_undirected(edges[:, edges[0] != edges[1]], num_nodes=num_nodes), num_nodes=num_nodes)
    return x.to(device), edges[0].to(device), edges[1].to(device)


def kernel_calls(num_nodes: int, device: torch.device) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Each exact kernel as ``x -> P x`` on the same graph (tau 1, the node itself and its neighbours excluded)."""
    from graphnorm.norms.ops import contranorm_exact, contranorm_symmetric_tiles

    _, rows, cols = undirected_graph(num_nodes, device)
    batch = torch.zeros(num_nodes, dtype=torch.long, device=device)
    return {
        "dense": lambda x: contranorm_exact.dense_negative_mix(
            F.normalize(x, dim=1), x, batch, 1, 1.0, rows, cols, True
        ),  # fmt: skip
        "tiled": lambda x: contranorm_symmetric_tiles.SymmetricNegativeMix.apply(
            F.normalize(x, dim=1), x, 1.0, rows, cols, True
        ),  # fmt: skip
        "streaming": lambda x: contranorm_exact.StreamingNegativeMix.apply(
            F.normalize(x, dim=1), x, 1.0, rows, cols, True
        ),  # fmt: skip
    }


def time_kernels(num_nodes: int, device: torch.device, repeats: int) -> list[dict]:
    """Forward + backward of each kernel at ``num_nodes`` nodes, its output against the dense one's, and the pick."""
    from graphnorm.norms.ops.contranorm_kernel_choice import choose_contranorm_kernel, free_device_memory

    x, _, _ = undirected_graph(num_nodes, device)
    picked = choose_contranorm_kernel(num_nodes, CHANNELS, device.type, free_device_memory(device), torch.float32)
    rows, reference = [], None
    for name, kernel in kernel_calls(num_nodes, device).items():
        leaf = x.clone().requires_grad_(True)

        def step(kernel: Callable = kernel, leaf: torch.Tensor = leaf) -> torch.Tensor:
            out = kernel(leaf)
            out.backward(torch.ones_like(out))
            return out

        try:
            seconds = timed(step, device, repeats)
            with torch.no_grad():
                out = kernel(x)
        except torch.cuda.OutOfMemoryError:
            rows.append(row("contranorm", f"n={num_nodes} {name} fwd+bwd (s)", None, "out of memory"))
            continue
        reference = out if reference is None else reference
        error = float((out - reference).abs().max() / reference.abs().max().clamp_min(1e-30))
        check = "ok" if error <= KERNEL_RTOL else f"FAIL (relative error {error:.1e})"
        rows.append(row("contranorm", f"n={num_nodes} {name} fwd+bwd (s)", seconds,
                        check + ("; the rule's pick" if name == picked else "")))  # fmt: skip
    return rows


# --------------------------------------------------------------------------------------------------------------------
# The 10^6-node epoch


def epoch_rows(num_nodes: int, device: torch.device, epochs: int) -> list[dict]:
    """An 8-layer PairNorm DeepGCN trained full batch on a CSBM graph: per propagation, the median epoch and peak
    memory (default arguments first)."""
    from graphnorm.data import load_dataset
    from graphnorm.models import DeepGCN

    task = load_dataset("csbm", num_nodes=num_nodes, average_degree=DEGREE, seed=0)
    data = task.data.to(device)
    train = data.train_mask.nonzero().view(-1)
    variants = {"default": {}, "pyg": {"propagation": "pyg"}}
    if device.type == "cpu":
        variants["sparse"] = {"propagation": "sparse"}
    rows = []
    for name, kwargs in variants.items():
        torch.manual_seed(0)
        model = DeepGCN(data.num_features, HIDDEN, task.num_outputs, LAYERS, norm="pairnorm", dropout=0.5, **kwargs)
        model = model.to(device).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

        def epoch(model: torch.nn.Module = model, optimizer: torch.optim.Optimizer = optimizer) -> None:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(data.x, data.edge_index)[train], data.y[train]).backward()
            optimizer.step()

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        seconds = timed(epoch, device, epochs)
        path = getattr(model, "last_propagation", None) or kwargs.get("propagation", "?")
        rows.append(row("epoch", f"{num_nodes:,} nodes, {name} ({path}) epoch (s)", seconds))
        rows.append(row("epoch", f"{num_nodes:,} nodes, {name} peak memory (MB)", peak_memory_mb(device),
                        "device memory" if device.type == "cuda" else "process RSS so far"))  # fmt: skip
    return rows


# --------------------------------------------------------------------------------------------------------------------


def guarded(part: str, fn: Callable[[], list[dict]]) -> list[dict]:
    """``fn()``'s rows, or one row saying why the part failed (the other parts still run)."""
    try:
        return fn()
    except Exception as error:  # noqa: BLE001 (any failure is the check's result, and the table still prints)
        return [row(part, "failed", f"{type(error).__name__}: {str(error)[:300]}", "FAIL")]


def setup_rows(target: torch.device) -> list[dict]:
    """The machine, and the probe's compiled kernels loaded (compiled once on a fresh clone) before the sweeps start,
    so that their workers do not all compile them at once."""
    from graphnorm.analysis.collapse import warm_kernels
    from graphnorm.norms.ops.contranorm_kernel_choice import free_device_memory, largest_dense_graph

    rows = [row("setup", "device", torch.cuda.get_device_name(target) if target.type == "cuda" else "cpu"),
            row("setup", "torch", torch.__version__)]  # fmt: skip
    start = time.perf_counter()
    warm_kernels()
    rows.append(row("setup", "probe kernels loaded (s)", time.perf_counter() - start))
    free = free_device_memory(target)
    if free is not None:
        largest = largest_dense_graph(CHANNELS, free, torch.float32)
        rows.append(row("setup", f"ContraNorm dense limit, float32, {CHANNELS} channels (nodes)", largest))
    return rows


def run(device: str = "cuda", quick: bool = False, out: Path | None = None) -> pd.DataFrame:
    """Every part on ``device``; the table (also written to ``out/device_check.md`` when given)."""
    target = torch.device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("device_check: CUDA is not available here; run with --device cpu")
    start = time.perf_counter()
    rows = guarded("setup", lambda: setup_rows(target))
    with tempfile.TemporaryDirectory(prefix="device_check_") as scratch:
        rows += guarded("main job", lambda: compare_main_job(device, quick, Path(scratch)))
    for size in KERNEL_SIZES["quick" if quick else target.type]:
        rows += guarded("contranorm", lambda size=size: time_kernels(size, target, 1 if quick else 3))
    nodes = EPOCH_NODES["quick" if quick else "full"]
    rows += guarded("epoch", lambda: epoch_rows(nodes, target, 1 if quick else 3))
    rows.append(row("setup", "whole check (s)", time.perf_counter() - start))
    table = pd.DataFrame(rows)
    if out is not None:
        from graphnorm.sweep.formatting import markdown_table

        out.mkdir(parents=True, exist_ok=True)
        (out / "device_check.md").write_text(markdown_table(table, index=False) + "\n")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test, seconds on a CPU)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table to OUT/device_check.md")
    args = parser.parse_args(argv)
    from graphnorm.sweep.formatting import markdown_table

    table = run(args.device, args.quick, args.out)
    print(markdown_table(table, index=False))
    failed = table["check"].astype(str).str.contains("FAIL")
    return 1 if failed.any() else 0


if __name__ == "__main__":
    sys.exit(main())
