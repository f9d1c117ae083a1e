"""Re-run one leaderboard cell (``python -m experiments.leaderboard cell``): its runs with the recorded knob
choices, through a sweep of that cell alone into ``runs/leaderboard/<tier>/cells/``, then each seed's value beside
the one recorded in ``analysis/leaderboard/results/<tier>.csv``."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from .protocol import PROTOCOL, load_protocol, setting_name
from .run import RESULTS, Execution, read_knobs, results_paths, setting_kwargs
from .tables import read_runs, tidy_runs


def cell_protocol(tier: str, host: str, graph: str, seeds: list[int], depth: int, path: Path = PROTOCOL):
    """The tier's protocol narrowed to one (host, graph) setting and the given replicates of the grid at ``depth``
    (all of them where ``seeds`` is empty)."""
    import dataclasses

    protocol = load_protocol(tier, path)
    for part in protocol.parts.values():
        if host in part.hosts and graph in part.graphs:
            if depth not in part.depths:
                raise ValueError(f"the grid has no depth {depth}; its depths: {part.depths}")
            chosen = part.graphs[graph]
            there = part.replicates_at(chosen, depth)
            replicates = [r for r in there if not seeds or r in seeds]
            if not replicates or len(replicates) < len(set(seeds)):
                raise ValueError(f"{graph} at {depth} layers runs the replicates {there}; asked for {seeds}")
            narrowed = dataclasses.replace(
                part,
                hosts={host: part.hosts[host]},
                deep_depths=[],  # the replicates are those of this depth
                graphs={graph: dataclasses.replace(chosen, replicates=replicates)},
            )
            return dataclasses.replace(protocol, parts={part.name: narrowed}), narrowed
    raise ValueError(f"tier {tier} has no host {host!r} with graph {graph!r}")


def rerun_cell(args: argparse.Namespace, results: Path = RESULTS, protocol_path: Path = PROTOCOL) -> int:
    """Run the cell ``args`` names and print each seed's value beside the recorded one; 1 when one differs or has
    no recorded value to compare with."""
    from graphnorm.sweep import run_sweep

    from .protocol import grid_sweep

    table_path, knobs_path = results_paths(args.tier, results)
    knobs = read_knobs(knobs_path)
    protocol, part = cell_protocol(args.tier, args.host, args.graph, args.seed, args.depth, protocol_path)
    graph = part.graphs[args.graph]
    kwargs = setting_kwargs(protocol, part, args.host, graph, knobs)
    if args.norm not in kwargs:
        raise ValueError(f"{args.norm} cannot run in {args.host} on {args.graph} (see the leaderboard's note)")
    sweep = grid_sweep(part, args.host, graph, [args.norm], kwargs)
    sweep["grid"]["num_layers"] = [args.depth]
    root = Path(args.runs) / args.tier / "cells"
    out = root / "grid" / setting_name(part, args.host, graph)
    execution = Execution(args.executor, args.workers, args.threads)
    run_sweep(sweep, out, executor=execution.executor, workers=execution.workers, threads=execution.threads,
              make_plots=False, progress=False)  # fmt: skip
    fresh = tidy_runs(protocol, root, knobs)
    fresh = fresh[(fresh["norm"] == args.norm) & (fresh["depth"] == args.depth) & (fresh["status"] == "ok")]
    recorded = read_runs(table_path)
    keys = ["graph", "host", "depth", "norm", "seed"]
    both = fresh[[*keys, "value", "cpu"]].merge(
        recorded[[*keys, "value", "cpu"]], on=keys, how="left", suffixes=("", "_recorded")
    )
    differs = missing = 0
    for row in both.itertuples():
        if math.isnan(row.value_recorded):  # a run the grid has not recorded yet (or recorded without a value)
            missing += 1
            print(f"seed {row.seed}: {row.value:.6g} (not recorded: nothing to compare with yet)")
            continue
        same = math.isclose(row.value, row.value_recorded, rel_tol=1e-6)
        differs += not same
        verdict = "same" if same else f"DIFFERS{cpu_note(row.cpu, row.cpu_recorded)}"
        print(f"seed {row.seed}: {row.value:.6g} (recorded {row.value_recorded:.6g}) {verdict}")
    compared = len(both) - missing
    print(f"{compared - differs} of {compared} recorded seeds give the recorded value"
          + (f"; {missing} not recorded yet in {table_path}" if missing else ""))  # fmt: skip
    return 1 if differs or missing else 0


def cpu_note(cpu: str, recorded: str) -> str:
    """Why a value may differ: the run was recorded on another CPU kind (or one the table did not record), whose
    kernels round differently; '' where both ran on the same kind."""
    if recorded == cpu:
        return ""
    where = f"on {recorded}" if isinstance(recorded, str) and recorded else "on a CPU kind the table did not record"
    return f": recorded {where}, re-run on {cpu}; another CPU kind rounds differently, and training carries it on"
