"""The leaderboard's command line (``python -m experiments.leaderboard``): ``run`` (tune, grid, tidy table),
``estimate`` (CPU-hours per part), ``cell`` (re-run one cell, compared with the recorded values) and ``page``."""

from __future__ import annotations

import argparse
import sys

from .protocol import TIERS


def parser() -> argparse.ArgumentParser:
    """The subcommands and their options."""
    main = argparse.ArgumentParser(prog="python -m experiments.leaderboard", description=__doc__.splitlines()[0])
    commands = main.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run or resume a tier: tuning sweeps, grid sweeps, the tidy table")
    cell = commands.add_parser("cell", help="re-run one cell's runs and compare them with the recorded values")
    estimate = commands.add_parser("estimate", help="CPU-hours per part of a tier, before running it")
    page = commands.add_parser("page", help="the page analysis/questions/leaderboard.md from the committed results")
    for sub in (run, cell, estimate, page):
        sub.add_argument("--tier", choices=TIERS, default="full" if sub is not page else None)
    for sub in (run, cell):
        sub.add_argument("--executor", choices=("local", "serial", "submitit-local", "slurm"), default="local")
        sub.add_argument("--workers", type=int, default=None, help="runs at once (default: the usable cores)")
        sub.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
        sub.add_argument("--runs", default="runs/leaderboard", help="where the sweep folders go")
    run.add_argument("--host", action="append", default=[], help="run only this host (repeatable)")
    run.add_argument("--graph", action="append", default=[], help="run only this graph (repeatable)")
    run.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    run.add_argument(
        "--collect-only",
        action="store_true",
        help="run nothing: write the tidy table and knob choices from what the sweep folders and committed tables hold",
    )
    run.add_argument("--partition", help="SLURM partition (--executor slurm)")
    run.add_argument("--time-min", type=int, default=120, help="SLURM time limit per run, minutes")
    for name in ("host", "graph", "norm"):
        cell.add_argument(f"--{name}", required=True)
    cell.add_argument("--depth", type=int, required=True)
    cell.add_argument("--seed", type=int, action="append", default=[], help="only this replicate (repeatable)")
    estimate.add_argument("--time", action="store_true", help="time short runs to calibrate the cost model")
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "run":
            from graphnorm.sweep import SlurmOptions

            from .run import Execution, run_tier

            slurm = SlurmOptions(partition=args.partition, time_min=args.time_min, cpus_per_task=args.threads)
            execution = Execution(args.executor, args.workers, args.threads, args.retry_failed, slurm,
                                  only_hosts=args.host, only_graphs=args.graph,
                                  collect_only=args.collect_only)  # fmt: skip
            print(run_tier(args.tier, execution, runs=args.runs))
        elif args.command == "cell":
            from .cell import rerun_cell

            return rerun_cell(args)
        elif args.command == "estimate":
            from .estimate import print_estimate

            print_estimate(args.tier, calibrate=args.time)
        else:
            from .page import build_leaderboard

            print(build_leaderboard(tier=args.tier))
    except (FileNotFoundError, ValueError) as error:
        print("error: " + " ".join(str(error).splitlines()), file=sys.stderr)
        return 2
    return 0
