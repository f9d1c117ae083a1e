"""The leaderboard's tidy table, one row per run (like timm's results CSVs), read from a tier's grid sweep folders:
the statistics' columns (``family, graph, host, depth, norm, seed, metric, value, higher_is_better``), the last
probed layer's ``effective_rank, cone_angle, dirichlet_energy``, then what the page shows beside them: ``status``
(ok, failed, not run, cannot run) with its ``reason``, the validation value, the run's CPU seconds (one torch
thread; its wall seconds where the record has no CPU time) and CPU kind (:mod:`.timed`), its keywords and id. A
norm the host cannot run keeps one row per would-be run, with the reason.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from graphnorm.config import config_run_id
from graphnorm.files import check_output_dir
from graphnorm.sweep.grid import expand_grid
from graphnorm.sweep.results import load_results
from graphnorm.sweep.tables import atomic_write_csv

from .protocol import Graph, Part, Protocol, grid_sweep, metric_of, runnable_norms, setting_config, setting_name

RUN_COLUMNS = ["family", "graph", "host", "depth", "norm", "seed", "metric", "value", "higher_is_better"]
COLLAPSE_COLUMNS = ["effective_rank", "cone_angle", "dirichlet_energy"]
EXTRA_COLUMNS = ["status", "reason", "val_value", "cpu_s", "cpu", "epochs_run", "norm_kwargs", "variant", "part",
                 "run_id"]  # fmt: skip
COLUMNS = [*RUN_COLUMNS, *COLLAPSE_COLUMNS, *EXTRA_COLUMNS]
FORMULA_GUARD = r"^'(?=[=+\-@\t\r])"  # the quote csv_safe puts before a cell a spreadsheet would run
STAT_ORDER = ("value", "mean")  # node level: one value per layer; graph level: the mean over the probed graphs


def last_layer(layers: list[dict[str, Any]]) -> dict[str, float]:
    """The collapse metrics of the deepest probed layer (node rows): ``{metric: value}``, NaN where not probed."""
    rows = [r for r in layers if r.get("rows", "node") == "node" and r.get("metric") in COLLAPSE_COLUMNS]
    rows = [r for r in rows if r.get("stat", "value") in STAT_ORDER and isinstance(r.get("layer"), int)]
    if not rows:
        return dict.fromkeys(COLLAPSE_COLUMNS, math.nan)
    deepest = max(r["layer"] for r in rows)
    found: dict[str, float] = {}
    for stat in reversed(STAT_ORDER):  # "value" wins where both are present
        for r in rows:
            if r["layer"] == deepest and r.get("stat", "value") == stat and isinstance(r["value"], (int, float)):
                found[r["metric"]] = float(r["value"])
    return {metric: found.get(metric, math.nan) for metric in COLLAPSE_COLUMNS}


def variant(norm: str, norm_kwargs: dict[str, Any]) -> str:
    """How a norm's form departs from its reference one (ContraNorm with random features), else ''."""
    if norm == "contranorm" and norm_kwargs.get("random_features"):
        return f"random features ({norm_kwargs['random_features']})"
    return ""


def run_row(graph: Graph, host: str, part: Part, config: Any, result: dict[str, Any] | None) -> dict[str, Any]:
    """The tidy row of one grid run, from its result (``None``: not run yet)."""
    metric, val_metric, higher = metric_of(graph)
    record = (result or {}).get("record") or {}
    status = "not run" if result is None else result["status"]
    reason = "" if status == "ok" else "not run yet" if result is None else str(result.get("error") or "failed")
    value = record.get(metric) if status == "ok" else None
    row = {
        "family": graph.family, "graph": graph.name, "host": host, "depth": config.num_layers, "norm": config.norm,
        "seed": getattr(config, graph.replicate_key), "metric": metric,
        "value": float(value) if isinstance(value, (int, float)) else math.nan, "higher_is_better": higher,
        **last_layer((result or {}).get("layers") or []),
        "status": status, "reason": " ".join(reason.split()), "val_value": record.get(val_metric, math.nan),
        "cpu_s": record.get("cpu_s", (result or {}).get("elapsed_s")), "cpu": record.get("cpu", ""),
        "epochs_run": record.get("epochs_run"),
        "norm_kwargs": json.dumps(config.norm_kwargs, sort_keys=True),
        "variant": variant(config.norm, config.norm_kwargs),
        "part": part.name, "run_id": config_run_id(config),
    }  # fmt: skip
    return row


def cannot_run_rows(graph: Graph, host: str, part: Part, norm: str, reason: str) -> list[dict[str, Any]]:
    """One row per would-be run of a norm the host cannot run, carrying the reason."""
    metric, _, higher = metric_of(graph)
    return [
        {"family": graph.family, "graph": graph.name, "host": host, "depth": depth, "norm": norm, "seed": seed,
         "metric": metric, "value": math.nan, "higher_is_better": higher, **dict.fromkeys(COLLAPSE_COLUMNS, math.nan),
         "status": "cannot run", "reason": reason, "part": part.name}
        for seed in graph.replicates
        for depth in sorted(part.depths, reverse=True)
        if seed in part.replicates_at(graph, depth)
    ]  # fmt: skip


def tidy_runs(
    protocol: Protocol, root: Path, knobs: pd.DataFrame, recorded: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Every run of the tier's grid (one row each, in grid order), from the sweep folders under ``root / "grid"``;
    a run they do not hold keeps its row in ``recorded`` (the committed table, :func:`read_runs`) where that row
    has ended with the same run id."""
    from .run import setting_kwargs

    ended = recorded_rows(recorded)
    rows: list[dict[str, Any]] = []
    for part, host, graph in protocol.settings():
        kwargs = setting_kwargs(protocol, part, host, graph, knobs)
        configs = expand_grid(grid_sweep(part, host, graph, list(kwargs), kwargs), log=None)
        out = Path(root) / "grid" / setting_name(part, host, graph)
        results = load_results(out, [config_run_id(c) for c in configs]) if out.is_dir() else {}
        for config in configs:
            run_id = config_run_id(config)
            found = results.get(run_id)
            rows.append(run_row(graph, host, part, config, found) if found or run_id not in ended else ended[run_id])
        for norm, reason in runnable_norms(setting_config(part, host, graph), protocol.norms)[1].items():
            rows += cannot_run_rows(graph, host, part, norm, reason)
    return pd.DataFrame(rows, columns=COLUMNS)


def recorded_rows(recorded: pd.DataFrame | None) -> dict[str, dict[str, Any]]:
    """run id -> its row in a committed table, for the runs that ended there (ok or failed)."""
    if recorded is None or recorded.empty:
        return {}
    ended = recorded[recorded["status"].isin(["ok", "failed"])]
    return {row["run_id"]: row for row in ended[COLUMNS].to_dict("records")}


def write_runs(frame: pd.DataFrame, folder: Path) -> list[Path]:
    """``frame`` (a :func:`tidy_runs` table) into ``folder`` as one CSV per (part, host), ``<part>_<host>.csv``,
    each written atomically, so that every file stays small enough to review; CSVs of ``folder`` the table no longer
    has are removed. Returns the files written."""
    folder = check_output_dir(folder, "the leaderboard's runs folder")
    written = []
    for (part, host), rows in frame.groupby(["part", "host"], sort=False):
        written.append(folder / f"{part}_{host}.csv")
        atomic_write_csv(written[-1], rows)
    for stale in set(folder.glob("*.csv")) - set(written):
        stale.unlink()
    return written


def read_runs(folder: Path) -> pd.DataFrame:
    """The tidy table :func:`write_runs` wrote into ``folder`` (text cells as written, numbers as numbers); an empty
    table with :data:`COLUMNS` where the folder holds none."""
    files = sorted(Path(folder).glob("*.csv"))
    if not files:
        return pd.DataFrame(columns=COLUMNS)
    frames = [pd.read_csv(path, keep_default_na=False, na_values=[""]) for path in files]
    frame = pd.concat(frames, ignore_index=True).reindex(columns=COLUMNS)  # rows from before ``cpu``: blank there
    for column in ("reason", "variant", "norm_kwargs", "status", "cpu"):
        text = frame[column].astype(object).where(frame[column].notna(), "").astype(str)
        frame[column] = text.str.replace(FORMULA_GUARD, "", regex=True)
    frame["higher_is_better"] = frame["higher_is_better"].astype(str).str.lower() == "true"
    return frame


def ok_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the statistics read: runs that finished (a failed run has no value; it is shown, not averaged)."""
    return frame[frame["status"] == "ok"].reset_index(drop=True)


def finished_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """The finished runs of every (graph, host, depth) whose runs have all ended (none ``not run``): while the grid
    is under way, its statistics compare norms only where every norm has all its seeds."""
    pending = frame.loc[frame["status"] == "not run", ["graph", "host", "depth"]].drop_duplicates()
    done = ok_runs(frame).merge(pending, on=["graph", "host", "depth"], how="left", indicator=True)
    return done[done["_merge"] == "left_only"].drop(columns="_merge").reset_index(drop=True)
