"""``graphnorm predict``: score a SMILES CSV, or a part of the run's own dataset, with a saved model, and print one
summary line.

The options are checked before any model loads, each mistake one line (a :class:`CommandError`). The parser is in
:mod:`graphnorm.cli`; the scoring itself is :mod:`graphnorm.predict`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from graphnorm.train.command_input import CommandError

if TYPE_CHECKING:
    from graphnorm.predict import SplitScores


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
