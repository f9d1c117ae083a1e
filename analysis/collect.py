"""Copy a finished sweep folder into small tidy tables under ``analysis/data/<study>/``, with its provenance.

Written per study: ``runs.csv`` (one row per ok run: the config keys that vary, the identity keys and every
recorded metric); ``layers.csv`` (the collapse metrics the page shows, :data:`LAYER_METRICS`, node and graph-token
rows, 6 significant digits); ``steps.csv`` when the sweep probed during training (the same, per step);
``sweep.yaml`` (the config as it ran, to rerun it); ``provenance.json`` (command, commit, date, machine, metric,
finished runs). A layer or step table over 1 MiB is written gzip-compressed (``layers.csv.gz``: the repository
keeps no file over 1 MiB); the page reads either form.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from validate import LARGEST_PLAIN_TABLE, check_runs, check_study_name, read_csv_file, read_table_or_empty

from graphnorm.escaping import csv_safe
from graphnorm.files import atomic_write, atomic_write_text, check_output_dir

LAYER_METRICS = ("effective_rank", "mean_cosine", "cone_angle", "cone_angle_q90")
STEP_KEYS = ("step", "epoch", "layer")  # what places a steps.csv row besides its run
IDENTITY_COLUMNS = ("run_id", "dataset", "model", "readout", "norm", "num_layers", "seed", "split")
RUN_METRIC_PREFIXES = ("val_", "test_", "train_")
RUN_METRIC_COLUMNS = (
    "majority_acc",
    "reference_accuracy",
    "num_eval_nodes",
    "best_epoch",
    "epochs_run",
    "num_params",
    "wall_time_s",
    "metric",
)
REPO = Path(__file__).resolve().parents[1]


def _git(*args: str, cwd: Path = REPO) -> str:
    """Output of ``git args`` in the repository ('' when git is unavailable)."""
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def expected_runs(sweep: dict[str, Any]) -> int:
    """Number of runs the sweep's grid defines (its validated expansion; the product of the grid's list lengths
    when the config no longer validates)."""
    try:
        from graphnorm.sweep import expand_grid

        return len(expand_grid(sweep, log=None))
    except (ValueError, TypeError, KeyError):
        grid = sweep.get("grid") or {}
        return math.prod(len(v) if isinstance(v, list) else 1 for v in grid.values())


def tidy_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok runs with identity keys, the config keys that vary, and the metric columns; each row keeps its index in
    ``runs`` (errors name the sweep's own lines)."""
    from graphnorm.config import RunConfig

    if "status" in runs.columns:
        runs = runs[runs["status"] == "ok"]
    config = [c for c in RunConfig.field_names() if c in runs.columns and c not in IDENTITY_COLUMNS]
    varying = [c for c in config if runs[c].astype(str).nunique() > 1]
    metrics = [
        c
        for c in runs.columns
        if c.startswith(RUN_METRIC_PREFIXES) or c in RUN_METRIC_COLUMNS or c.endswith("_last")
        if c not in config
    ]
    keep = [c for c in IDENTITY_COLUMNS if c in runs.columns] + varying + metrics
    return runs[list(dict.fromkeys(keep))]


def tidy_layers(layers: pd.DataFrame, run_ids: set[str], keys: tuple[str, ...] = ("layer",)) -> pd.DataFrame:
    """The page's collapse metrics of the ok runs: per-graph statistic, node and token rows, rounded. ``keys``: the
    columns that place a row besides its run (``("step", "epoch", "layer")`` for ``steps.csv``)."""
    if layers.empty:
        return layers
    table = layers[layers["run_id"].isin(run_ids) & layers["metric"].isin(LAYER_METRICS)]
    if "stat" in table.columns:
        table = table[table["stat"].isin(["value", "mean"]) | table["stat"].isna()]
    named = ("run_id", *keys, "layer_name", "rows", "metric", "stat", "value")
    table = table[[c for c in named if c in table.columns]].copy()
    table["value"] = table["value"].map(lambda v: float(f"{v:.6g}") if pd.notna(v) else v)
    order = ["run_id", *(key for key in keys if key != "epoch"), "rows", "metric"]
    return table.sort_values(order, kind="stable").reset_index(drop=True)


def write_table(table: pd.DataFrame, path: Path) -> None:
    """``table`` as the CSV ``path``, or as ``<path>.gz`` when its text is over
    :data:`~validate.LARGEST_PLAIN_TABLE` bytes (gzip without a timestamp: collecting again writes the same bytes);
    the other form is removed. A text cell a spreadsheet would run as a formula starts with ``'``
    (:func:`graphnorm.escaping.csv_safe`)."""
    text = csv_safe(table).to_csv(index=False).encode()
    compressed = path.with_name(path.name + ".gz")
    if len(text) > LARGEST_PLAIN_TABLE:
        atomic_write(compressed, lambda handle: handle.write(gzip.compress(text, mtime=0)))
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, lambda handle: handle.write(text))
        compressed.unlink(missing_ok=True)


def provenance(
    run_dir: Path, sweep: dict[str, Any], runs: pd.DataFrame, command: str | None, study: str, note: str | None
) -> dict:
    """Where the study's numbers come from: command, commit, date, machine, completeness."""
    written = datetime.fromtimestamp((run_dir / "runs.csv").stat().st_mtime, tz=timezone.utc)
    commit = _git("log", "-1", f"--before={written.isoformat()}", "--format=%h")
    ok = int((runs["status"] == "ok").sum()) if "status" in runs.columns else len(runs)
    expected = expected_runs(sweep)
    return {
        "study": study,
        "name": sweep.get("name", study),
        "command": command or f"graphnorm sweep analysis/data/{study}/sweep.yaml --out runs/{study}",
        "commit": commit or "unknown",
        "commit_note": "HEAD of the repository when runs.csv was last written (git log --before)",
        "date": written.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"runs on {_run_hosts(run_dir) or 'unrecorded hosts'}; collected on {_this_machine()}",
        "metric": sweep.get("metric"),
        "runs_ok": ok,
        "runs_failed": int(len(runs) - ok),
        "runs_expected": expected,
        "complete": ok >= expected,
        "source": str(run_dir),
        "note": note or "",
    }


def _run_hosts(run_dir: Path) -> str:
    """The hosts the runs' result files name (graphnorm sweep records each run's host), '' when none do."""
    hosts = set()
    for path in sorted((run_dir / "results").glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            host = json.loads(path.read_text()).get("host")
            if isinstance(host, str):
                hosts.add(host)
    return ", ".join(sorted(hosts))


def _this_machine() -> str:
    import os

    return f"{platform.node() or 'unknown host'} ({platform.machine()}, {os.cpu_count() or 1} CPUs)"


def collect_sweep(
    run_dir: str | Path, study: str, data_dir: str | Path, command: str | None = None, note: str | None = None
) -> Path:
    """Write the tidy tables and provenance of the sweep folder ``run_dir`` into ``data_dir/study``; the folder is
    only read. ``note`` (e.g. what part of a preset was run) is shown under the study. Returns the data folder."""
    run_dir = Path(run_dir)
    runs_path = run_dir / "runs.csv"
    if not runs_path.exists():
        raise FileNotFoundError(f"{runs_path} not found: --collect needs a sweep output folder with runs.csv")
    check_study_name(study, "--study")
    runs = read_csv_file(runs_path)
    sweep_path = run_dir / "sweep.yaml"
    sweep = yaml.safe_load(sweep_path.read_text()) if sweep_path.exists() else {}
    tidy = tidy_runs(runs)
    record = provenance(run_dir, sweep or {}, runs, command, study, note)
    if tidy.empty:
        raise ValueError(f"{runs_path} holds no finished (status ok) runs: nothing to collect")
    check_runs(tidy, runs_path, record, runs_path)  # the study must build a true page before it is written
    out = check_output_dir(Path(data_dir) / study, f"study {study}'s folder")
    atomic_write_text(out / "runs.csv", csv_safe(tidy).to_csv(index=False, float_format="%.6g"))
    write_table(tidy_layers(read_table_or_empty(run_dir / "layers.csv"), set(tidy["run_id"])), out / "layers.csv")
    steps = read_table_or_empty(run_dir / "steps.csv")
    if not steps.empty:
        write_table(tidy_layers(steps, set(tidy["run_id"]), STEP_KEYS), out / "steps.csv")
    if sweep_path.exists():
        atomic_write(out / "sweep.yaml", lambda handle: handle.write(sweep_path.read_bytes()))
    atomic_write_text(out / "provenance.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
    return out
