"""CPU-hours of a leaderboard tier before running it (``python -m experiments.leaderboard estimate``). The cost
model: a run costs ``fixed + epochs x (a + b x depth) x norm factor + probe`` CPU seconds (one torch thread). Short
runs of each (host, graph) measure it in process CPU time, not wall time (so other work on the machine does not
count): no norm at the lower depth for one epoch and for a few (``fixed`` and the epoch), at the upper depth (``b``),
ContraNorm and GRANOLA at the upper depth (their factors; every other norm is charged :data:`OTHER_NORM_FACTOR`).
``--time`` writes them to ``<tier>_timings.csv``, read back after. A node-level run is charged
:data:`EPOCHS_FRACTION` of its epochs (early stopping: an assumption), a molecular one its epochs up to
``max_train_minutes``; graph-level timings run on :data:`TIMING_GRAPHS` graphs and scale with the training set.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from .protocol import (
    Graph,
    Part,
    Protocol,
    fixed_kwargs,
    knob_choices,
    load_protocol,
    runnable_norms,
    setting_config,
    setting_name,
)
from .run import RESULTS, results_paths, tuned_norms, write_csv
from .tables import read_runs

TIMED_DEPTHS = (2, 8)
TIMED_NORMS = ("contranorm", "granola")
TIMING_EPOCHS = {"node": 5, "molecular": 2}
TIMING_GRAPHS = 512  # graph level: graphs per split in a timing run
OTHER_NORM_FACTOR = 1.3  # an elementwise or per-graph norm next to the convolution's cost
EPOCHS_FRACTION = 0.6  # node level: patience stops most runs well before the last epoch
TRAIN_SPLIT = {"zinc": 10_000, "molhiv": 32_901}  # training graphs of the molecular datasets' standard splits
TIMING_COLUMNS = ["part", "host", "graph", "norm", "depth", "epochs", "cpu_s", "wall_s", "probe_cpu_s", "train_graphs"]


def timing_config(
    part: Part, host: str, graph: Graph, norm: str, depth: int, protocol: Protocol, epochs: int
) -> dict[str, Any]:
    """The config of one timing run: the setting's, ``epochs`` epochs, no early stop or time cap."""
    config = setting_config(part, host, graph)
    config.update(norm=norm, num_layers=depth, epochs=epochs, patience=None)
    config.update(norm_kwargs={**fixed_kwargs(protocol, graph, norm), **knob_choices(protocol, norm)[-1]})
    if part.name != "node":
        config.update(limit_graphs=TIMING_GRAPHS, max_train_minutes=None)
    return config


def training_graphs(graph: Graph, config: dict[str, Any]) -> int:
    """Training graphs a graph-level run of ``config`` sees (its ``limit_graphs`` or the split); 1 at node level."""
    full = TRAIN_SPLIT.get(config["dataset"])
    if full is None:
        return 1
    return min(full, int(config.get("limit_graphs") or full))


def time_runs(protocol: Protocol, log=print) -> pd.DataFrame:
    """Time the short runs of every (host, graph) of the tier, one torch thread, in this process. Each setting's
    first run is run once more before it is timed: the first loads (or processes) the dataset, which a grid's
    runs find ready, and would otherwise be charged to the epoch."""
    import torch

    from graphnorm.config import RunConfig
    from graphnorm.train import run

    torch.set_num_threads(1)
    rows = []
    for part, host, graph in protocol.settings():
        norms = runnable_norms(setting_config(part, host, graph), protocol.norms)[0]
        low, high = TIMED_DEPTHS
        epochs = TIMING_EPOCHS.get(part.name, 2)
        plan = [("none", low, 1), ("none", low, epochs), ("none", high, epochs)]
        plan += [(norm, high, epochs) for norm in TIMED_NORMS if norm in norms]
        run(RunConfig.from_dict(timing_config(part, host, graph, "none", low, protocol, 1)))  # the warm-up
        for norm, depth, count in plan:
            config = timing_config(part, host, graph, norm, depth, protocol, count)
            wall, cpu = time.perf_counter(), time.process_time()
            record = run(RunConfig.from_dict(config))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            # the probe's share of the CPU time, as its share of the wall time
            probe = float(record.get("probe_time_s") or 0.0) * cpu / max(wall, 1e-9)
            rows.append({"part": part.name, "host": host, "graph": graph.name, "norm": norm, "depth": depth,
                         "epochs": count, "cpu_s": cpu - probe, "wall_s": wall, "probe_cpu_s": probe,
                         "train_graphs": training_graphs(graph, config)})  # fmt: skip
            log(f"timed {setting_name(part, host, graph)} {norm} L{depth} x{count}: {cpu:.1f} CPU s ({wall:.1f} s)")
    return pd.DataFrame(rows, columns=TIMING_COLUMNS)


def fitted(rows: pd.DataFrame) -> dict[str, float]:
    """One setting's cost model from its timings: ``fixed`` seconds per run, seconds per epoch at the two depths,
    and each timed norm's factor over no norm at the upper depth."""
    low, high = TIMED_DEPTHS
    none = rows[rows["norm"] == "none"]
    one = none[(none["depth"] == low) & (none["epochs"] == 1)]["cpu_s"].iloc[0]
    many = none[(none["depth"] == low) & (none["epochs"] > 1)].iloc[0]
    epoch_low = max(1e-6, (many["cpu_s"] - one) / (many["epochs"] - 1))
    fixed = max(0.0, one - epoch_low)
    deep = none[none["depth"] == high].iloc[0]
    epoch_high = max(epoch_low, (deep["cpu_s"] - fixed) / deep["epochs"])
    model = {"fixed": fixed, "epoch_low": epoch_low, "epoch_high": epoch_high}
    for norm in TIMED_NORMS:
        timed = rows[(rows["norm"] == norm) & (rows["depth"] == high)]
        if len(timed):
            model[norm] = max(1.0, (timed["cpu_s"].iloc[0] - fixed) / timed["epochs"].iloc[0] / epoch_high)
    probes = none[none["epochs"] > 1].set_index("depth")["probe_cpu_s"]
    model.update(probe_low=float(probes[low]), probe_high=float(probes[high]))
    return model


def linear(low: float, high: float, depth: int) -> float:
    """The line through ``low`` at the lower timed depth and ``high`` at the upper one, at ``depth`` (>= 0)."""
    a, b = TIMED_DEPTHS
    return max(0.0, low + (high - low) * (depth - a) / (b - a))


def run_seconds(part: Part, graph: Graph, model: dict[str, float], norm: str, depth: int, config: dict) -> float:
    """One run's estimated CPU seconds (one thread)."""
    epoch = linear(model["epoch_low"], model["epoch_high"], depth) * model.get(
        norm, 1.0 if norm == "none" else OTHER_NORM_FACTOR
    )
    if part.name == "node":
        train = EPOCHS_FRACTION * config["epochs"] * epoch
    else:
        epoch *= training_graphs(graph, config) / TIMING_GRAPHS
        cap = 60.0 * config["max_train_minutes"] if config.get("max_train_minutes") else math.inf
        train = min(config["epochs"] * epoch, cap + epoch)
    return model["fixed"] + train + linear(model["probe_low"], model["probe_high"], depth)


def estimate(protocol: Protocol, timings: pd.DataFrame) -> pd.DataFrame:
    """Per (part, host, graph): tuning and grid runs and their estimated CPU-hours."""
    rows = []
    for part, host, graph in protocol.settings():
        config = setting_config(part, host, graph)
        mine = timings[(timings["part"] == part.name) & (timings["host"] == host) & (timings["graph"] == graph.name)]
        if mine.empty:
            raise ValueError(f"no timings of {setting_name(part, host, graph)}: run the estimate with --time")
        mine = fitted(mine)
        norms = runnable_norms(config, protocol.norms)[0]
        grid = sum(
            run_seconds(part, graph, mine, n, d, config) * len(part.replicates_at(graph, d))
            for n in norms
            for d in part.depths
        )
        tuning = sum(
            len(knob_choices(protocol, n)) * run_seconds(part, graph, mine, n, part.reference_depth, config)
            for n in tuned_norms(protocol, part, host, graph)
        ) * min(part.tuning_replicates, len(graph.replicates))
        runs_grid = len(norms) * sum(len(part.replicates_at(graph, d)) for d in part.depths)
        runs_tuning = sum(len(knob_choices(protocol, n)) for n in tuned_norms(protocol, part, host, graph))
        runs_tuning *= min(part.tuning_replicates, len(graph.replicates))
        rows.append({"part": part.name, "host": host, "graph": graph.name, "tuning_runs": runs_tuning,
                     "grid_runs": runs_grid, "tuning_cpu_h": tuning / 3600, "grid_cpu_h": grid / 3600})  # fmt: skip
    table = pd.DataFrame(rows)
    table["cpu_h"] = table["tuning_cpu_h"] + table["grid_cpu_h"]
    return table


def spent_lines(protocol: Protocol, timings: pd.DataFrame, runs: pd.DataFrame, path: Path) -> str:
    """The recorded grid runs' CPU-hours per part beside the model's estimate of those same runs: the check of the
    cost model on this machine (a ratio above 1: the estimate is low by that factor)."""
    models = {}
    lines = [f"recorded grid runs in {path} (finished ones), CPU-hours:"]
    for part, host, graph in protocol.settings():
        mine = timings[(timings["part"] == part.name) & (timings["host"] == host) & (timings["graph"] == graph.name)]
        models[(part.name, host, graph.name)] = (part, graph, fitted(mine), setting_config(part, host, graph))
    done = runs[(runs["status"] == "ok") & runs["cpu_s"].notna()]
    for name, rows in done.groupby("part", sort=True):
        estimated = 0.0
        for row in rows.itertuples():
            part, graph, model, config = models[(row.part, row.host, row.graph)]
            estimated += run_seconds(part, graph, model, row.norm, int(row.depth), config)
        spent = rows["cpu_s"].sum()
        lines.append(f"  {name}: {len(rows)} runs, recorded {spent / 3600:.3f}, estimated {estimated / 3600:.3f} "
                     f"(recorded / estimated = {spent / max(estimated, 1e-9):.2f})")  # fmt: skip
    return "\n".join(lines)


def print_estimate(tier: str, calibrate: bool = False, results: Path = RESULTS, log=print) -> pd.DataFrame:
    """Print the tier's estimate per setting and per part (timing first with ``calibrate``)."""
    protocol = load_protocol(tier)
    path = results / f"{tier}_timings.csv"
    if calibrate:
        write_csv(time_runs(protocol, log), path)
    if not path.exists():
        raise FileNotFoundError(f"{path} holds no timings yet: run the estimate once with --time")
    table = estimate(protocol, pd.read_csv(path))
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        log(table.round(3).to_string(index=False))
        parts = table.groupby("part")[["tuning_runs", "grid_runs", "tuning_cpu_h", "grid_cpu_h", "cpu_h"]].sum()
        log(f"\nestimated CPU-hours per part (tier {tier}, one torch thread per run; timings: {path}):")
        log(parts.round(3).to_string())
    runs_path = results_paths(tier, results)[0]
    runs = read_runs(runs_path)
    if not runs.empty:
        log(spent_lines(protocol, pd.read_csv(path), runs, runs_path))
    return table
