"""Training epoch time of ``DeepGAT`` against PyG's ``torch_geometric.nn.models.GAT`` on Cora.

    python -m experiments.benchmarks.bench_gat [--quick] [--out DIR]

Both models: 2, 16 or 64 GAT convolutions, 8 heads of 8 channels, dropout 0.5, no norm, the classifier's heads
averaged; with the same weights they compute the same outputs (``tests/models/test_gat.py``). One full-batch Adam
epoch of each per round, interleaved, median; target ``DeepGAT / PyG GAT <= 1.1``. ``DeepGAT`` adds the self loops
once per forward, PyG's ``GATConv`` in every layer. Protocol: ``docs/results/benchmarks.md``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn.models import GAT

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from experiments.benchmarks.bench_gcn import describe_graph, epoch_fn, load_cora, synthetic_graph
from graphnorm.models.gat import DeepGAT

TARGET = 1.1
HIDDEN = 64
HEADS = 8
DROPOUT = 0.5


def build_models(data: Data, num_layers: int) -> dict[str, nn.Module]:
    """DeepGAT and PyG's GAT with the same depth, width, heads and dropout, no norm."""
    in_channels, out_channels = data.num_features, int(data.y.max()) + 1
    torch.manual_seed(0)
    ours = DeepGAT(in_channels, HIDDEN, out_channels, num_layers, dropout=DROPOUT, num_heads=HEADS, output_heads=HEADS)
    torch.manual_seed(0)
    pyg = GAT(in_channels, HIDDEN, num_layers, out_channels, dropout=DROPOUT, heads=HEADS)
    return {"DeepGAT": ours, "PyG GAT": pyg}


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    data = synthetic_graph() if quick else load_cora()
    depths = (2, 4) if quick else (2, 16, 64)
    repeats, min_seconds = _common.round_settings(quick, repeats)
    rows, targets = _common.compare_by_depth(
        depths,
        lambda depth: {name: epoch_fn(model, data) for name, model in build_models(data, depth).items()},
        "DeepGAT",
        "PyG GAT",
        TARGET,
        repeats=repeats,
        min_seconds=min_seconds,
    )
    setup = (
        f"{describe_graph(data, quick)}, "
        f"hidden {HIDDEN} = {HEADS} heads x {HIDDEN // HEADS}, dropout {DROPOUT} (features and attention), no norm, "
        f"conv -> ReLU -> dropout, GATConv classifier with {HEADS} averaged heads, Adam; one full-batch epoch incl. "
        f"backward and step; {repeats} interleaved rounds, median; {_common.load_summary()}. "
        "Peak MB: extra resident memory during one epoch."
    )
    return common.table_report("gat", "8. DeepGAT training epoch vs PyG GAT", setup, rows, targets)


def main(argv: list[str] | None = None) -> None:
    common.bench_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
