"""Scaling: an 8-layer PairNorm DeepGCN trained full batch on CSBM graphs of 10^4, 10^5 and 10^6 nodes.

    python -m experiments.benchmarks.bench_scale [--sizes N ...] [--quick] [--epochs E] [--threads T] [--no-levers]
        [--variants V ...] [--versus-gcnconv] [--out DIR] [--csv PATH]

Every (size, variant) runs in a fresh Python process (this module's worker mode): ``sparse`` (the CSR product) and
``pyg`` (``GCNConv``) at every size, the levers ``sparse+checkpoint`` and ``sparse+bf16`` at the largest; epoch
wall and CPU time, eval forward, probe and peak RSS, and the growth exponent of the sparse epoch in the edge count.
``--versus-gcnconv``: DeepGCN with its default propagation (``default``) beside PyG's own GCN stack (``gcnconv``)
at 10^6 nodes, with their ratios.
Targets at 10^6 nodes: sparse epoch at most 15 s, peak RSS at most 4096 MB, exponent at most 1.15. Protocol:
``docs/results/benchmarks.md``. The table goes to stdout (and ``DIR/scale.md``), the rows to ``--csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common

if TYPE_CHECKING:
    from torch import nn

SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000,)
LAYERS, HIDDEN, DROPOUT, DEGREE = 8, 32, 0.5, 10
VARIANTS = {  # name -> (propagation, None: DeepGCN's default; checkpoint_layers, bfloat16 autocast)
    "default": (None, False, False),
    "gcnconv": (None, False, False),  # PyG's GCN (GCNConv stack) with PyG's PairNorm, not a DeepGCN
    "sparse": ("sparse", False, False),
    "pyg": ("pyg", False, False),
    "sparse+checkpoint": ("sparse", True, False),
    "sparse+bf16": ("sparse", False, True),
}
PROBED = ("sparse", "pyg")
PLAIN = ("sparse", "pyg")  # the variants at every size unless --variants says otherwise
VERSUS_GCNCONV = ("default", "gcnconv")
LEVERS = ("sparse+checkpoint", "sparse+bf16")
EPOCH_TARGET_S, RSS_TARGET_MB, EXPONENT_TARGET = 15.0, 4096.0, 1.15
TARGET_NODES = 1_000_000
# Peak RSS a variant may need per million nodes (MB), to wait for free memory before a large run.
NEEDED_MB_PER_MILLION = {
    "pyg": 9000, "sparse": 4500, "sparse+checkpoint": 3000, "sparse+bf16": 4500, "default": 4500, "gcnconv": 9000,
}  # fmt: skip
WORKER_TIMEOUT_S = 1800


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, MB (Linux reports ``ru_maxrss`` in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def available_mb() -> float | None:
    """``MemAvailable`` of ``/proc/meminfo`` in MB; None without procfs."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def worker(num_nodes: int, variant: str, epochs: int, probe: bool, threads: int | None = None) -> dict:
    """One (size, variant) measurement in this process (the columns: docs/results/benchmarks.md): the row as a dict.
    ``threads``: torch intra-op threads (default: torch's, all cores)."""
    import torch
    import torch.nn.functional as F

    from graphnorm.analysis import CollapseProbe
    from graphnorm.data import load_dataset
    from graphnorm.models import DeepGCN

    propagation, checkpoint_layers, bf16 = VARIANTS[variant]
    if threads is not None:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    task = load_dataset("csbm", num_nodes=num_nodes, average_degree=DEGREE, seed=0)
    data = task.data
    graph_s, graph_rss = time.perf_counter() - start, peak_rss_mb()
    torch.manual_seed(0)
    if variant == "gcnconv":
        model = gcnconv_stack(data.num_features, task.num_outputs)
    else:
        options = {} if propagation is None else {"propagation": propagation}
        model = DeepGCN(data.num_features, HIDDEN, task.num_outputs, LAYERS, norm="pairnorm", dropout=DROPOUT,
                        checkpoint_layers=checkpoint_layers, **options)  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    train_nodes = data.train_mask.nonzero().view(-1)
    train_labels = data.y[train_nodes]

    cpu_times = []

    def epoch() -> float:
        begin, begin_cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(data.x, data.edge_index)
            loss = F.cross_entropy(out[train_nodes].float(), train_labels)
        loss.backward()
        optimizer.step()
        cpu_times.append(time.process_time() - begin_cpu)
        return time.perf_counter() - begin

    model.train()
    first_epoch = epoch()
    epoch_times = [epoch() for _ in range(epochs)]
    model.eval()
    forward_times = []
    for _ in range(2):
        begin = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model(data.x, data.edge_index)
        forward_times.append(time.perf_counter() - begin)
    train_rss = peak_rss_mb()
    probe_s = None
    if probe:
        begin = time.perf_counter()
        CollapseProbe(model).probe(data)
        probe_s = time.perf_counter() - begin
    return {
        "nodes": num_nodes,
        "variant": variant,
        "path": getattr(model, "last_propagation", None) or "GCNConv",  # the propagation the epochs took
        "directed edges": int(data.edge_index.size(1)),
        "first epoch (s)": first_epoch,
        "epoch (s)": statistics.median(epoch_times),
        "epoch CPU (s)": statistics.median(cpu_times[1:]),
        "eval forward (s)": statistics.median(forward_times),
        "probe (s)": probe_s,
        "peak RSS train (MB)": train_rss,
        "peak RSS (MB)": peak_rss_mb(),
        "graph RSS (MB)": graph_rss,
        "graph (s)": graph_s,
        "epochs timed": epochs,
        "torch threads": torch.get_num_threads(),
        "load average 1 min": os.getloadavg()[0],
    }


def gcnconv_stack(in_channels: int, out_channels: int) -> nn.Module:
    """PyG's own deep GCN at the benchmark's widths: ``torch_geometric.nn.models.GCN``, ``LAYERS`` ``GCNConv``
    (``cached=True``: the normalized adjacency once, as PyG's full-batch GCN example does), each hidden one followed
    by PyG's ``PairNorm`` (scale 1), ReLU and dropout, the last the classifier."""
    from torch_geometric.nn import PairNorm
    from torch_geometric.nn.models import GCN

    return GCN(in_channels, HIDDEN, LAYERS, out_channels, dropout=DROPOUT, norm=PairNorm(), cached=True)


def wait_for_memory(needed_mb: float, wait_s: float = 600.0, poll_s: float = 15.0) -> str | None:
    """None once ``needed_mb`` is available, else (after ``wait_s``) why the run is skipped."""
    deadline = time.monotonic() + wait_s
    while True:
        free = available_mb()
        if free is None or free >= needed_mb:
            return None
        if time.monotonic() >= deadline:
            return f"skipped: {free:.0f} MB available, {needed_mb:.0f} MB needed"
        print(f"waiting for memory: {free:.0f} MB available, {needed_mb:.0f} MB needed", file=sys.stderr, flush=True)
        time.sleep(poll_s)


def run_one(num_nodes: int, variant: str, epochs: int, threads: int | None = None) -> dict:
    """One measurement in a fresh interpreter (or a row saying why it did not run)."""
    needed = NEEDED_MB_PER_MILLION[variant] * num_nodes / 1e6 + 1024
    if num_nodes >= 1_000_000 and (reason := wait_for_memory(needed)) is not None:
        return {"nodes": num_nodes, "variant": variant, "note": reason}
    args = ["--worker", json.dumps({"num_nodes": num_nodes, "variant": variant, "epochs": epochs,
                                    "probe": variant in PROBED, "threads": threads})]  # fmt: skip
    try:
        row = _common.run_json_worker("experiments.benchmarks.bench_scale", args, timeout_s=WORKER_TIMEOUT_S)
    except (RuntimeError, OSError) as error:
        return {"nodes": num_nodes, "variant": variant, "note": f"failed: {str(error)[-300:]}"}
    print(common.format_row(row), flush=True)
    return row


def measure(
    sizes: tuple[int, ...],
    epochs: int,
    levers: bool = True,
    csv_path: Path | None = None,
    threads: int | None = None,
    variants: tuple[str, ...] = PLAIN,
) -> list[dict]:
    """Every size's ``variants`` rows (sparse and PyG), then the levers at the largest size; the CSV (if given) is
    rewritten after every row, so an interrupted run keeps what it measured."""
    plan = [(num_nodes, variant) for num_nodes in sizes for variant in variants]
    plan += [(max(sizes), variant) for variant in LEVERS] if levers else []
    rows: list[dict] = []
    for num_nodes, variant in plan:
        rows.append(run_one(num_nodes, variant, epochs, threads))
        if csv_path is not None:
            write_csv(rows, csv_path)
    return rows


def growth_exponent(rows: list[dict], variant: str = "sparse") -> float:
    """Log-log slope of ``variant``'s epoch time against the directed edges (nan with fewer than two sizes)."""
    measured = [row for row in rows if row["variant"] == variant and row.get("epoch (s)") is not None]
    return _common.loglog_slope([row["directed edges"] for row in measured], [row["epoch (s)"] for row in measured])


def targets(rows: list[dict]) -> list[common.Target]:
    """Epoch time and peak RSS of the sparse path (and of the default one) at 10^6 nodes, and the growth exponent
    (measured sizes only)."""
    found: list[common.Target] = []
    for row in rows:
        variant = row["variant"]
        if variant in ("sparse", "default") and row["nodes"] == TARGET_NODES and row.get("epoch (s)") is not None:
            epoch, rss = row["epoch (s)"], row["peak RSS train (MB)"]
            found.append(common.Target(f"10^6 nodes: {variant} epoch (s)", f"<= {EPOCH_TARGET_S}", epoch,
                                       epoch <= EPOCH_TARGET_S))  # fmt: skip
            found.append(common.Target(f"10^6 nodes: {variant} peak RSS (MB)", f"<= {RSS_TARGET_MB:.0f}", rss,
                                       rss <= RSS_TARGET_MB))  # fmt: skip
    exponent = growth_exponent(rows)
    if exponent == exponent:  # not nan
        found.append(common.Target("growth exponent of the sparse epoch vs edges", f"<= {EXPONENT_TARGET}", exponent,
                                   exponent <= EXPONENT_TARGET))  # fmt: skip
    return found


def ratio_to(rows: list[dict], row: dict, variant: str, key: str) -> float | None:
    """``row[key]`` over the same size's ``variant`` row's (None where either is missing)."""
    base = next(
        (other.get(key) for other in rows if other["variant"] == variant and other["nodes"] == row["nodes"]), None
    )
    return row[key] / base if base and row.get(key) else None


def table_rows(rows: list[dict]) -> list[dict]:
    """The rows for the markdown table: one per (size, variant), with the epoch over the sparse epoch, and, where
    PyG's own GCN stack ran at that size, the epoch and peak RSS over its."""
    shown = []
    for row in rows:
        shown.append({
            "nodes": row["nodes"], "variant": row["variant"], "path": row.get("path"),
            "directed edges": row.get("directed edges"), "epoch (s)": row.get("epoch (s)"),
            "epoch / sparse epoch": ratio_to(rows, row, "sparse", "epoch (s)"),
            "epoch / GCNConv epoch": ratio_to(rows, row, "gcnconv", "epoch (s)"),
            "epoch CPU (s)": row.get("epoch CPU (s)"),
            "epoch CPU / GCNConv": ratio_to(rows, row, "gcnconv", "epoch CPU (s)"),
            "peak RSS / GCNConv": ratio_to(rows, row, "gcnconv", "peak RSS train (MB)"),
            "first epoch (s)": row.get("first epoch (s)"), "eval forward (s)": row.get("eval forward (s)"),
            "probe (s)": row.get("probe (s)"), "peak RSS train (MB)": row.get("peak RSS train (MB)"),
            "peak RSS (MB)": row.get("peak RSS (MB)"), "note": row.get("note", ""),
        })  # fmt: skip
    return shown


def write_csv(rows: list[dict], path: Path) -> Path:
    """The rows, tidy (one row per size and variant, one column per measure), as CSV."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def run(
    quick: bool = False,
    out_dir: Path | None = None,
    sizes: tuple[int, ...] | None = None,
    epochs: int | None = None,
    csv_path: Path | None = None,
    levers: bool = True,
    threads: int | None = None,
    variants: tuple[str, ...] = PLAIN,
) -> common.BenchReport:
    import torch

    sizes = tuple(sizes or (QUICK_SIZES if quick else SIZES))
    threads = threads or torch.get_num_threads()  # the workers get this process's torch threads
    epochs = epochs or (1 if quick else 3)
    load_before = os.getloadavg()
    if csv_path is None and out_dir is not None:
        csv_path = Path(out_dir) / "scale.csv"
    rows = measure(sizes, epochs, levers=levers, csv_path=csv_path, threads=threads, variants=variants)
    exponent = growth_exponent(rows)
    setup = (
        f"CSBM graphs (average degree {DEGREE}), DeepGCN {LAYERS} layers, hidden {HIDDEN}, PairNorm, dropout "
        f"{DROPOUT}, Adam (gcnconv: PyG's GCN model, GCNConv cached, PyG's PairNorm); full-batch epochs "
        f"(median of {epochs} after the first), each (size, variant) in a fresh "
        f"process with {threads} torch thread(s); peak RSS is the process's absolute peak (ru_maxrss). Growth "
        f"exponent (sparse epoch vs edges): "
        f"{exponent:.3f}. Load average (1/5/15 min) before: {'/'.join(f'{v:.2f}' for v in load_before)}, after: "
        f"{'/'.join(f'{v:.2f}' for v in os.getloadavg())}: the cores may be shared; re-time on a quiet machine."
    )
    report = common.table_report("scale", "11. Scale: a million nodes", setup, table_rows(rows), targets(rows))
    if out_dir is not None:
        _common.write_markdown(Path(out_dir) / "scale.md", report.to_markdown())
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 nodes, one timed epoch (smoke test)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help=f"node counts (default {SIZES})")
    parser.add_argument("--epochs", type=int, default=None, help="timed epochs after the first (default 3)")
    parser.add_argument("--no-levers", action="store_true", help="skip checkpointing and bf16 at the largest size")
    parser.add_argument("--out", type=Path, default=None, help="folder for scale.md and scale.csv")
    parser.add_argument("--csv", type=Path, default=None, help="the CSV's path (default DIR/scale.csv)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=None, help=f"at every size {PLAIN}")
    parser.add_argument("--versus-gcnconv", action="store_true", help="default DeepGCN vs PyG's GCN, 10^6 nodes")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # JSON: one measurement, in this process
    args = parser.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(**json.loads(args.worker))), flush=True)
        return
    variants = tuple(args.variants or (VERSUS_GCNCONV if args.versus_gcnconv else PLAIN))
    sizes = tuple(args.sizes or ((TARGET_NODES,) if args.versus_gcnconv and not args.quick else ()))
    levers = not (args.no_levers or args.versus_gcnconv)
    report = run(args.quick, args.out, sizes, args.epochs, args.csv, levers, args.threads, variants)
    print(report.to_markdown())


if __name__ == "__main__":
    main()
