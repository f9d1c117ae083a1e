"""A sweep run's results file, ``results/<run_id>.json``: its layout, checked in one place, and reading it back.

The results files are a sweep's only source of truth (the CSVs are regenerated from them, and a run with a valid
file is not run again), so a file that does not hold what a run writes (``null``, ``{}``, a truncated write, a
hand edit, another run's file) must never count as a result: :func:`result_problem` says what is wrong with it,
and :func:`load_results` reports such a file by name and leaves its run to be executed again.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphnorm.files import node_kind

STATUSES = ("ok", "failed")
REQUIRED = ("run_id", "status", "config", "record")


def check_layers(layers: Any) -> None:
    """A run record's ``layers``: a list of dicts, each with ``layer``, ``metric`` and ``value``."""
    if not isinstance(layers, list) or not all(isinstance(row, dict) for row in layers):
        raise TypeError(f"record['layers'] must be a list of dicts, got {type(layers).__name__}")
    for row in layers:
        missing = [k for k in ("layer", "metric", "value") if k not in row]
        if missing:
            raise ValueError(f"record['layers'] row {row} lacks {missing}")


def check_history(history: Any) -> None:
    """A run record's ``history``: a list of dicts with an ``epoch`` key, one per epoch."""
    if not isinstance(history, list) or not all(isinstance(row, dict) and "epoch" in row for row in history):
        raise TypeError("record['history'] must be a list of dicts with an 'epoch' key (one per epoch)")


def result_problem(result: Any, run_id: str) -> str | None:
    """What makes ``result`` (a parsed results file of ``run_id``) invalid, in a few words; ``None`` if valid.

    The layout, as :func:`graphnorm.sweep.runner.execute_run` writes it (the record's keys:
    :mod:`graphnorm.train.record`)::

        {"run_id": str (the file's name), "status": "ok" | "failed", "config": {RunConfig keys},
         "record": {metric: value}, "layers": [{"layer", "metric", "value", ...}], "history": [{"epoch", ...}],
         "error": str | null, "traceback": str | null, "elapsed_s": number | null, "finished_at": str, ...}

    ``layers``, ``history``, ``error``, ``elapsed_s`` may be absent (files of older versions lack ``history``).
    """
    if not isinstance(result, dict):
        return f"not a JSON object but {type(result).__name__}"
    missing = [key for key in REQUIRED if key not in result]
    if missing:
        return f"lacks {', '.join(missing)}"
    if result["run_id"] != run_id:
        return f"run_id {result['run_id']!r} is not the file's {run_id!r}"
    if result["status"] not in STATUSES:
        return f"status {result['status']!r} is not one of {', '.join(STATUSES)}"
    for key in ("config", "record"):
        if not isinstance(result[key], dict):
            return f"{key} is a {type(result[key]).__name__}, not a mapping"
    try:
        check_layers(result.get("layers", []))
        check_history(result.get("history", []))
    except (TypeError, ValueError) as e:
        return str(e).replace("record['layers']", "layers").replace("record['history']", "history")
    error = result.get("error")
    if not (error is None or isinstance(error, str)) or (result["status"] == "failed" and not error):
        return f"error must be a message for a failed run, got {error!r}"
    elapsed = result.get("elapsed_s")
    if elapsed is not None and (isinstance(elapsed, bool) or not isinstance(elapsed, (int, float))):
        return f"elapsed_s must be a number, got {elapsed!r}"
    return None


def read_result(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(result, None)`` for a valid results file, ``(None, what is wrong)`` otherwise. Only a regular file is
    read (a FIFO would block the reader)."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            return None, f"it is {node_kind(mode)}, not a regular file"
        result = json.loads(Path(path).read_text())
    except OSError as e:
        return None, f"cannot be read ({e.strerror or e})"
    except ValueError as e:  # JSONDecodeError, and UnicodeDecodeError for binary garbage
        return None, f"not valid JSON ({e})"
    problem = result_problem(result, Path(path).stem)
    return (None, problem) if problem else (result, None)


def _warn(message: str) -> None:
    """The default warning of :func:`load_results`: one line on stderr."""
    print(message, file=sys.stderr)


def load_results(out_dir: Path, run_ids: list[str], warn: Callable[[str], None] = _warn) -> dict[str, dict[str, Any]]:
    """The valid results files of ``run_ids`` in ``out_dir/results``; each invalid one is reported in one line
    naming the file and left out, so its run is executed again."""
    results: dict[str, dict[str, Any]] = {}
    for run_id in run_ids:
        path = Path(out_dir) / "results" / f"{run_id}.json"
        if not path.exists():
            continue
        result, problem = read_result(path)
        if result is None:
            warn(f"warning: results file {path} is invalid: {problem}; its run will be executed again")
        else:
            results[run_id] = result
    return results
