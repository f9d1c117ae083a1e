"""Benchmark: training epoch time of graphnorm's ``GIN`` against the same network written with PyG's parts only.

Config (both models): ``num_layers`` GIN convolutions (2, 8, 32) with a trainable eps and OGB's MLP
``Linear(w, 2d) -> BatchNorm -> ReLU -> Linear(2d, d)`` (PyG ``GINConv(MLP([w, 2d, d], norm="batch_norm"))``),
hidden 64, ReLU after every convolution but the last, dropout 0.5 after each, a linear head; no norm after the
convolutions, no virtual node, no edge features. PyG's packaged ``models.GIN`` has a narrower MLP
(``Linear(w, d) -> ReLU -> Linear(d, d)``), half the dense work, so the baseline is this PyG-only stack instead (as
bench_gcnii compares with the model of PyG's gcn2_cora example). One epoch = full batch: zero_grad, forward,
cross-entropy on the training nodes, backward, one Adam step (lr 0.01, weight decay 5e-4). Timed in the same
process, interleaved (one epoch of each per round), median. Target (as for every model graphnorm adds): at most 1.1x.

    python -m experiments.benchmarks.bench_gin [--quick] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import MLP, GINConv

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from experiments.benchmarks.bench_gcn import describe_graph, epoch_fn, load_cora, synthetic_graph
from graphnorm.models.gin import GIN

TARGET = 1.1
HIDDEN = 64
DROPOUT = 0.5


class PyGOnlyGIN(nn.Module):
    """OGB's GIN layers (no virtual node, no bond features) from PyG's GINConv and MLP, with a linear head."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        widths = [in_channels] + [hidden] * num_layers
        self.convs = nn.ModuleList(
            GINConv(MLP([widths[i], 2 * hidden, hidden], norm="batch_norm"), train_eps=True) for i in range(num_layers)
        )
        self.head = nn.Linear(hidden, out_channels)
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for index, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if index < len(self.convs) - 1:
                x = F.relu(x)
            x = F.dropout(x, self.dropout, self.training)
        return self.head(x)


def build_models(data: Data, num_layers: int) -> dict[str, nn.Module]:
    """graphnorm's GIN and the PyG-only stack with the same depth, widths and dropout, no norm, no virtual node."""
    in_channels, out_channels = data.num_features, int(data.y.max()) + 1
    torch.manual_seed(0)
    ours = GIN(in_channels, HIDDEN, out_channels, num_layers, norm="none", dropout=DROPOUT)
    torch.manual_seed(0)
    pyg = PyGOnlyGIN(in_channels, HIDDEN, out_channels, num_layers, DROPOUT)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in pyg.parameters())
    return {"GIN": ours, "PyG GIN": pyg}


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    data = synthetic_graph() if quick else load_cora()
    depths = (2, 4) if quick else (2, 8, 32)
    repeats, min_seconds = _common.round_settings(quick, repeats)
    rows, targets = _common.compare_by_depth(
        depths,
        lambda depth: {name: epoch_fn(model, data) for name, model in build_models(data, depth).items()},
        "GIN",
        "PyG GIN",
        TARGET,
        repeats=repeats,
        min_seconds=min_seconds,
    )
    setup = (
        f"{describe_graph(data, quick)}, "
        f"hidden {HIDDEN}, dropout {DROPOUT}, no norm, no virtual node, GINConv with trainable eps and OGB's MLP "
        "Linear(w, 2d)-BatchNorm-ReLU-Linear(2d, d), a linear head; baseline: the same stack from PyG's GINConv and "
        "MLP only; Adam, "
        f"one full-batch epoch incl. backward and step; {repeats} interleaved rounds, median; "
        f"{_common.load_summary()}. Peak MB: extra resident memory during one epoch."
    )
    return common.table_report("gin", "GIN training epoch vs the same GIN from PyG parts", setup, rows, targets)


def main(argv: list[str] | None = None) -> None:
    common.bench_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
