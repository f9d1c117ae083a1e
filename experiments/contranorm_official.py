"""The official ContraNorm GCN, transcribed, to run the reference code's Cora protocol on this machine.

The official code (PKU-ML/ContraNorm, ``gnn/layers.py``, ``gnn/models.py``, ``gnn/data.py``, ``gnn/main.py``; Guo
et al., ICLR 2023, https://arxiv.org/abs/2303.06562) in its own terms, with ``.cuda()`` left out; each function below
names the part it transcribes. The protocol: Adam (lr 0.005, weight decay 5e-4), 200 epochs, last-epoch accuracy on
the nodes outside the train and validation masks (2068 on Cora). ``tests/norms/test_contranorm_reference.py`` trains
this transcription and our ``DeepGCN`` (``experiments/sweeps/cora_contranorm_protocol.yaml``) from the same weights
with the same dropout masks and requires the same losses and accuracy, within float round-off. This script runs the
transcription alone over many seeds, to set the reference code's own spread beside ours:

    python -m experiments.contranorm_official --layers 4 --seeds 10
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphnorm.data import load_dataset

Dropout = Callable[[Tensor, float, bool], Tensor]


class OfficialGraphConv(nn.Module):
    """``gnn/layers.py`` ``GraphConv``: ``adj @ x @ W + b``, uniform ``+-1/sqrt(out)`` initialization."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_channels, out_channels))
        self.bias = nn.Parameter(torch.empty(1, out_channels))
        bound = 1.0 / math.sqrt(out_channels)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor, adj: Tensor) -> Tensor:
        return torch.spmm(adj, x) @ self.weight + self.bias


def official_contranorm(x: Tensor, adj: Tensor, scale: float = 1.0, tau: float = 1.0) -> Tensor:
    """``gnn/layers.py`` ``NormLayer`` (mode CN), dense ``[n, n]`` as written there: cosine similarities ``/ tau``,
    every neighbour and the node itself masked to ``-inf``, softmax over each row, ``(1 + s) x - s P x``."""
    norm_x = F.normalize(x, dim=1)
    sim = norm_x @ norm_x.T / tau
    sim = sim.masked_fill(adj.to_dense() > 1e-5, float("-inf"))
    sim = F.softmax(sim, dim=1)
    return (1 + scale) * x - scale * (sim @ x)


class OfficialDeepGCN(nn.Module):
    """``gnn/models.py`` ``DeepGCN`` with ContraNorm and the shared LayerNorm: per hidden layer dropout, conv,
    ContraNorm, one LayerNorm shared by all hidden layers, ReLU; then dropout and the output conv. ``dropout`` is
    ``F.dropout`` unless a test passes its own (to draw the same masks as another model)."""

    def __init__(
        self,
        in_channels: int,
        hidden: int,
        out_channels: int,
        num_layers: int,
        p: float = 0.6,
        scale: float = 1.0,
        dropout: Dropout = F.dropout,
    ) -> None:
        super().__init__()
        self.hidden_layers = nn.ModuleList(
            OfficialGraphConv(in_channels if i == 0 else hidden, hidden) for i in range(num_layers - 1)
        )
        self.out_layer = OfficialGraphConv(hidden, out_channels)
        self.layer_norm = nn.LayerNorm(hidden)
        self.p, self.scale, self.dropout = p, scale, dropout

    def forward(self, x: Tensor, adj: Tensor) -> Tensor:
        for layer in self.hidden_layers:
            x = self.dropout(x, self.p, self.training)
            x = torch.relu(self.layer_norm(official_contranorm(layer(x, adj), adj, self.scale)))
        return self.out_layer(self.dropout(x, self.p, self.training), adj)


def official_features(x: Tensor) -> Tensor:
    """``gnn/data.py``: every row divided by ``1e-6 +`` its sum."""
    return x / (1e-6 + x.sum(dim=1, keepdim=True))


def official_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
    """``gnn/data.py``: symmetrize, add self-loops, divide each row by its sum: ``D^-1 (A + I)``, sparse ``[n, n]``."""
    dense = torch.zeros(num_nodes, num_nodes)
    dense[edge_index[0], edge_index[1]] = 1.0
    dense = torch.maximum(dense, dense.T) + torch.eye(num_nodes)
    return (dense / dense.sum(dim=1, keepdim=True)).to_sparse()


def run_official(num_layers: int, seed: int, epochs: int = 200, hidden: int = 32, root: str | None = None) -> float:
    """One run of the official Cora protocol; last-epoch accuracy on the nodes outside train and validation."""
    data = load_dataset("cora", root=root).data
    x, adj = official_features(data.x), official_adjacency(data.edge_index, data.num_nodes)
    torch.manual_seed(seed)  # the official script sets none; a seed makes each run repeatable
    model = OfficialDeepGCN(data.num_features, hidden, int(data.y.max()) + 1, num_layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        F.cross_entropy(model(x, adj)[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    model.eval()
    rest = ~(data.train_mask | data.val_mask)
    with torch.no_grad():
        return float((model(x, adj).argmax(dim=1) == data.y)[rest].float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=10, help="number of runs")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    accuracies = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        start = time.perf_counter()
        accuracies.append(100 * run_official(args.layers, seed, args.epochs))
        print(
            f"layers {args.layers} seed {seed}: {accuracies[-1]:.1f}  ({time.perf_counter() - start:.0f} s)", flush=True
        )
    # population std, as the official script's np.std
    mean, std = statistics.mean(accuracies), statistics.pstdev(accuracies)
    print(f"layers {args.layers}, {args.seeds} seeds: {mean:.1f} +- {std:.1f}")


if __name__ == "__main__":
    main()
