"""CPU-hours of a leaderboard tier before running it (``python -m experiments.leaderboard estimate``). The cost
model: a run costs ``epochs x (a + b x depth) x norm factor + probe``. ``a``, ``b`` and the probe's cost come from
short timed runs of each (host, graph) without a norm at two depths (``--time``: written to ``<tier>_timings.csv``,
read back after), ContraNorm and GRANOLA (the norms whose cost differs by more than a constant) are timed at the upper
depth, every other norm is charged :data:`OTHER_NORM_FACTOR` times no norm. A node-level run is charged
:data:`EPOCHS_FRACTION` of its epochs (early stopping; the remainder assumed), a molecular one its epochs up to
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
from .run import RESULTS, tuned_norms, write_csv

TIMED_DEPTHS = (2, 8)
TIMED_NORMS = ("none", "contranorm", "granola")
TIMING_EPOCHS = {"node": 5, "molecular": 1}
TIMING_GRAPHS = 512  # graph level: graphs per split in a timing run
OTHER_NORM_FACTOR = 1.3  # an elementwise or per-graph norm next to the convolution's cost
EPOCHS_FRACTION = 0.6  # node level: patience stops most runs well before the last epoch
TRAIN_SPLIT = {"zinc": 10_000, "molhiv": 32_901}  # training graphs of the molecular datasets' standard splits
TIMING_COLUMNS = ["part", "host", "graph", "norm", "depth", "epochs", "train_s", "probe_s", "train_graphs"]


def timing_config(part: Part, host: str, graph: Graph, norm: str, depth: int, protocol: Protocol) -> dict[str, Any]:
    """The config of one timing run: the setting's, a few epochs, no early stop or time cap."""
    config = setting_config(part, host, graph)
    config.update(norm=norm, num_layers=depth, epochs=TIMING_EPOCHS.get(part.name, 1), patience=None)
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
    """Time the short runs of every (host, graph) of the tier, one torch thread, in this process."""
    import torch

    from graphnorm.config import RunConfig
    from graphnorm.train import run

    torch.set_num_threads(1)
    rows = []
    for part, host, graph in protocol.settings():
        norms = runnable_norms(setting_config(part, host, graph), protocol.norms)[0]
        for norm, depth in [("none", d) for d in TIMED_DEPTHS] + [(n, TIMED_DEPTHS[-1]) for n in TIMED_NORMS[1:]]:
            if norm not in norms:
                continue
            config = timing_config(part, host, graph, norm, depth, protocol)
            start = time.perf_counter()
            record = run(RunConfig.from_dict(config))
            elapsed = time.perf_counter() - start
            probe = float(record.get("probe_time_s") or 0.0)
            rows.append({"part": part.name, "host": host, "graph": graph.name, "norm": norm, "depth": depth,
                         "epochs": record.get("epochs_run") or config["epochs"], "train_s": elapsed - probe,
                         "probe_s": probe, "train_graphs": training_graphs(graph, config)})  # fmt: skip
            log(f"timed {setting_name(part, host, graph)} {norm} L{depth}: {elapsed:.1f} s")
    return pd.DataFrame(rows, columns=TIMING_COLUMNS)


def per_epoch(rows: pd.DataFrame, norm: str, depth: int) -> float:
    """Seconds per epoch of ``norm`` at ``depth`` from one setting's timings: no norm's two depths fit a line in
    depth; a timed norm scales it by its own time at the upper depth, another norm by :data:`OTHER_NORM_FACTOR`."""
    none = rows[rows["norm"] == "none"].set_index("depth")
    seconds = none["train_s"] / none["epochs"]
    low, high = TIMED_DEPTHS
    slope = max(0.0, (seconds[high] - seconds[low]) / (high - low))
    base = max(0.0, seconds[low] - slope * low) + slope * depth
    timed = rows[(rows["norm"] == norm) & (rows["depth"] == high)]
    factor = (timed["train_s"].iloc[0] / timed["epochs"].iloc[0]) / seconds[high] if len(timed) else OTHER_NORM_FACTOR
    return base * (1.0 if norm == "none" else factor)


def probe_seconds(rows: pd.DataFrame, depth: int) -> float:
    """The probe's seconds at ``depth``: linear in depth through no norm's two timings."""
    none = rows[rows["norm"] == "none"].set_index("depth")["probe_s"]
    low, high = TIMED_DEPTHS
    slope = max(0.0, (none[high] - none[low]) / (high - low))
    return max(0.0, none[low] + slope * (depth - low))


def run_seconds(part: Part, graph: Graph, rows: pd.DataFrame, norm: str, depth: int, config: dict) -> float:
    """One run's estimated CPU seconds (one thread)."""
    epoch = per_epoch(rows, norm, depth)
    if part.name == "node":
        train = EPOCHS_FRACTION * config["epochs"] * epoch
    else:
        timed = float(rows["train_graphs"].iloc[0]) or 1.0
        epoch *= training_graphs(graph, config) / timed
        cap = 60.0 * config["max_train_minutes"] if config.get("max_train_minutes") else math.inf
        train = min(config["epochs"] * epoch, cap + epoch)
    return train + probe_seconds(rows, depth)


def estimate(protocol: Protocol, timings: pd.DataFrame) -> pd.DataFrame:
    """Per (part, host, graph): tuning and grid runs and their estimated CPU-hours."""
    rows = []
    for part, host, graph in protocol.settings():
        config = setting_config(part, host, graph)
        mine = timings[(timings["part"] == part.name) & (timings["host"] == host) & (timings["graph"] == graph.name)]
        if mine.empty:
            raise ValueError(f"no timings of {setting_name(part, host, graph)}: run the estimate with --time")
        norms = runnable_norms(config, protocol.norms)[0]
        grid = sum(run_seconds(part, graph, mine, n, d, config) for n in norms for d in part.depths)
        grid *= len(graph.replicates)
        tuning = sum(
            len(knob_choices(protocol, n)) * run_seconds(part, graph, mine, n, part.reference_depth, config)
            for n in tuned_norms(protocol, part, host, graph)
        ) * min(part.tuning_replicates, len(graph.replicates))
        runs_grid = len(norms) * len(part.depths) * len(graph.replicates)
        runs_tuning = sum(len(knob_choices(protocol, n)) for n in tuned_norms(protocol, part, host, graph))
        runs_tuning *= min(part.tuning_replicates, len(graph.replicates))
        rows.append({"part": part.name, "host": host, "graph": graph.name, "tuning_runs": runs_tuning,
                     "grid_runs": runs_grid, "tuning_cpu_h": tuning / 3600, "grid_cpu_h": grid / 3600})  # fmt: skip
    table = pd.DataFrame(rows)
    table["cpu_h"] = table["tuning_cpu_h"] + table["grid_cpu_h"]
    return table


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
        log(parts.round(2).to_string())
    runs_path = results / f"{tier}.csv"
    if runs_path.exists():
        spent = pd.read_csv(runs_path).groupby("part")["cpu_s"].sum() / 3600
        log("recorded grid runs' CPU-hours in " + str(runs_path) + ": " + spent.round(3).to_string())
    return table
