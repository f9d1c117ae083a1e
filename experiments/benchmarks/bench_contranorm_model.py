"""Whole-model cost of ContraNorm in a deep GCN on Cora, against a dense-reference ContraNorm.

    python -m experiments.benchmarks.bench_contranorm_model [--quick] [--out DIR]

The model of the ContraNorm paper's Cora protocol (``experiments/sweeps/cora_contranorm_protocol.yaml``) at 8 and
32 layers, against the same model whose ContraNorm is :class:`DenseContraNorm` (the official code's ``n x n``
softmax): epoch time in this process (interleaved rounds, median, beside the model without ContraNorm) and peak RSS
in one fresh process per (model, depth) (``--worker``). Targets: ours <= 0.5 x dense at 8 layers; peak RSS
< 1.5 GB at 32 layers. Protocol: ``docs/results/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch import Tensor, nn
from torch_geometric.data import Data

from experiments.benchmarks import _common, bench_gcn
from experiments.benchmarks import run_all as common
from experiments.benchmarks.bench_gcn import synthetic_graph
from graphnorm.models.gcn import DeepGCN
from graphnorm.norms.ops import contranorm_symmetric_tiles as contranorm_symmetric

HIDDEN = 32
RSS_TARGET_BYTES = 1.5e9
TIME_TARGET = 0.5  # ours / dense at 8 layers
IMPLEMENTATIONS = ("ours", "dense")
# the same model without ContraNorm (shared LayerNorm kept): what every ContraNorm implementation pays on top of
NO_CONTRANORM = "no contranorm"


class DenseContraNorm(nn.Module):
    """ContraNorm as the official code computes it (one graph, ``n x n`` similarity), same call signature as ours.

    ``x' = (1 + s) x - s softmax(mask(x_hat x_hat^T / tau)) x`` with the self and neighbour entries masked to
    ``-inf``; no LayerNorm (the model's shared LayerNorm follows).
    """

    def __init__(self, channels: int, scale: float = 1.0, tau: float = 1.0) -> None:
        super().__init__()
        self.channels = channels
        self.scale = scale
        self.tau = tau

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        x_hat = F.normalize(x, dim=1)
        sim = x_hat @ x_hat.t() / self.tau  # [n, n]
        diagonal = torch.arange(x.size(0), device=x.device)
        sim[diagonal, diagonal] = -math.inf
        if edge_index is not None:
            sim[edge_index[0], edge_index[1]] = -math.inf
        sim = torch.softmax(sim, dim=1)
        return (1.0 + self.scale) * x - self.scale * (sim @ x)


def load_data(quick: bool) -> Data:
    if quick:
        data = synthetic_graph(num_nodes=300, num_features=16)
        data.x = data.x.abs()
    else:
        from graphnorm.data import load_dataset

        data = load_dataset("cora").data
    return T.NormalizeFeatures()(data.clone())  # row-L1 features, as the protocol


def build_model(data: Data, impl: str, num_layers: int) -> nn.Module:
    if impl not in IMPLEMENTATIONS + (NO_CONTRANORM,):
        raise ValueError(f"impl must be one of {IMPLEMENTATIONS + (NO_CONTRANORM,)}, got {impl!r}")
    if impl == NO_CONTRANORM:
        norm, norm_kwargs = "none", None
    elif impl == "ours":
        norm: str | nn.Module = "contranorm"
        norm_kwargs: dict | None = {"scale": 1.0, "layer_norm": False}
    else:
        norm, norm_kwargs = DenseContraNorm(HIDDEN, scale=1.0), None
    torch.manual_seed(0)
    return DeepGCN(
        data.num_features,
        HIDDEN,
        int(data.y.max()) + 1,
        num_layers,
        norm=norm,
        norm_kwargs=norm_kwargs,
        dropout=0.6,
        adjacency="row",
        layer_order="dropout-conv-norm-act",
        shared_layernorm=True,
    )


def epoch_fn(model: nn.Module, data: Data) -> Callable[[], None]:
    """One full-batch training epoch with the protocol's Adam (lr 0.005, weight decay 5e-4)."""
    return bench_gcn.epoch_fn(model, data, lr=0.005)


def symmetric_kernel_matmuls_fn(num_nodes: int, channels: int) -> Callable[[], None]:
    """Only the matrix products of one half-tile ContraNorm forward + backward (``contranorm_symmetric``, the kernel
    of graphs with undirected edges such as Cora), same tiles, on random data.

    Per upper tile ``[bI, bJ]``: forward the tile ``[bI, d+1] @ [d+1, bJ]`` and ``E [v, 1]`` for its rows (and, off the
    diagonal, ``E^T [v, 1]`` for its columns); backward the recomputed tile (unless the graph is one tile), ``E^T g``
    (and ``E g``), the ``[bI, 2d+2] @ [2d+2, bJ]`` product that forms ``dS + dS^T``, and its products with ``x_hat``
    for the rows (and the columns).
    """
    n, d = num_nodes, channels
    bounds = contranorm_symmetric._tile_bounds(n)
    tiles = contranorm_symmetric._upper_tiles(bounds)
    narrow = torch.randn(n, d + 1)  # keys, queries, values with the ones column
    wide = torch.randn(n, 2 * d + 2)  # [G~, V~] and [V~, G~]
    grads = torch.randn(n, d)
    accumulate = torch.zeros(n, d + 1)

    def matmuls() -> None:
        accumulate.zero_()
        for backward in (False, True):
            for i, j in tiles:
                rows_i, rows_j = slice(bounds[i], bounds[i + 1]), slice(bounds[j], bounds[j + 1])
                if not backward or len(bounds) > 2:
                    tile = torch.mm(narrow[rows_i], narrow[rows_j].t())  # [bI, bJ]
                if not backward:
                    accumulate[rows_i].addmm_(tile, narrow[rows_j])
                    if i != j:
                        accumulate[rows_j].addmm_(tile.t(), narrow[rows_i])
                    continue
                accumulate[rows_j, :d].addmm_(tile.t(), grads[rows_i])
                both = torch.mm(wide[rows_i], wide[rows_j].t())
                accumulate[rows_i].addmm_(both, narrow[rows_j])
                if i != j:
                    accumulate[rows_i, :d].addmm_(tile, grads[rows_j])
                    accumulate[rows_j].addmm_(both.t(), narrow[rows_i])

    return matmuls


def measure_config(impl: str, num_layers: int, epochs: int, quick: bool = False) -> dict:
    """Worker body: load data, build the model, run ``epochs`` epochs; peak and pre-training resident memory.

    Meaningful as a peak only in a fresh process (``--worker``); in-process it reports the caller's peak.
    """
    import time

    data = load_data(quick)
    model = build_model(data, impl, num_layers)
    epoch = epoch_fn(model, data)
    rss_before = _common.status_bytes("VmRSS")
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        epoch()
        times.append(time.perf_counter() - start)
    peak = _common.status_bytes("VmHWM")
    if peak is None:  # no procfs: getrusage's maximum resident set (kB on Linux)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "impl": impl,
        "layers": num_layers,
        "epoch_s": times,
        "peak_rss_bytes": peak,
        "rss_before_bytes": rss_before,
    }


def measure_in_subprocess(impl: str, num_layers: int, epochs: int, quick: bool = False) -> dict:
    """Run :func:`measure_config` in a fresh interpreter; its JSON result (the last stdout line)."""
    args = ["--worker", "--impl", impl, "--layers", str(num_layers), "--epochs", str(epochs)]
    args += ["--threads", str(torch.get_num_threads())] + (["--quick"] if quick else [])
    return _common.run_json_worker("experiments.benchmarks.bench_contranorm_model", args)


def run(
    quick: bool = False, out_dir: Path | None = None, repeats: int | None = None, subprocesses: bool | None = None
) -> common.BenchReport:
    """Epoch time (interleaved, in process) and peak RSS (fresh process per config unless ``subprocesses=False``).

    Quick mode measures the RSS in this process by default (a fresh interpreter costs more than the whole smoke
    test); those numbers are the test process's, not a model's.
    """
    depths = (2, 4) if quick else (8, 32)
    repeats, min_seconds = _common.round_settings(quick, repeats, default_repeats=(2, 5))
    worker_epochs = 2 if quick else 3
    subprocesses = (not quick) if subprocesses is None else subprocesses
    data = load_data(quick)

    rows: list[dict] = []
    targets: list[common.Target] = []
    for depth in depths:
        fns = {impl: epoch_fn(build_model(data, impl, depth), data) for impl in IMPLEMENTATIONS + (NO_CONTRANORM,)}
        times = _common.time_interleaved(fns, repeats=repeats, min_seconds=min_seconds)
        del fns
        mm_rate = _common.matmul_flop_rate(128 if quick else 2048)
        memory = {}
        for impl in IMPLEMENTATIONS:
            if subprocesses:
                memory[impl] = measure_in_subprocess(impl, depth, worker_epochs, quick)
            else:
                memory[impl] = measure_config(impl, depth, worker_epochs, quick)
        ratio = times["ours"] / times["dense"]
        # Any exact ContraNorm executes at least the dense matmuls: forward S and P x, backward dP, P^T g, dS x_hat
        # and dS^T x_hat = 12 n^2 d FLOPs per hidden layer. At the machine's square-mm rate that takes `floor`
        # seconds per epoch, on top of the epoch without ContraNorm: no exact method can beat
        # (no-ContraNorm epoch + floor) / dense epoch.
        n = data.num_nodes
        floor = 12.0 * n * n * HIDDEN * (depth - 1) / mm_rate
        rest = times[NO_CONTRANORM]
        # Cora's edges are undirected: its ContraNorm runs the half-tile kernel
        kernel = symmetric_kernel_matmuls_fn(n, HIDDEN)
        matmuls_only = _common.time_interleaved({"mm": kernel}, repeats=repeats)["mm"]
        row = {
            "layers": depth,
            "ours epoch (ms)": times["ours"] * 1e3,
            "dense epoch (ms)": times["dense"] * 1e3,
            "ours / dense": ratio,
            "no-ContraNorm epoch (ms)": rest * 1e3,
            "exact lower bound / dense": (rest + floor) / times["dense"],
            "matmuls-only bound / dense": (rest + (depth - 1) * matmuls_only) / times["dense"],
            "ContraNorm share, ours / dense": (times["ours"] - rest) / max(times["dense"] - rest, 1e-12),
            "ours peak RSS (MB)": memory["ours"]["peak_rss_bytes"] / 2**20,
            "dense peak RSS (MB)": memory["dense"]["peak_rss_bytes"] / 2**20,
            "RSS before training (MB)": (memory["ours"]["rss_before_bytes"] or 0) / 2**20,
        }
        rows.append(row)
        print(common.format_row(row), flush=True)
        if depth == depths[0]:
            targets.append(
                common.Target(
                    f"epoch time, {depth} layers: ours / dense", f"<= {TIME_TARGET}", ratio, ratio <= TIME_TARGET
                )
            )
        if depth == depths[-1]:
            peak = memory["ours"]["peak_rss_bytes"]
            targets.append(
                common.Target(
                    f"peak RSS, {depth} layers (ours)",
                    "< 1.5 GB",
                    peak / 1e9,
                    peak < RSS_TARGET_BYTES if subprocesses else None,
                )
            )
    plots = []
    if out_dir is not None:
        plots.append(_plot(rows, Path(out_dir)))
    graph = "random graph (300 nodes)" if quick else "Cora"
    rss_how = "fresh process per config, VmHWM" if subprocesses else "IN-PROCESS (quick mode: not a model's peak)"
    setup = (
        f"{graph}, DeepGCN hidden {HIDDEN}, ContraNorm protocol (row adjacency, row-L1 features, dropout 0.6 before "
        f"conv, ContraNorm scale 1 + shared LayerNorm). Epoch: {repeats} interleaved rounds, median. Peak RSS: "
        f"{rss_how}, {worker_epochs} epochs; GB = 1e9 bytes in the target, MB = 2^20 bytes in the table. "
        "'no-ContraNorm epoch': the same model with norm 'none' (shared LayerNorm kept), timed in the same rounds. "
        "'exact lower bound / dense': that epoch plus the 12 n^2 d matmul FLOPs per layer that any exact "
        "ContraNorm needs (dense forward and backward) at the square-mm rate measured right after the epochs, over "
        "the dense epoch: the best ratio an exact kernel could reach on this machine. 'matmuls-only bound': that "
        "epoch plus, per ContraNorm layer, the time of just the matrix products our kernel executes (the half-tile "
        "kernel's tiles and shapes: Cora's edges are undirected), i.e. our kernel with free masks and exponentials. "
        "'ContraNorm share': the epoch minus the no-ContraNorm epoch, ours over dense (the norm's own cost)."
    )
    title = "6. Whole-model cost of ContraNorm (DeepGCN on Cora)"
    return common.table_report("contranorm_model", title, setup, rows, targets, plots)


def _plot(rows: list[dict], out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    layers = [row["layers"] for row in rows]
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(9, 3.5))
    for key, label in (("ours epoch (ms)", "ContraNorm (ours)"), ("dense epoch (ms)", "dense reference")):
        ax_time.plot(layers, [row[key] for row in rows], marker="o", label=label)
    for key, label in (("ours peak RSS (MB)", "ContraNorm (ours)"), ("dense peak RSS (MB)", "dense reference")):
        ax_mem.plot(layers, [row[key] for row in rows], marker="o", label=label)
    ax_time.set(xlabel="layers", ylabel="epoch time (ms)", title="epoch time")
    ax_mem.set(xlabel="layers", ylabel="peak RSS (MB)", title="peak RSS")
    for ax in (ax_time, ax_mem):
        ax.set_xticks(layers, [str(depth) for depth in layers])
    ax_time.legend()
    fig.tight_layout()
    path = out_dir / "contranorm_model_scaling.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help="measure one config and print JSON (internal)")
    parser.add_argument("--impl", choices=IMPLEMENTATIONS, default="ours")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(measure_config(args.impl, args.layers, args.epochs, args.quick)))
        return
    print(run(quick=args.quick, out_dir=args.out).to_markdown())


if __name__ == "__main__":
    main()
