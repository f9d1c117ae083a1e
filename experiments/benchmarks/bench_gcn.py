"""Training epoch time of ``DeepGCN`` against PyG's ``torch_geometric.nn.models.GCN`` on Cora.

    python -m experiments.benchmarks.bench_gcn [--quick] [--out DIR]

Both models: 2, 16 or 64 GCN convolutions, hidden 64, norm ``none`` or ``batchnorm``, conv -> norm -> ReLU ->
dropout, symmetric adjacency. One full-batch Adam epoch of each per round, interleaved, median, against ``PyG GCN``
(its ``GCNConv`` normalizes the adjacency in every layer; target ``DeepGCN / PyG GCN <= 1.1``) and ``PyG GCN
cached`` (normalized once, as ``DeepGCN`` does; reported). Protocol: ``docs/results/benchmarks.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from graphnorm.models.gcn import DeepGCN

TARGET = 1.1
HIDDEN = 64
DROPOUT = 0.5


def load_cora() -> Data:
    from graphnorm.data import load_dataset

    return load_dataset("cora").data


def synthetic_graph(num_nodes: int = 300, num_features: int = 32, num_classes: int = 4, seed: int = 0) -> Data:
    """A small random graph with Cora's fields (quick mode)."""
    generator = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, num_nodes, (2, 4 * num_nodes), generator=generator)
    edge_index = torch.cat([edges, edges.flip(0)], dim=1)
    train_mask = torch.zeros(num_nodes, dtype=torch.bool)
    train_mask[: num_nodes // 5] = True
    return Data(
        x=torch.randn(num_nodes, num_features, generator=generator),
        edge_index=edge_index,
        y=torch.randint(0, num_classes, (num_nodes,), generator=generator),
        train_mask=train_mask,
    )


def describe_graph(data: Data, quick: bool) -> str:
    """The graph the benchmark ran on (Cora, or in quick mode the random graph) and its size, for the setup text."""
    graph = "random graph" if quick else "Cora"
    return f"{graph} ({data.num_nodes} nodes, {data.edge_index.size(1)} directed edges, {data.num_features} features)"


def build_models(data: Data, num_layers: int, norm: str) -> dict[str, nn.Module]:
    """DeepGCN and the two PyG GCN baselines with the same depth, width, dropout and norm."""
    in_channels, out_channels = data.num_features, int(data.y.max()) + 1
    pyg_norm = None if norm == "none" else norm
    models: dict[str, nn.Module] = {}
    torch.manual_seed(0)
    models["DeepGCN"] = DeepGCN(
        in_channels,
        HIDDEN,
        out_channels,
        num_layers,
        norm=norm,
        dropout=DROPOUT,
        adjacency="sym",
        layer_order="conv-norm-act-dropout",
    )
    torch.manual_seed(0)
    models["PyG GCN"] = GCN(in_channels, HIDDEN, num_layers, out_channels, dropout=DROPOUT, norm=pyg_norm)
    torch.manual_seed(0)
    models["PyG GCN cached"] = GCN(
        in_channels, HIDDEN, num_layers, out_channels, dropout=DROPOUT, norm=pyg_norm, cached=True
    )
    return models


def epoch_fn(model: nn.Module, data: Data, lr: float = 0.01) -> Callable[[], None]:
    """One full-batch training epoch (forward, loss on the training nodes, backward, one Adam step)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4)
    model.train()

    def epoch() -> None:
        optimizer.zero_grad(set_to_none=True)
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()

    return epoch


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    data = synthetic_graph() if quick else load_cora()
    depths = (2, 4) if quick else (2, 16, 64)
    repeats, min_seconds = _common.round_settings(quick, repeats)
    rows: list[dict] = []
    targets: list[common.Target] = []
    for norm in ("none", "batchnorm"):
        norm_rows, norm_targets = _common.compare_by_depth(
            depths,
            lambda depth, norm=norm: {
                name: epoch_fn(model, data) for name, model in build_models(data, depth, norm).items()
            },
            "DeepGCN",
            "PyG GCN",
            TARGET,
            repeats=repeats,
            min_seconds=min_seconds,
            leading={"norm": norm},
            more_ratios={"DeepGCN / PyG cached": "PyG GCN cached"},
        )
        rows += norm_rows
        targets += norm_targets
    plots = [_plot(rows, Path(out_dir))] if out_dir is not None else []
    setup = (
        f"{describe_graph(data, quick)}, "
        f"hidden {HIDDEN}, dropout {DROPOUT}, conv -> norm -> ReLU -> dropout, bare conv classifier, sym adjacency, "
        f"Adam; one full-batch epoch incl. backward and step; {repeats} interleaved rounds, median. "
        "Peak MB: extra resident memory during one epoch."
    )
    return common.table_report("gcn", "4. DeepGCN training epoch vs PyG GCN", setup, rows, targets, plots)


def _plot(rows: list[dict], out_dir: Path) -> Path:
    """Epoch time against depth, one line per model and norm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for norm in dict.fromkeys(row["norm"] for row in rows):
        subset = [row for row in rows if row["norm"] == norm]
        for column, style in (("DeepGCN (ms)", "-o"), ("PyG GCN (ms)", "--s"), ("PyG GCN cached (ms)", ":^")):
            label = f"{column.removesuffix(' (ms)')}, {norm}"
            ax.plot([row["layers"] for row in subset], [row[column] for row in subset], style, label=label)
    ax.set(xlabel="layers", ylabel="epoch time (ms)", xscale="log", yscale="log", title="training epoch")
    depths = sorted({row["layers"] for row in rows})
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(depths, [str(depth) for depth in depths])
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "gcn_epoch_scaling.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    common.bench_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
