"""``graphnorm sweep``: load a sweep YAML with its overrides and run its grid (or, with ``--dry-run``, list its runs
and their states); also the learning-curve figure that ``graphnorm train --out`` saves beside its record.

Invalid input is checked before any run starts and is one line (a :class:`CommandError`). The parser is in
:mod:`graphnorm.cli`; this module imports torch and pandas only when the command runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphnorm.train.command import check_tensorboard_dir, tensorboard_override
from graphnorm.train.command_input import CommandError, check_is_sweep_file

if TYPE_CHECKING:
    from graphnorm.config import RunConfig

SWEEP_TABLES = ("runs.csv", "layers.csv", "epochs.csv", "steps.csv", "summary.md")  # written in OUT
SWEEP_FOLDERS = ("results", "report")  # written in OUT, file by file


def cmd_sweep(args: argparse.Namespace) -> int:
    """``graphnorm sweep``: exit status 0 when every run is ok, 1 when some failed, 128 + signal when interrupted;
    invalid input (checked before any run starts) is a :class:`CommandError`."""
    try:
        check_is_sweep_file(Path(args.config))
        return _sweep(args)
    except (ValueError, FileNotFoundError, RuntimeError) as e:  # validation happens before any run starts
        raise CommandError(str(e)) from None


def _sweep(args: argparse.Namespace) -> int:
    """Load the sweep with its overrides and run it (or, with ``--dry-run``, list its runs)."""
    from graphnorm import sweep as sweeps
    from graphnorm.sweep.processes import default_sigterm

    overrides = [*args.overrides, *tensorboard_override(args.tensorboard, "base.tensorboard_dir")]
    sweep = sweeps.load_sweep_config(args.config, overrides)
    if args.metric:
        sweep["metric"] = args.metric
    out = Path(args.out) if args.out else Path("runs") / sweep["name"]
    check_sweep_out(out, Path(args.config), sweep)
    if not args.dry_run:
        tensorboard = sweep.get("base", {}).get("tensorboard_dir")
        check_tensorboard_dir(tensorboard, "--tensorboard" if args.tensorboard else "base.tensorboard_dir")
    if args.dry_run:
        return _dry_run(sweep, out, args.run_fn)
    slurm = sweeps.SlurmOptions(
        partition=args.slurm_partition,
        time_min=args.slurm_time,
        cpus_per_task=args.slurm_cpus,
        mem_gb=args.slurm_mem_gb,
        gpus_per_node=args.slurm_gpus,
        array_parallelism=args.slurm_array_parallelism,
        account=args.slurm_account,
        poll_s=args.slurm_poll,
        grace_s=args.slurm_grace,
    )
    default_sigterm()  # `kill PID` stops this sweep, whatever started the command
    try:
        runs = sweeps.run_sweep(
            sweep,
            out,
            run_fn=args.run_fn,
            executor=args.executor,
            workers=args.workers,
            threads=args.threads,
            retry_failed=args.retry_failed,
            slurm=slurm,
            make_plots=not args.no_plots,
        )
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM or SIGHUP: the workers are gone, runs.csv is current
        signum = getattr(e, "signum", signal.SIGINT)
        name = signal.Signals(signum).name
        print(
            f"\ninterrupted ({name}); finished runs are saved in {out}. Run the same command to resume.",
            file=sys.stderr,
        )
        return 128 + signum
    return 0 if (runs["status"] == "ok").all() else 1


def check_sweep_out(out: Path, config_path: Path, sweep: dict[str, Any]) -> None:
    """``CommandError`` when a file the sweep reads (its config, the base's SMILES CSV) is one the sweep writes:
    ``--out`` itself, a table in it (:data:`SWEEP_TABLES`) or a file under its results or report folders."""
    from graphnorm.files import same_file

    inputs = {"the sweep config": config_path}
    path = sweep.get("base", {}).get("dataset_kwargs", {}).get("path")
    if isinstance(path, (str, os.PathLike)) and str(path):
        inputs["the base's data file (dataset_kwargs.path)"] = path
    folder = out.expanduser().resolve()
    for description, value in inputs.items():
        target = Path(value).expanduser().resolve()
        written = (
            same_file(target, out)
            or (target.parent == folder and target.name in SWEEP_TABLES)
            or any(target.is_relative_to(folder / name) for name in SWEEP_FOLDERS)
        )
        if written:
            raise CommandError(
                f"--out {out}: the sweep writes {target}, which is {description} ({value}); give another --out"
            )


def _dry_run(sweep: dict[str, Any], out: Path, run_fn: str | None) -> int:
    """``--dry-run``: validate every run as a real sweep would, print each with its state, run nothing."""
    from graphnorm import sweep as sweeps
    from graphnorm.sweep.results import load_results
    from graphnorm.sweep.tables import check_metric

    sweeps.resolve_run_fn(run_fn or sweep.get("run_fn"))  # it exists; its module registers its models and datasets
    configs = sweeps.expand_grid(sweep)
    table = sweeps.status_table(sweep, configs, out)
    quiet = load_results(out, list(table["run_id"]), warn=lambda message: None)  # status_table warned
    check_metric(sweep.get("metric"), quiet)
    counts = table["state"].value_counts()
    print(table.to_string(index=False))
    states = ("done", "failed", "missing", "invalid")[: 4 if counts.get("invalid") else 3]
    summary = ", ".join(f"{counts.get(s, 0)} {s}" for s in states)
    print(f"\n{sweep['name']}: {len(table)} runs ({summary}) in {out}")
    return 0


def save_learning_curve(history: list[dict], config: RunConfig, path: Path) -> None:
    """A run's learning curve (:func:`graphnorm.sweep.report.plot_learning_curves`) as an image at ``path``."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from graphnorm.files import save_figure
    from graphnorm.sweep.report import plot_learning_curves

    runs = pd.DataFrame([{"run_id": "run", "norm": config.norm, "num_layers": config.num_layers}])
    figure = plot_learning_curves(pd.DataFrame(history).assign(run_id="run"), runs)
    try:
        save_figure(figure, path, f"the learning curve {path}", dpi=120, bbox_inches="tight")
    finally:
        plt.close(figure)
