"""graphnorm norms in PyG's own models, measured: (a) the hosts x norms table, (b) PyG's GCN at 16 layers on Cora.

(a) Every registered norm in PyG's ``GCN``, ``GAT``, ``GraphSAGE``, ``GIN`` and in two ``GPSConv`` layers, as a user
writes it (no extra call), trained briefly and probed (:func:`table_cell`); the ContraNorm rows are repeated with
``graphnorm.norms.pass_edge_index(model)``. (b) PyG's 16-layer ``GCN`` under the ContraNorm protocol's settings with
no norm, with ContraNorm as written and with ContraNorm after ``pass_edge_index(model)`` (:func:`depth_run`).

    python experiments/pyg_hosts.py runs/pyg_hosts            # both; --only table / --only depth
    python experiments/pyg_hosts.py runs/pyg_hosts --only depth --seeds 3 --epochs 100

Writes ``pyg_hosts_table.csv`` and ``pyg_gcn16_<variant>.csv`` into the folder and prints markdown tables (``--only
summary``: (b)'s from the CSVs). One torch thread unless ``--threads``; offline data: ``GRAPHNORM_DATA_MIRROR``.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, GPSConv, global_add_pool
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

from graphnorm.analysis import CollapseProbe
from graphnorm.data import load_dataset
from graphnorm.norms import available_norms, build_norm, pass_edge_index

BASIC_GNNS = {"GCN": GCN, "GAT": GAT, "GraphSAGE": GraphSAGE, "GIN": GIN}
HOSTS = [*BASIC_GNNS, "GPSConv"]
TABLE_HIDDEN = 16
TABLE_EPOCHS = 5


class GPS(nn.Module):
    """Two GPSConv layers (GIN inside) over ZINC's atom types, sum-pooled to one output; called as model(batch)."""

    def __init__(self, norm: str | None, hidden: int = TABLE_HIDDEN) -> None:
        super().__init__()
        self.embed = nn.Embedding(28, hidden)
        self.layers = nn.ModuleList(
            GPSConv(
                hidden,
                GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))),
                heads=2,
                norm=None if norm is None else build_norm(norm, hidden),
            )
            for _ in range(2)
        )
        self.head = nn.Linear(hidden, 1)

    def forward(self, data: Data) -> Tensor:
        h = self.embed(data.x.squeeze(-1))
        for layer in self.layers:
            h = layer(h, data.edge_index, data.batch)
        return self.head(global_add_pool(h, data.batch)).squeeze(-1)


def table_cell(host: str, norm: str, handed: bool, cora: Data, zinc: list[Data]) -> dict:
    """One cell of (a): build, train, probe; what happened, as a record. A ``BasicGNN`` host gets
    ``norm=build_norm(name, 16)``, 3 layers, Cora, 5 full-batch epochs, Adam lr 0.01; ``GPSConv``: two layers (GIN
    inside, hidden 16), 96 ZINC training graphs in mini-batches of 48, 5 epochs, Adam lr 0.001, L1 loss. Then
    ``CollapseProbe(model).probe(...)`` with its defaults; the record says whether it works, what it warned, or its
    one-line reason."""
    torch.manual_seed(0)
    record = {"host": host, "norm": norm, "pass_edge_index": handed}
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if host == "GPSConv":
                model = GPS(norm)
            else:
                model = BASIC_GNNS[host](1433, TABLE_HIDDEN, 3, 7, norm=build_norm(norm, TABLE_HIDDEN))
            if handed:
                pass_edge_index(model)
            before = [p.detach().clone() for p in model.parameters()]
            loss = train_gps(model, zinc) if host == "GPSConv" else train_node_level(model, cora, TABLE_EPOCHS, 0.01)
            sample = Batch.from_data_list(zinc[:32]) if host == "GPSConv" else cora
            table = CollapseProbe(model).probe(sample)
            changed = sum(not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
            ranks = table[(table.metric == "effective_rank") & table.stat.isin(["value", "mean"])].value
            record.update(
                status="works" if math.isfinite(loss) and table.value.notna().any() else "non-finite",
                final_loss=round(loss, 4),
                parameters_changed=f"{changed}/{len(before)}",
                probe_layers=table.layer.nunique(),
                effective_rank_last=round(float(ranks.iloc[-1]), 3),
                reason="",
            )
        except (ValueError, TypeError, RuntimeError) as error:
            record.update(status="fails", reason=" ".join(str(error).split()))
    record["warnings"] = "; ".join(sorted({type(w.message).__name__ for w in caught}))
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def train_node_level(model: nn.Module, data: Data, epochs: int, lr: float, weight_decay: float = 0.0) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    for _ in range(epochs):
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
    return loss.item()


def train_gps(model: nn.Module, graphs: list[Data]) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    loader = DataLoader(graphs, batch_size=48, shuffle=True, generator=torch.Generator().manual_seed(0))
    model.train()
    for _ in range(TABLE_EPOCHS):
        for batch in loader:
            optimizer.zero_grad()
            loss = F.l1_loss(model(batch), batch.y)
            loss.backward()
            optimizer.step()
    return loss.item()


def depth_run(variant: str, seed: int, cora: Data, epochs: int) -> dict:
    """One run of (b): PyG's ``GCN(1433, 64, num_layers=16, out_channels=7)`` with ``variant``'s norm (ContraNorm: scale
    1, its own LayerNorm; as written it runs in its all-nodes form with a warning, after ``pass_edge_index`` with the
    neighbours left out of the negatives) on ``cora`` (the caller row-L1-normalizes the features, as the ContraNorm
    protocol ``experiments/sweeps/cora_contranorm_protocol.yaml``): dropout 0.6, Adam lr 0.005, weight decay 5e-4,
    ``epochs`` full-batch epochs, test accuracy (the 1000 test nodes of the public split) after the last epoch."""
    torch.manual_seed(seed)
    norm = None if variant == "none" else build_norm("contranorm", 64)
    model = GCN(1433, 64, num_layers=16, out_channels=7, dropout=0.6, norm=norm)
    if variant == "contranorm + pass_edge_index":
        pass_edge_index(model)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_node_level(model, cora, epochs, lr=0.005, weight_decay=5e-4)
        model.eval()
        with torch.no_grad():
            predicted = model(cora.x, cora.edge_index).argmax(dim=1)
    accuracy = (predicted[cora.test_mask] == cora.y[cora.test_mask]).float().mean().item()
    return {
        "variant": variant,
        "seed": seed,
        "test_acc": round(accuracy, 4),
        "warnings": "; ".join(sorted({type(w.message).__name__ for w in caught})),
        "seconds": round(time.perf_counter() - start, 1),
    }


def write_csv(path: Path, records: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)


def markdown(records: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in records]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the CSVs")
    parser.add_argument("--only", choices=["table", "depth", "summary"], help="one part only (summary: of the CSVs)")
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANT_FILES), default=list(VARIANT_FILES), help="of (b)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of (b)")
    parser.add_argument("--seed-list", type=int, nargs="+", help="these seeds of (b) instead (own CSV per process)")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    cora = load_dataset("cora").data
    if args.only in (None, "table"):
        zinc_train = load_dataset("zinc").train
        zinc = [zinc_train[i] for i in range(96)]
        records = [
            table_cell(host, norm, handed, cora, zinc)
            for host in HOSTS
            for norm, handed in [(name, False) for name in available_norms()] + [("contranorm", True)]
        ]
        write_csv(args.out / "pyg_hosts_table.csv", records)
        columns = ["host", "norm", "pass_edge_index", "status", "warnings", "probe_layers", "final_loss", "reason"]
        print(markdown(records, columns), flush=True)
    if args.only in (None, "depth"):
        features = cora.x / cora.x.sum(dim=1, keepdim=True).clamp_min(1.0)  # row-L1, as the ContraNorm protocol
        cora = Data(**{**cora.to_dict(), "x": features})
        seeds = args.seed_list if args.seed_list is not None else list(range(args.seeds))
        suffix = "" if args.seed_list is None else "_s" + "_".join(map(str, seeds))
        for variant in args.variants:
            runs = []
            for seed in seeds:
                runs.append(depth_run(variant, seed, cora, args.epochs))
                print(runs[-1], flush=True)
                write_csv(args.out / f"pyg_gcn16_{VARIANT_FILES[variant]}{suffix}.csv", runs)
    summary = depth_summary(args.out)
    if summary:
        print(markdown(summary, list(summary[0])))


VARIANT_FILES = {"none": "none", "contranorm": "contranorm", "contranorm + pass_edge_index": "contranorm_handed"}


def depth_summary(folder: Path) -> list[dict]:
    """Mean and std of the test accuracy of every variant whose CSV is in ``folder``."""
    summary = []
    for variant, slug in VARIANT_FILES.items():
        by_seed: dict[str, dict] = {}
        for path in sorted(folder.glob(f"pyg_gcn16_{slug}.csv")) + sorted(folder.glob(f"pyg_gcn16_{slug}_s*.csv")):
            with path.open() as handle:
                by_seed.update((r["seed"], r) for r in csv.DictReader(handle))
        if not by_seed:
            continue
        runs = [by_seed[seed] for seed in sorted(by_seed, key=int)]
        accuracies = [float(r["test_acc"]) for r in runs]
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        summary.append(
            {
                "variant": variant,
                "test accuracy (mean ± std)": f"{statistics.mean(accuracies):.3f} ± {spread:.3f}",
                "runs": ", ".join(f"{a:.3f}" for a in accuracies),
                "seeds": len(accuracies),
                "warnings": runs[0]["warnings"],
                "seconds per run": f"{statistics.mean(float(r['seconds']) for r in runs):.0f}",
            }
        )
    return summary


if __name__ == "__main__":
    main()
