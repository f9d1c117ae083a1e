"""Command line: ``graphnorm sweep``, ``graphnorm train``, ``graphnorm predict``, ``graphnorm norms``.

graphnorm sweep experiments/sweeps/cora_depth_quick.yaml                    # local processes, all cores
graphnorm sweep experiments/sweeps/cora_depth.yaml base.epochs=50 grid.seed=[0,1] --workers 2
graphnorm sweep --dry-run experiments/sweeps/cora_depth.yaml                # the grid, done/missing, runs nothing
graphnorm sweep experiments/sweeps/cora_depth.yaml --executor slurm --slurm-partition gpu --slurm-time 30
graphnorm train experiments/runs/cora_gcn.yaml epochs=5 norm=pairnorm   # one run, prints its record
graphnorm predict ckpt/<run_id>.model.pt new.csv --out predictions.csv  # score new molecules (SMILES CSV)
graphnorm predict ckpt/<run_id>.model.pt --split test --out test.csv   # score a split of the run's dataset

This module imports only the standard library and PyYAML at import time: torch, PyG and pandas are imported by the
command handlers, so ``graphnorm --help`` and ``graphnorm --version`` answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphnorm.files import load_yaml_file

if TYPE_CHECKING:
    from graphnorm.config import RunConfig
    from graphnorm.predict import SplitScores

# Choices the parser needs without importing graphnorm.sweep (torch); tests check they equal graphnorm.sweep's.
EXECUTORS = ("local", "serial", "submitit-local", "slurm")
SWEEP_SECTIONS = ("base", "grid", "norm_settings")  # keys that only a sweep config has
HELP_FORMAT = argparse.RawDescriptionHelpFormatter  # descriptions and examples keep their line breaks


class CommandError(Exception):
    """Bad input or a sweep that cannot go on: reported as one line, without a traceback."""


class _VersionAction(argparse.Action):
    """``--version``: print ``graphnorm <version>`` and exit (the version is looked up only when asked)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        import graphnorm

        print(f"graphnorm {graphnorm.__version__}")
        parser.exit()


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


def _sweep_parser(sub: argparse._SubParsersAction) -> None:
    """The ``sweep`` command's options."""
    p = sub.add_parser(
        "sweep",
        help="run a grid of configs (resumes: only runs without a result are executed)",
        description=SWEEP_DESCRIPTION,
        epilog=SWEEP_EPILOG,
        formatter_class=HELP_FORMAT,
    )
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


TRAIN_DESCRIPTION = """\
Train and evaluate one model from a YAML mapping of RunConfig keys (dataset, model, norm, num_layers, epochs, ...;
see graphnorm/config.py; keys not in the file keep their defaults) and print its record: metrics and timings.
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
    p = sub.add_parser(
        "train",
        help="one run from a YAML of RunConfig keys; prints its record",
        description=TRAIN_DESCRIPTION,
        epilog=TRAIN_EPILOG,
        formatter_class=HELP_FORMAT,
    )
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
    p = sub.add_parser(
        "predict",
        help="score a SMILES CSV, or a split of the run's dataset, with a trained model",
        description=PREDICT_DESCRIPTION,
        epilog=PREDICT_EPILOG,
        formatter_class=HELP_FORMAT,
    )
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


def check_predict_inputs(args: argparse.Namespace) -> None:
    """``ValueError`` for options that do not go together: one of INPUT and --split, and each one's own options."""
    if args.input is not None and args.split is not None:
        raise ValueError(
            f"give either a SMILES CSV ({args.input}) or --split {args.split} (a part of the run's dataset), not both"
        )
    if args.input is None and args.split is None:
        raise ValueError("give a SMILES CSV to score, or --split train|val|test to score a part of the run's dataset")
    if args.split is not None and args.smiles_column is not None:
        raise ValueError("--smiles-column is for a SMILES CSV; --split scores the run's dataset")
    if args.input is not None and args.data_root is not None:
        raise ValueError("--data-root is for --split; a SMILES CSV is featurized from the file itself")
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")


def cmd_predict(args: argparse.Namespace) -> int:
    """``graphnorm predict``: score a SMILES CSV or a part of the run's dataset, print one summary line; bad input is
    a :class:`CommandError`."""
    from graphnorm.files import check_name_fits, check_not_an_input, check_output_path, ensure_writable_dir
    from graphnorm.predict import DEFAULT_BATCH_SIZE, check_device, check_outside_data_root, predict_csv, predict_split
    from graphnorm.train.model_file import ModelFileError

    out = Path(args.out)
    try:
        check_predict_inputs(args)
        check_device(args.device)
        check_name_fits(out, f"--out {out}")  # first: the file system refuses even to look up a name too long
        if out.is_dir():
            raise ValueError(f"--out {out} is a directory; give a file name, e.g. {out / 'predictions.csv'}")
        inputs = {"the model file": args.model, "the input CSV": args.input}
        check_not_an_input(out, inputs, f"--out {out}")
        if args.split is not None:
            check_outside_data_root(out, args.data_root, f"--out {out}")
        ensure_writable_dir(out.parent, f"--out {out}")
        check_output_path(out, f"--out {out}")
        if args.split is not None:
            scores = predict_split(args.model, args.split, out, args.data_root, args.batch_size, args.device)
        else:
            batch_size = args.batch_size or DEFAULT_BATCH_SIZE
            summary = predict_csv(args.model, args.input, out, args.smiles_column, batch_size, args.device)
    except (ModelFileError, ValueError, FileNotFoundError) as e:
        raise CommandError(str(e)) from None
    except OSError as e:  # the predictions could not be saved (a full disk)
        raise CommandError(f"--out {out} cannot be written: {e.strerror or e}") from None
    if args.split is not None:
        print(split_summary(scores, out))
        return 0
    rate = 1000 * summary["seconds"] / max(summary["rows"], 1)
    print(
        f"{summary['rows']} rows ({summary['invalid']} invalid SMILES, marked valid=false) -> {out}; "
        f"{summary['seconds']:.2f} s ({rate:.2f} s per 1000 molecules)"
    )
    return 0


def split_summary(scores: SplitScores, out: Path) -> str:
    """The printed line of ``predict --split``: rows, the metric and the run's record of it, the time."""
    items = "nodes" if scores.level == "node" else "graphs"
    unscored = f", {scores.unscored} above max_nodes unscored as in training (scored=false)" if scores.unscored else ""
    recorded = "not in the run's record" if scores.recorded is None else f"the run's record: {scores.recorded:.6f}"
    return (
        f"{scores.split}: {scores.rows} {items}{unscored} -> {out}; {scores.split}_{scores.metric} "
        f"{scores.value:.6f} ({recorded}); {scores.seconds:.2f} s"
    )


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


def _command_hint(command: str, path: Path) -> str:
    """The command line that runs ``path`` with ``graphnorm <command>`` (the path shell-quoted)."""
    return f"graphnorm {command} {shlex.quote(str(path))}"


def check_is_sweep_file(path: Path) -> None:
    """``CommandError`` pointing to ``graphnorm train`` when ``path`` holds a single-run config: a mapping with
    RunConfig keys at the top and none of the sweep sections (base, grid, norm_settings)."""
    from graphnorm.config import RunConfig

    values = load_yaml_file(path, "sweep config")
    if not isinstance(values, dict) or any(key in values for key in SWEEP_SECTIONS):
        return  # load_sweep_config reports anything else wrong with it
    run_keys = [key for key in values if key in RunConfig.field_names()]  # in the file's order
    if run_keys:
        raise CommandError(
            f"{path} is a single-run config (RunConfig keys such as {', '.join(run_keys[:3])}; no base, grid or "
            f"norm_settings), not a sweep; run it with: {_command_hint('train', path)}"
        )


def check_is_run_values(path: Path, values: dict[str, Any]) -> None:
    """``CommandError`` pointing to ``graphnorm sweep`` when the mapping read from ``path`` is a sweep config."""
    sections = [key for key in SWEEP_SECTIONS if key in values]
    if sections:
        raise CommandError(
            f"{path} is a sweep config (it has {', '.join(sections)}), not a single run; run it with: "
            f"{_command_hint('sweep', path)}"
        )


def tensorboard_override(directory: str | None, key: str) -> list[str]:
    """``[key=<directory>]`` for ``--tensorboard DIR`` (none without it), once the tensorboard package is there."""
    if directory is None:
        return []
    from graphnorm.train.tensorboard_log import require_tensorboard

    try:
        require_tensorboard()
    except ImportError as e:
        raise CommandError(f"--tensorboard: {e}") from None
    return [f"{key}={json.dumps(directory)}"]  # a JSON string is a YAML string: DIR is never read as a number


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


SWEEP_TABLES = ("runs.csv", "layers.csv", "epochs.csv", "steps.csv", "summary.md")  # written in OUT
SWEEP_FOLDERS = ("results", "report")  # written in OUT, file by file


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


def _load_run_config(path: Path, overrides: list[str]) -> RunConfig:
    """The RunConfig of a run YAML with ``key=value`` overrides; ``CommandError`` for any bad input."""
    from graphnorm.config import RunConfig, apply_overrides

    try:
        values = load_yaml_file(path, "config")
        values = {} if values is None else values  # an empty file: every key at its default
        if not isinstance(values, dict):
            raise ValueError(f"config {path} must be a YAML mapping of RunConfig keys, got {type(values).__name__}")
        check_is_run_values(path, values)
        return RunConfig.from_dict(apply_overrides(values, overrides))
    except (ValueError, TypeError, FileNotFoundError) as e:
        raise CommandError(str(e)) from None


TRACEBACK_ENV = "GRAPHNORM_TRACEBACK"  # set to 1: data-loading errors keep their traceback (for debugging)


def cmd_train(args: argparse.Namespace) -> int:
    """``graphnorm train``: one run; prints its record without the long lists, which ``--out`` saves with the
    learning curve's figure. Bad input, outputs that cannot be written and data that cannot be loaded are each one
    line, checked before training."""
    from graphnorm import train
    from graphnorm.files import atomic_write_text
    from graphnorm.train.record import STEPS_KEY

    overrides = [*args.overrides, *tensorboard_override(args.tensorboard, "tensorboard_dir")]
    config = _load_run_config(Path(args.config), overrides)
    out = Path(args.out) if args.out else None
    if out is not None:  # before training: a run whose record cannot be saved is lost
        check_train_out(out, Path(args.config), config)
    check_tensorboard_dir(config.tensorboard_dir, "--tensorboard" if args.tensorboard else "tensorboard_dir")
    check_run_outputs(config)
    load_run_data(config)
    from graphnorm.data import DatasetNotFoundError
    from graphnorm.train.schedules import TrainingDivergedError

    # Errors of the run itself keep their traceback; a dataset that cannot be found is the user's to provide, and a
    # run that diverged the user's to configure.
    try:
        record = train.run(config)
    except (DatasetNotFoundError, TrainingDivergedError) as e:
        raise CommandError(str(e)) from None
    curve, failure = None, None
    if out is not None:  # the record is printed below also when a full disk keeps it from being saved
        try:
            atomic_write_text(out, json.dumps(record, indent=1), f"--out {out}")
        except OSError as e:
            failure = f"the run finished, but its record cannot be written to {out}: {e.strerror or e}"
        else:
            if record.get("history"):
                curve = learning_curve_path(out)
                try:
                    _save_learning_curve(record["history"], config, curve)
                except OSError as e:
                    failure = f"the record is saved to {out}, but its learning curve {curve} cannot be written: "
                    failure += str(e.strerror or e)
                    curve = None
    parts = (("layers", "per-layer rows"), ("history", "epochs of history"), (STEPS_KEY, "per-step rows"))
    shown = {k: v for k, v in record.items() if k not in dict(parts)}
    print(json.dumps(shown, indent=1))
    hidden = [f"{len(record[key])} {what}" for key, what in parts if record.get(key)]
    if hidden:
        print(f"({' and '.join(hidden)} not shown{'' if args.out else '; save them with --out'})")
    if curve is not None:
        print(f"learning curve: {curve}")
    if failure is not None:
        raise CommandError(failure)
    return 0


def learning_curve_path(out: Path) -> Path:
    """``<out>.learning_curve.png``: the figure ``train --out`` writes beside the record."""
    return out.with_name(out.name + ".learning_curve.png")


def run_inputs(config_path: Path, config: RunConfig) -> dict[str, Any]:
    """The files a run reads (description -> path): its config, its SMILES CSV, its resume checkpoint and model file
    (both unknown while the SMILES CSV is missing: that error comes when the data loads)."""
    from graphnorm.train.checkpoints import checkpoint_path
    from graphnorm.train.model_file import model_file_path

    inputs: dict[str, Any] = {"the config": config_path}
    path = config.dataset_kwargs.get("path")
    if isinstance(path, (str, os.PathLike)) and str(path):
        inputs["the run's data file (dataset_kwargs.path)"] = path
    if config.checkpoint_dir is not None:
        try:
            inputs["the run's checkpoint"] = checkpoint_path(config)
            inputs["the run's model file"] = model_file_path(config)
        except (OSError, ValueError):
            pass
    return inputs


def check_train_out(out: Path, config_path: Path, config: RunConfig) -> None:
    """``CommandError`` unless ``train --out`` (and its learning curve beside it) can be written: a file name the
    folder accepts, in a writable folder, no file the run reads, and a regular file or nothing
    (:func:`graphnorm.files.check_output_path`: never a link, a device, a FIFO or a socket)."""
    from graphnorm.files import check_name_fits, check_not_an_input, check_output_path, ensure_writable_dir
    from graphnorm.predict import check_outside_data_root

    outputs = ((out, f"--out {out}"), (learning_curve_path(out), f"the learning curve of --out {out}"))
    try:
        for path, what in outputs:  # first: the file system refuses even to look up a name too long
            check_name_fits(path, what)
        if out.is_dir():
            raise ValueError(f"--out {out} is a directory; give a file name, e.g. {out / 'record.json'}")
        inputs = run_inputs(config_path, config)
        for path, what in outputs:
            check_not_an_input(path, inputs, what)
            check_outside_data_root(path, config.data_root, what)
        ensure_writable_dir(out.parent, f"--out {out}")
        for path, what in outputs:
            check_output_path(path, what)
    except ValueError as e:
        raise CommandError(str(e)) from None


def check_run_outputs(config: RunConfig) -> None:
    """``CommandError`` unless every place the run writes can be written (checkpoint_dir, its checkpoint and model
    file, the TensorBoard folders: :func:`graphnorm.train.loop.check_run_outputs`), before any data loads."""
    if config.checkpoint_dir is None and config.tensorboard_dir is None:
        return  # (nothing to check: no need to import the trainer yet)
    from graphnorm.train.checkpoints import CheckpointError
    from graphnorm.train.loop import check_run_outputs as check

    try:
        check(config)
    except (CheckpointError, ValueError) as e:
        raise CommandError(str(e)) from None


def check_tensorboard_dir(directory: str | None, what: str) -> None:
    """``CommandError`` unless the TensorBoard folder (``--tensorboard DIR`` or the ``tensorboard_dir`` key) can be
    created and written, checked before any data loads or any run starts."""
    if directory is None:
        return
    from graphnorm.files import ensure_writable_dir

    try:
        ensure_writable_dir(Path(directory).expanduser(), f"{what} {directory}")
    except ValueError as e:
        raise CommandError(str(e)) from None


def load_run_data(config: RunConfig) -> None:
    """Load the run's dataset before training (the run then takes it from this process's cache), so that a mistake
    in the user's data is one line: a missing file, an unreadable or non-UTF-8 file, bad SMILES or labels, an empty
    file or split. With ``$GRAPHNORM_TRACEBACK=1`` the error keeps its traceback."""
    from graphnorm.data.root import DataRootError
    from graphnorm.train.loaders import prepare_task

    try:
        prepare_task(config)
    except (ValueError, FileNotFoundError, DataRootError) as e:  # UnicodeDecodeError is a ValueError
        if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        named = f"dataset {config.dataset!r}"
        message = str(e) if str(e).startswith(named) else f"{named}: {e}"  # not twice: many messages start with it
        raise CommandError(f"{message} (set {TRACEBACK_ENV}=1 for the traceback)") from None


def _save_learning_curve(history: list[dict], config: RunConfig, path: Path) -> None:
    """The run's learning curve (:func:`graphnorm.sweep.report.plot_learning_curves`) as an image at ``path``."""
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


def main(argv: list[str] | None = None) -> int:
    """Run the command of ``argv`` (default: the process's arguments); its exit status. Bad input is one line on
    stderr and status 2."""
    args = parse_args(argv)
    try:
        if args.command == "sweep":
            return cmd_sweep(args)
        if args.command == "train":
            return cmd_train(args)
        if args.command == "predict":
            return cmd_predict(args)
        from graphnorm.norms import available_norms

        print("\n".join(available_norms()))
        return 0
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
