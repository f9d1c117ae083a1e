"""``graphnorm train``: one run from a YAML of RunConfig keys, its record printed and, with ``--out``, saved with its
learning curve.

Everything that can be checked is checked before training, each mistake one line (a :class:`CommandError`): the
config, the places the run writes, and the user's data, loaded once here. The parser is in :mod:`graphnorm.cli`;
this module imports torch only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphnorm.files import load_yaml_file
from graphnorm.train.command_input import CommandError, check_is_run_values, check_outside_data_root

if TYPE_CHECKING:
    from graphnorm.config import RunConfig

CurveSaver = Callable[[list[dict], "RunConfig", Path], None]  # (history, config, path): writes the figure at path
TRACEBACK_ENV = "GRAPHNORM_TRACEBACK"  # set to 1: data-loading errors keep their traceback (for debugging)


def cmd_train(args: argparse.Namespace, save_curve: CurveSaver) -> int:
    """``graphnorm train``: one run; prints its record without the long lists, which ``--out`` saves with the
    learning curve's figure (drawn by ``save_curve(history, config, path)``, the sweep report's figure, which this
    layer cannot import). Bad input, outputs that cannot be written and data that cannot be loaded are each one
    line, checked before training."""
    from graphnorm.train.ranks import DataParallelError, launched_ranks

    overrides = [*args.overrides, *tensorboard_override(args.tensorboard, "tensorboard_dir")]
    config = _load_run_config(Path(args.config), overrides)
    out = Path(args.out) if args.out else None
    try:
        writes = launched_ranks().writes  # under torchrun: rank 0 alone checks and writes the outputs
    except DataParallelError as e:
        raise CommandError(str(e)) from None
    if writes:
        if out is not None:  # before training: a run whose record cannot be saved is lost
            check_train_out(out, Path(args.config), config)
        check_tensorboard_dir(config.tensorboard_dir, "--tensorboard" if args.tensorboard else "tensorboard_dir")
        check_run_outputs(config)
    from graphnorm.train.distributed import barrier, process_group

    with process_group(config.device):
        if writes:
            load_run_data(config)
        barrier()  # the other ranks load the data once rank 0 has prepared it (processed files, caches)
        if not writes:
            load_run_data(config)
        record = _run(config)
    if not writes:
        return 0  # rank 0 prints and saves the record
    return _report(record, config, out, args, save_curve)


def _run(config: RunConfig) -> dict[str, Any]:
    """``train.run(config)``; errors of the run itself keep their traceback, but a dataset that cannot be found is the
    user's to provide, a run that diverged the user's to configure, a run that cannot train data-parallel the
    user's to launch otherwise: each one line."""
    from graphnorm import train
    from graphnorm.data import DatasetNotFoundError
    from graphnorm.train.ranks import DataParallelError
    from graphnorm.train.schedules import TrainingDivergedError

    try:
        return train.run(config)
    except (DatasetNotFoundError, TrainingDivergedError, DataParallelError) as e:
        raise CommandError(str(e)) from None


def _report(
    record: dict[str, Any], config: RunConfig, out: Path | None, args: argparse.Namespace, save_curve: CurveSaver
) -> int:
    """Print the record without its long lists, and save it with its learning curve with ``--out``."""
    from graphnorm.train.record import STEPS_KEY

    curve, failure = (None, None) if out is None else _save_record(record, config, out, save_curve)
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


def _save_record(
    record: dict[str, Any], config: RunConfig, out: Path, save_curve: CurveSaver
) -> tuple[Path | None, str | None]:
    """Write the record to ``out`` and its learning curve beside it: the curve's path (``None`` when none was
    written) and the failure to report once the record is printed (``None`` when all was saved)."""
    from graphnorm.files import atomic_write_text

    try:
        atomic_write_text(out, json.dumps(record, indent=1), f"--out {out}")
    except OSError as e:
        return None, f"the run finished, but its record cannot be written to {out}: {e.strerror or e}"
    if not record.get("history"):
        return None, None
    curve = learning_curve_path(out)
    try:
        save_curve(record["history"], config, curve)
    except OSError as e:
        failure = f"the record is saved to {out}, but its learning curve {curve} cannot be written: "
        return None, failure + str(e.strerror or e)
    return curve, None


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
