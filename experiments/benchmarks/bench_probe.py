"""Benchmark 5: cost of the collapse probe on a 64-layer GCN on Cora, against one forward pass of that model.

``graphnorm.analysis.CollapseProbe(model).probe(data)`` runs one eval/no-grad forward with hooks on every layer and
then every collapse metric on every captured layer output. The baseline is one forward pass of the same model in
eval mode under ``torch.no_grad()`` (the least any probe must do). Interleaved rounds, median; no target, the ratio
is reported together with the probe's own split into forward and metrics time.

    python -m experiments.benchmarks.bench_probe [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
from torch_geometric.data import Data

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from experiments.benchmarks.bench_gcn import load_cora, synthetic_graph
from graphnorm.analysis import CollapseProbe
from graphnorm.analysis.collapse import single_thread
from graphnorm.models.gcn import DeepGCN

HIDDEN = 64


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    data: Data = synthetic_graph() if quick else load_cora()
    num_layers = 4 if quick else 64
    repeats = repeats or (2 if quick else 5)
    min_seconds = 0.002 if quick else 0.02  # a candidate faster than this is looped within a round
    torch.manual_seed(0)
    model = DeepGCN(data.num_features, HIDDEN, int(data.y.max()) + 1, num_layers, norm="none", dropout=0.5)
    probe = CollapseProbe(model)

    def forward() -> None:
        model.eval()
        with torch.no_grad():
            model(data.x, data.edge_index)

    def forward_one_thread() -> None:  # the probe's own forward runs on one thread (collapse.single_thread)
        with single_thread():
            forward()

    split: dict[str, list[float]] = {"forward_s": [], "metrics_s": []}

    def probe_call() -> None:
        probe.probe(data)
        for key in split:
            split[key].append(probe.last_timing[key])

    fns: dict[str, Callable[[], None]] = {
        "forward": forward,
        "forward_1_thread": forward_one_thread,
        "probe": probe_call,
    }
    times = _common.time_interleaved(fns, repeats=repeats, min_seconds=min_seconds)
    ratio = times["probe"] / times["forward"]
    ratio_one_thread = times["probe"] / times["forward_1_thread"]
    records = probe.probe(data)
    row = {
        "model": f"DeepGCN {num_layers} layers, hidden {HIDDEN}",
        "forward (ms)": times["forward"] * 1e3,
        "forward 1 thread (ms)": times["forward_1_thread"] * 1e3,
        "probe (ms)": times["probe"] * 1e3,
        "probe / forward": ratio,
        "probe / forward 1 thread": ratio_one_thread,
        "probe: its forward (ms)": _common.median(split["forward_s"]) * 1e3,
        "probe: metrics (ms)": _common.median(split["metrics_s"]) * 1e3,
        "metrics per layer (ms)": _common.median(split["metrics_s"]) * 1e3 / len(probe.layers),
        "records": len(records),
    }
    print(common.format_row(row), flush=True)
    graph = "random graph" if quick else "Cora"
    setup = (
        f"{graph} ({data.num_nodes} nodes), DeepGCN with {num_layers} layers (norm none, hidden {HIDDEN}); "
        f"probe = CollapseProbe(model).probe(data) over {len(probe.layers)} layers with the default metrics; "
        f"baseline = one eval/no-grad forward with this run's torch threads ({torch.get_num_threads()}) and on one "
        "thread (the probe runs its own forward and metrics on one thread); "
        f"{repeats} interleaved rounds, median. No target: reported."
    )
    return common.BenchReport(
        name="probe",
        title="5. Collapse probe vs one forward pass",
        setup=setup,
        tables=[common.markdown_table([row])],
        targets=[
            common.Target(f"probe / forward ({num_layers} layers)", "reported (no target)", ratio, None),
            common.Target(
                f"probe / forward on 1 thread ({num_layers} layers)", "reported (no target)", ratio_one_thread, None
            ),
        ],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    print(run(quick=args.quick, out_dir=args.out).to_markdown())


if __name__ == "__main__":
    main()
