"""Read a study's files and check that the page built from them can tell the truth.

Every error is a ``ValueError`` of one line naming the file (and the line and column of a bad cell). ``runs.csv``
must hold one row per finished run (as many as ``provenance.json`` says, none twice) with the columns the page reads
and a finite number in every metric cell. Names (a study's, and every run's norm, model and dataset) must match
:data:`graphnorm.checks.NAME_PATTERN`; other text from the data is shown as written
(:func:`graphnorm.escaping.markdown_text`); ``notes.md`` and the questions' texts stay Markdown without raw HTML or
script links (:func:`graphnorm.escaping.markdown_prose`), since the pages are published on the documentation site.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import warnings
from pathlib import Path

import pandas as pd

from graphnorm.checks import NAME_PATTERN, check_name, is_name
from graphnorm.sweep.tables import DEFAULT_METRICS

REQUIRED_RUN_COLUMNS = ("run_id", "norm", "num_layers", "seed")
NAME_COLUMNS = ("norm", "model", "dataset")  # registered names: they become headings, labels and file names
PROVENANCE_KEYS = ("command", "commit", "date", "machine", "source", "runs_ok", "runs_expected")
NOT_A_RUN_KEY = ("val_", "test_", "train_", "majority_", "reference_")  # metric columns: not what tells two runs apart
RUN_RECORD_COLUMNS = {"num_eval_nodes", "best_epoch", "epochs_run", "num_params", "wall_time_s"}  # nor are these
# A collected table over this many bytes is stored gzip-compressed (<name>.csv.gz): the repository holds no file over
# 1 MiB. Readers take either form (stored_table).
LARGEST_PLAIN_TABLE = 1 << 20
RECOLLECT = "collect the sweep again (python analysis/build.py --collect RUN_DIR --study NAME)"


def one_line(text: object) -> str:
    """``text`` with its line breaks and runs of spaces folded into single spaces."""
    return " ".join(str(text).split())


def stored_table(path: Path) -> Path:
    """``path`` (``<name>.csv``) or, when only that exists, its compressed form ``<name>.csv.gz``."""
    compressed = path.with_name(path.name + ".gz")
    return compressed if compressed.exists() and not path.exists() else path


def read_table_or_empty(path: Path) -> pd.DataFrame:
    """A table of a sweep or study (``path`` or its ``.gz`` form), empty when the file is absent or holds no more
    than a line break."""
    path = stored_table(path)
    return read_csv_file(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()


def read_csv_file(path: Path, **kwargs) -> pd.DataFrame:
    """``path`` read as a UTF-8 CSV (gzip-compressed when it ends in ``.gz``; never with its first column taken as an
    index); a file that is empty, not
    UTF-8, names a column twice, or whose rows hold more cells than its header is a ``ValueError`` naming it."""
    try:
        _check_header(path)
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(path, index_col=False, **kwargs)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path} is empty (not even a header line): {RECOLLECT}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({one_line(error)}): save it as UTF-8") from None
    except (pd.errors.ParserError, pd.errors.ParserWarning) as error:
        raise ValueError(f"{path} is not a well-formed CSV: {one_line(error)}") from None
    except OSError as error:
        raise ValueError(f"{path} cannot be read: {one_line(error)}") from None


def _check_header(path: Path) -> None:
    """No column named twice in the header (pandas would rename the second one and read the first)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as file:
        header = next(csv.reader(file), [])
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise ValueError(f"{path} names the column(s) {', '.join(repeated)} twice in its header")


def read_json_file(path: Path) -> dict:
    """``path`` read as a JSON object; anything else is a ``ValueError`` naming it."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} cannot be read as JSON: {one_line(error)}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(record).__name__}")
    return record


def check_provenance(record: dict, path: Path) -> None:
    """The keys the page shows are present and the run counts are whole numbers."""
    missing = [key for key in PROVENANCE_KEYS if key not in record]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: {RECOLLECT}")
    for key in ("runs_ok", "runs_expected"):
        if isinstance(record[key], bool) or not isinstance(record[key], int) or record[key] < 0:
            raise ValueError(f"{path}: {key} must be a whole number >= 0, got {record[key]!r}")


def _cell(path: Path, row: int, column: str) -> str:
    """Where a cell is: the file, the row (``row``: the table's index, as read from the file; 1 = first run) and
    its line in the file, the column."""
    return f"{path} row {row + 1} (line {row + 2}), column {column}"


def _numbers(runs: pd.DataFrame, column: str, path: Path, blank_ok: bool = False) -> pd.Series:
    """``runs[column]`` as floats; a blank (unless ``blank_ok``: NaN), non-numeric or non-finite cell is an error."""
    numbers = []
    for row, value in runs[column].items():
        if pd.isna(value) or (isinstance(value, str) and not value.strip()):
            if not blank_ok:
                raise ValueError(f"{_cell(path, row, column)} is blank: every finished run records it")
            numbers.append(math.nan)
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{_cell(path, row, column)}: {value!r} is not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"{_cell(path, row, column)}: {value!r} is not a finite number")
        numbers.append(number)
    return pd.Series(numbers, index=runs.index, dtype=float)


def check_study_name(name: str, where: Path | str) -> None:
    """A study's name (``where``: its folder or file) fits :data:`graphnorm.checks.NAME_PATTERN`: it is the heading,
    the anchor and the name ``questions.yaml`` lists."""
    check_name(name, f"{where}: study name")


def _check_identity(runs: pd.DataFrame, path: Path) -> None:
    """Run, norm and dataset named in every row, norm, model and dataset names that fit the pattern; depth a whole
    number >= 1 and seed a whole number (both set to integers in ``runs``)."""
    for column in ("run_id", "norm", "dataset"):
        if column in runs.columns:
            blank = runs[column].isna() | (runs[column].astype(str).str.strip() == "")
            if blank.any():
                raise ValueError(f"{_cell(path, int(blank.idxmax()), column)} is blank")
    for column in [c for c in NAME_COLUMNS if c in runs.columns]:
        for row, value in runs[column].items():
            if not is_name(value):
                raise ValueError(
                    f"{_cell(path, row, column)}: {one_line(repr(value))} is not a name (names match {NAME_PATTERN}: "
                    "a lower-case letter, then a-z, 0-9, _)"
                )
    for column, least in (("num_layers", 1), ("seed", None)):
        numbers = _numbers(runs, column, path)
        for row, number in numbers.items():
            if number != int(number) or (least is not None and number < least):
                floor = f" >= {least}" if least is not None else ""
                raise ValueError(f"{_cell(path, row, column)}: {runs[column][row]!r} is not a whole number{floor}")
        runs[column] = numbers.astype(int)


def _check_duplicates(runs: pd.DataFrame, path: Path) -> None:
    """No run twice: neither the same run_id nor the same settings (every column but the run's id and metrics)."""
    keys = [c for c in runs.columns if c != "run_id" and not c.startswith(NOT_A_RUN_KEY) and not c.endswith("_last")]
    keys = [c for c in keys if c not in RUN_RECORD_COLUMNS]
    text = runs.astype(str)
    for columns, what in ((["run_id"], "the same run_id"), (keys, "the same settings")):
        repeated = text.duplicated(columns)
        if repeated.any():
            second = repeated.idxmax()
            first = (text[columns] == text.loc[second, columns]).all(axis=1).idxmax()
            raise ValueError(
                f"{path} holds one run twice: lines {first + 2} and {second + 2} have {what} "
                f"({runs.loc[second, 'run_id']}); a duplicated row would show as n=2, ± 0: {RECOLLECT}"
            )


def study_metrics(runs: pd.DataFrame, metric: str | None, path: Path) -> list[str]:
    """The metric columns the page shows: ``metric`` (the sweep's own) when given, else per dataset the first task
    metric with values (as the page picks it); an error when it is missing."""
    if metric is not None:
        if metric not in runs.columns:
            raise ValueError(f"{path} has no column {metric!r}, the study's metric (provenance.json): {RECOLLECT}")
        return [metric]
    datasets = runs.groupby(runs["dataset"].astype(str)) if "dataset" in runs.columns else [("data", runs)]
    shown = []
    for dataset, rows in datasets:
        found = [name for name in DEFAULT_METRICS if name in rows.columns and rows[name].notna().any()]
        if not found:
            raise ValueError(f"{path} has none of the task metrics {', '.join(DEFAULT_METRICS)} for {dataset}")
        shown.append(found[0])
    return sorted(set(shown))


def check_runs(runs: pd.DataFrame, path: Path, record: dict, record_path: Path) -> pd.DataFrame:
    """A study's ``runs.csv`` holds the finished runs its provenance counts, each once, with the columns the page
    reads, whole depths and seeds, and a finite metric in every row; ``ValueError`` naming the file otherwise.
    Returns ``runs`` with those columns as numbers (a cell written " 0.8" or "8e-1" reads as 0.8)."""
    runs = runs.copy()
    if runs.empty:
        raise ValueError(f"{path} holds no runs (header only), but {record_path} says {record['runs_ok']} finished")
    missing = [c for c in REQUIRED_RUN_COLUMNS if c not in runs.columns]
    if missing:
        raise ValueError(f"{path} lacks the column(s) {', '.join(missing)} that the page reads: {RECOLLECT}")
    _check_identity(runs, path)
    for metric in study_metrics(runs, record.get("metric"), path):
        runs[metric] = _numbers(runs, metric, path)
    for column in [c for c in runs.columns if c.startswith("majority_")]:
        runs[column] = _numbers(runs, column, path, blank_ok=True)
    _check_duplicates(runs, path)
    if len(runs) != record["runs_ok"]:
        raise ValueError(
            f"{path} holds {len(runs)} runs but {record_path} says {record['runs_ok']} finished: "
            f"the table was edited after collecting; {RECOLLECT}"
        )
    return runs
