"""Command line: ``graphnorm sweep``, ``graphnorm train``, ``graphnorm predict``, ``graphnorm norms``.

graphnorm sweep experiments/sweeps/cora_depth_quick.yaml                    # local processes, all cores
graphnorm sweep experiments/sweeps/cora_depth.yaml base.epochs=50 grid.seed=[0,1] --workers 2
graphnorm sweep --dry-run experiments/sweeps/cora_depth.yaml                # the grid, done/missing, runs nothing
graphnorm sweep experiments/sweeps/cora_depth.yaml --executor slurm --slurm-partition gpu --slurm-time 30
graphnorm train experiments/runs/cora_gcn.yaml epochs=5 norm=pairnorm   # one run, prints its record
graphnorm predict ckpt/<run_id>.model.pt new.csv --out predictions.csv  # score new molecules (SMILES CSV)
graphnorm predict ckpt/<run_id>.model.pt --split test --out test.csv   # score a split of the run's dataset

The parsers and the dispatch; each command's body (``graphnorm.<train|sweep|predict>.command``) is imported only
when the command runs, so ``graphnorm --help`` and ``graphnorm --version`` answer at once, without torch or pandas.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

# Light (no torch): the error every command reports in one line, and the sweep-only keys (re-exported for tests).
from graphnorm.train.command_input import SWEEP_SECTIONS, CommandError

__all__ = ["EXECUTORS", "SWEEP_SECTIONS", "CommandError", "build_parser", "main", "parse_args"]

# Choices the parser needs without importing graphnorm.sweep (torch); tests check they equal graphnorm.sweep's.
EXECUTORS = ("local", "serial", "submitit-local", "slurm")
HELP_FORMAT = argparse.RawDescriptionHelpFormatter  # descriptions and examples keep their line breaks


class _VersionAction(argparse.Action):
    """``--version``: print ``graphnorm <version>`` and exit (the version is looked up only when asked)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        import graphnorm

        print(f"graphnorm {graphnorm.__version__}")
        parser.exit()


SWEEP_HELP = "run a grid of configs (resumes: only runs without a result are executed)"
SWEEP_DESCRIPTION = """\
Run every grid point of a sweep YAML (keys name, description, metric, run_fn, base, grid, norm_settings) and
write OUT/results/<run_id>.json, runs.csv, layers.csv, epochs.csv, summary.md and the figures in OUT/report/.
Resumes: a run whose result exists is not run again. For one run from a YAML of RunConfig keys: graphnorm train."""

SWEEP_EPILOG = """\
examples:
  graphnorm sweep experiments/sweeps/cora_depth_quick.yaml
  graphnorm sweep experiments/sweeps/cora_depth.yaml base.epochs=50 grid.seed=[0,1] --workers 2
  graphnorm sweep --dry-run experiments/sweeps/cora_depth.yaml
  graphnorm sweep experiments/sweeps/cora_depth.yaml --executor slurm --slurm-partition gpu --slurm-time 30"""


def _command(
    sub: argparse._SubParsersAction, name: str, help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """A command's parser: its line in ``graphnorm --help``, and its description and examples kept as written."""
    return sub.add_parser(name, help=help, description=description, epilog=epilog, formatter_class=HELP_FORMAT)


def _sweep_parser(sub: argparse._SubParsersAction) -> None:
    """The ``sweep`` command's options."""
    p = _command(sub, "sweep", SWEEP_HELP, SWEEP_DESCRIPTION, SWEEP_EPILOG)
    p.add_argument("config", help="sweep YAML (name, base, grid, norm_settings, metric), e.g. experiments/sweeps/*")
    p.add_argument("overrides", nargs="*", help="key.path=value overrides, e.g. base.epochs=50 grid.seed=[0,1]")
    p.add_argument("--out", help="output directory (default: runs/<name>)")
    p.add_argument("--executor", choices=EXECUTORS, default="local", help="where runs execute (default: local)")
    p.add_argument(
        "--workers",
        type=int,
        help="parallel runs for local/submitit-local (default: usable cores: CPU affinity, container quota, "
        "SLURM_CPUS_PER_TASK)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="torch threads per run (default: $GRAPHNORM_THREADS, else usable cores / workers, 1 when the machine "
        "is busy)",
    )
    p.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    p.add_argument("--dry-run", action="store_true", help="print the runs and whether each is done; run nothing")
    p.add_argument("--no-plots", action="store_true", help="skip the report step (graphnorm.sweep.report)")
    p.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="TensorBoard scalars of each run in DIR/<run_id> (sets base.tensorboard_dir); tensorboard --logdir DIR",
    )
    p.add_argument("--metric", help="metric of the summary table (default: the config's, else test_acc/rocauc/mae)")
    p.add_argument(
        "--run-fn",
        help="function run per grid point, 'module:function' (default: the config's run_fn, else graphnorm.train:run)",
    )
    slurm = p.add_argument_group("SLURM (--executor slurm, through submitit)")
    slurm.add_argument("--slurm-partition", help="partition to submit to")
    slurm.add_argument(
        "--slurm-time", type=int, default=60, help="time limit per run in minutes (also for submitit-local)"
    )
    slurm.add_argument("--slurm-cpus", type=int, default=1, help="CPUs per run (default: 1)")
    slurm.add_argument("--slurm-mem-gb", type=float, help="memory per run in GB")
    slurm.add_argument("--slurm-gpus", type=int, default=0, help="GPUs per run (default: 0)")
    slurm.add_argument("--slurm-array-parallelism", type=int, default=256, help="max runs at once (default: 256)")
    slurm.add_argument("--slurm-account", help="account to charge")
    slurm.add_argument(
        "--slurm-poll", type=_positive_seconds, default=10.0, help="seconds between asks of the scheduler (default: 10)"
    )
    slurm.add_argument(
        "--slurm-grace",
        type=_positive_seconds,
        default=15.0,
        help="seconds a task that ended without a result is given before its run is recorded failed (default: 15)",
    )


def _positive_seconds(text: str) -> float:
    """A number of seconds above 0 (argparse's ``type``: a bad value is a one-line usage error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number of seconds above 0")
    return value


TRAIN_HELP = "one run from a YAML of RunConfig keys; prints its record"
TRAIN_DESCRIPTION = """\
Train and evaluate one model from a YAML mapping of RunConfig keys (dataset, model, norm, num_layers, epochs, ...;
see graphnorm/config/run_config.py; keys not in the file keep their defaults) and print its record: metrics and timings.
--out saves the full record, with the collapse metrics at every layer and the per-epoch history.
A mistake in the data (a bad SMILES or label, an empty file or split) is one line; GRAPHNORM_TRACEBACK=1 shows
the traceback instead.
For a grid of runs from a sweep YAML (base, grid, norm_settings): graphnorm sweep."""

TRAIN_EPILOG = """\
examples:
  graphnorm train experiments/runs/cora_gcn.yaml
  graphnorm train experiments/runs/cora_gcn.yaml epochs=50 norm=pairnorm num_layers=8
  graphnorm train experiments/runs/zinc_graphormer.yaml --out runs/zinc_graphormer/record.json"""


def _train_parser(sub: argparse._SubParsersAction) -> None:
    """The ``train`` command's options."""
    p = _command(sub, "train", TRAIN_HELP, TRAIN_DESCRIPTION, TRAIN_EPILOG)
    p.add_argument("config", help="YAML mapping of RunConfig keys, e.g. experiments/runs/*")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. epochs=5 norm=pairnorm")
    p.add_argument(
        "--out",
        help="also write the full record (with per-layer rows and the per-epoch history) to this JSON file, and its "
        "learning curve beside it (<out>.learning_curve.png)",
    )
    p.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="TensorBoard scalars (loss, metrics and learning rate per epoch, collapse metrics per layer) in "
        "DIR/<run_id> (sets tensorboard_dir); watch with: tensorboard --logdir DIR",
    )


PREDICT_HELP = "score a SMILES CSV, or a split of the run's dataset, with a trained model"
PREDICT_DESCRIPTION = """\
Score with a model saved by a run with checkpoint_dir (<run_id>.model.pt), either
  the molecules of a CSV of SMILES (INPUT): one prediction row per input row, in input order: line, the SMILES, valid
  (false for an invalid SMILES, with empty predictions) and one column per target (probability or value); or
  a part of the run's own dataset (--split train|val|test, the dataset and its keys from the run's config): one row
  per node or graph with its index, the prediction(s) and the label, and the part's metric printed beside the run's
  record of it."""

PREDICT_EPILOG = """\
examples:
  graphnorm predict ckpt/<run_id>.model.pt molecules.csv --out predictions.csv --smiles-column smiles
  graphnorm predict ckpt/<run_id>.model.pt --split test --out test_predictions.csv"""


def _predict_parser(sub: argparse._SubParsersAction) -> None:
    """The ``predict`` command's options."""
    p = _command(sub, "predict", PREDICT_HELP, PREDICT_DESCRIPTION, PREDICT_EPILOG)
    p.add_argument("model", help="model file <checkpoint_dir>/<run_id>.model.pt, written by a run with checkpoint_dir")
    p.add_argument("input", nargs="?", help="CSV file with a SMILES column (or give --split instead)")
    p.add_argument("--out", required=True, help="predictions CSV to write")
    p.add_argument("--split", help="score this part of the run's dataset instead of a CSV: train, val or test")
    p.add_argument(
        "--data-root",
        help="with --split: where the dataset lives (default: the run's data_root, else $GRAPHNORM_DATA, else the "
        "user cache, seeded from $GRAPHNORM_DATA_MIRROR)",
    )
    p.add_argument("--smiles-column", help="column holding the SMILES (default: the training CSV's, else 'smiles')")
    p.add_argument(
        "--batch-size", type=int, help="graphs per forward pass (default: 256 for a CSV, the run's with --split)"
    )
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")


MAIN_EPILOG = """\
commands in short:
  graphnorm sweep experiments/sweeps/cora_depth_quick.yaml   # the depth study: table and figures
  graphnorm train experiments/runs/cora_gcn.yaml             # one run: prints its record
  graphnorm norms                                            # the registered norms

graphnorm <command> --help shows a command's options and examples."""


def build_parser() -> argparse.ArgumentParser:
    """The ``graphnorm`` parser; building it imports nothing heavy (no torch, PyG or pandas)."""
    parser = argparse.ArgumentParser(
        prog="graphnorm",
        description="Study and cure oversmoothing and dimensional collapse in GNNs and graph transformers.",
        epilog=MAIN_EPILOG,
        formatter_class=HELP_FORMAT,
    )
    parser.add_argument("--version", action=_VersionAction, help="print graphnorm's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{sweep,train,predict,norms}")
    _sweep_parser(sub)
    _train_parser(sub)
    _predict_parser(sub)
    sub.add_parser(
        "norms",
        help="list the registered norms",
        description="Print the names of the registered norms, one per line: the values of a config's 'norm' key "
        "(options of each: the norms catalogue, docs/catalogue/norms.md).",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Like ``parse_args``, but a command's key=value overrides may also follow its options
    (``graphnorm sweep cfg.yaml --workers 2 base.epochs=3``): argparse alone stops collecting positionals there."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    command = argv[0] if argv else None
    if command not in commands:  # --help, --version, a typo, or no command: argparse's own messages
        return parser.parse_args(argv)
    args = commands[command].parse_intermixed_args(argv[1:])
    args.command = command
    return args


def _sweep(args: argparse.Namespace) -> int:
    from graphnorm.sweep.command import cmd_sweep

    return cmd_sweep(args)


def _train(args: argparse.Namespace) -> int:
    from graphnorm.sweep.command import save_learning_curve  # the sweep report's figure, beside the record
    from graphnorm.train.command import cmd_train

    return cmd_train(args, save_learning_curve)


def _predict(args: argparse.Namespace) -> int:
    from graphnorm.predict.command import cmd_predict

    return cmd_predict(args)


def _norms(args: argparse.Namespace) -> int:
    from graphnorm.norms import available_norms

    print("\n".join(available_norms()))
    return 0


# Each command's body lives with its package and is imported only when the command runs (--help stays fast).
COMMANDS = {"sweep": _sweep, "train": _train, "predict": _predict, "norms": _norms}


def main(argv: list[str] | None = None) -> int:
    """Run the command of ``argv`` (default: the process's arguments); its exit status. Bad input is one line on
    stderr and status 2."""
    args = parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except CommandError as e:
        print(f"graphnorm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except MemoryError as e:  # a size beyond this machine: its one line, not a traceback from inside numpy or torch
        from graphnorm.memory import InsufficientMemoryError

        print(f"graphnorm {args.command}: error: {' '.join(str(e).split()) or 'out of memory'}", file=sys.stderr)
        return 2 if isinstance(e, InsufficientMemoryError) else 1
    except BrokenPipeError:  # output piped into `head`: stop quietly, like other command-line tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
