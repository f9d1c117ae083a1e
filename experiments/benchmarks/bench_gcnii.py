"""Training epoch time of graphnorm's ``GCNII`` against a PyG-only GCNII on Cora.

    python -m experiments.benchmarks.bench_gcnii [--quick] [--out DIR]

Both models with the paper's Cora settings. The baseline ``PyG GCNII`` is the model of PyG's
``examples/gcn2_cora.py`` on the adjacency that example normalizes once before training; ``GCNII`` takes
``edge_index`` and normalizes in every forward (target ``GCNII / PyG GCNII <= 1.1``); ``GCNII sparse x`` runs on
sparse features, as the trainer passes Cora's (reported). One full-batch epoch of each per round, interleaved,
median. Protocol: ``docs/results/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GCN2Conv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import coalesce, remove_self_loops

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from experiments.benchmarks.bench_gcn import describe_graph, load_cora, synthetic_graph
from graphnorm.models import GCNII

TARGET = 1.1
HIDDEN = 64
DROPOUT = 0.6
ALPHA = 0.1
THETA = 0.5
CONV_DECAY = 0.01
DENSE_DECAY = 5e-4
OUR_KWARGS = dict(dropout=DROPOUT, alpha=ALPHA, theta=THETA, conv_weight_decay=CONV_DECAY)


class PyGGCNII(nn.Module):
    """The GCNII of PyG's ``examples/gcn2_cora.py``: ``forward(x, adj_t)`` on a pre-normalized sparse adjacency."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int) -> None:
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(in_channels, hidden), nn.Linear(hidden, out_channels)])
        self.convs = nn.ModuleList(
            GCN2Conv(hidden, ALPHA, THETA, layer + 1, shared_weights=True, normalize=False)
            for layer in range(num_layers)
        )

    def forward(self, x: Tensor, adj_t: Tensor) -> Tensor:
        x = F.dropout(x, DROPOUT, self.training)
        x = x_0 = self.lins[0](x).relu()
        for conv in self.convs:
            x = F.dropout(x, DROPOUT, self.training)
            x = conv(x, x_0, adj_t).relu()
        x = F.dropout(x, DROPOUT, self.training)
        return self.lins[1](x)


def pyg_adjacency(data: Data) -> Tensor:
    """The example's preprocessing, once: ``ToSparseTensor`` then ``gcn_norm`` (self loops, symmetric)."""
    with warnings.catch_warnings():  # torch's one-time notes that sparse CSR is in beta
        warnings.simplefilter("ignore", UserWarning)
        adj_t = T.ToSparseTensor()(data.clone()).adj_t
        normalized = gcn_norm(adj_t)
    return normalized[0] if isinstance(normalized, tuple) else normalized  # torch.sparse input: (adj, None)


def build_models(data: Data, num_layers: int) -> dict[str, nn.Module]:
    in_channels, out_channels = data.num_features, int(data.y.max()) + 1
    torch.manual_seed(0)
    ours = GCNII(in_channels, HIDDEN, out_channels, num_layers, **OUR_KWARGS)
    torch.manual_seed(0)
    reference = PyGGCNII(in_channels, HIDDEN, out_channels, num_layers)
    return {"GCNII": ours, "PyG GCNII": reference}


def optimizer_for(model: nn.Module) -> torch.optim.Optimizer:
    """Adam with the paper's two weight decays (the example's parameter groups)."""
    if isinstance(model, GCNII):
        return torch.optim.Adam(model.parameter_groups(DENSE_DECAY), lr=0.01)
    return torch.optim.Adam(
        [
            {"params": model.convs.parameters(), "weight_decay": CONV_DECAY},
            {"params": model.lins.parameters(), "weight_decay": DENSE_DECAY},
        ],
        lr=0.01,
    )


def epoch_fn(model: nn.Module, data: Data, inputs: tuple) -> Callable[[], None]:
    """One full-batch training epoch (forward, loss on the training nodes, backward, one Adam step)."""
    optimizer = optimizer_for(model)
    model.train()

    def epoch() -> None:
        optimizer.zero_grad(set_to_none=True)
        out = model(*inputs)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()

    return epoch


def outputs_agree(data: Data, num_layers: int = 4) -> bool:
    """Like with like: with the same weights, both models give the same eval-mode output."""
    models = build_models(data, num_layers)
    ours, reference = models["GCNII"].eval(), models["PyG GCNII"].eval()
    reference.lins[0].load_state_dict(ours.input_block.lin.state_dict())
    reference.lins[1].load_state_dict(ours.head.state_dict())
    for conv, block in zip(reference.convs, ours.blocks):
        conv.load_state_dict(block.conv.state_dict())
    with torch.no_grad():
        return torch.allclose(ours(data.x, data.edge_index), reference(data.x, pyg_adjacency(data)), atol=1e-5)


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    data = T.NormalizeFeatures()(synthetic_graph() if quick else load_cora())
    # A simple graph (Cora is one): the example's ToSparseTensor merges repeated edges, edge_index keeps them.
    data.edge_index = coalesce(remove_self_loops(data.edge_index)[0])
    depths = (2, 4) if quick else (16, 64)
    repeats, min_seconds = _common.round_settings(quick, repeats)
    adj_t = pyg_adjacency(data)
    sparse_x = data.x.to_sparse()

    def candidates(depth: int) -> dict[str, Callable[[], None]]:
        models = build_models(data, depth)
        torch.manual_seed(0)
        ours_sparse = GCNII(data.num_features, HIDDEN, int(data.y.max()) + 1, depth, **OUR_KWARGS)
        return {
            "GCNII": epoch_fn(models["GCNII"], data, (data.x, data.edge_index)),
            "PyG GCNII": epoch_fn(models["PyG GCNII"], data, (data.x, adj_t)),
            "GCNII sparse x": epoch_fn(ours_sparse, data, (sparse_x, data.edge_index)),
        }

    rows, targets = _common.compare_by_depth(
        depths, candidates, "GCNII", "PyG GCNII", TARGET, repeats=repeats, min_seconds=min_seconds
    )
    setup = (
        f"{describe_graph(data, quick)}, "
        f"hidden {HIDDEN}, alpha {ALPHA}, theta {THETA}, dropout {DROPOUT}, no norm, Adam with weight decay "
        f"{CONV_DECAY} (convs) / {DENSE_DECAY} (Linear); one full-batch epoch incl. backward and step; {repeats} "
        "interleaved rounds, median. Same eval-mode output with the same weights: "
        f"{'yes' if outputs_agree(data) else 'NO'}. Peak MB: extra resident memory during one epoch. "
        f"{_common.load_summary()}."
    )
    return common.table_report("gcnii", "7. GCNII training epoch vs a PyG-only GCNII", setup, rows, targets)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(run(quick=args.quick, out_dir=args.out).to_markdown())


if __name__ == "__main__":
    main()
