"""The leaderboard's CPU budget: per part, the CPU-hours estimated before running (:mod:`.estimate`, from the
committed timings) beside those spent so far, tuning and grid apart, and the runs ended of those planned. Written
by ``run`` as ``<tier>_budget.csv`` from the sweep folders (tuning runs are not in the tidy table), read by the page.
A run's CPU seconds are its process's, one torch thread (:mod:`.timed`); a failed run records none."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from graphnorm.config import config_run_id
from graphnorm.sweep.grid import expand_grid
from graphnorm.sweep.results import load_results

from .estimate import estimate
from .protocol import Protocol, setting_name, tuning_sweep

BUDGET_COLUMNS = ["part", "estimated_cpu_h", "spent_tuning_cpu_h", "spent_grid_cpu_h", "spent_cpu_h", "runs_ended",
                  "runs_planned"]  # fmt: skip


def tuning_cpu_hours(protocol: Protocol, root: Path, tuned: dict[tuple[str, str, str], list[str]]) -> dict[str, float]:
    """Per part, the recorded CPU-hours of the tuning runs found under ``root / "tune"``; ``tuned``: the norms tuned
    per (part, host, graph)."""
    spent: dict[str, float] = {}
    for part, host, graph in protocol.settings():
        for norm in tuned.get((part.name, host, graph.name), []):
            out = Path(root) / "tune" / f"{setting_name(part, host, graph)}_{norm}"
            if not out.is_dir():
                continue
            ids = [config_run_id(c) for c in expand_grid(tuning_sweep(protocol, part, host, graph, norm), log=None)]
            seconds = [(r.get("record") or {}).get("cpu_s") for r in load_results(out, ids).values()]
            spent[part.name] = spent.get(part.name, 0.0) + sum(s for s in seconds if isinstance(s, (int, float)))
    return {name: seconds / 3600 for name, seconds in spent.items()}


def budget_table(protocol: Protocol, runs: pd.DataFrame, tuning_h: dict[str, float], timings: pd.DataFrame | None):
    """One row per part (:data:`BUDGET_COLUMNS`): estimated (NaN without timings) and spent CPU-hours, runs ended
    (ok or failed) of the grid's planned runs (those a host cannot run are not planned)."""
    try:
        estimated = estimate(protocol, timings).groupby("part")["cpu_h"].sum() if timings is not None else pd.Series()
    except ValueError:  # timings of another protocol: some setting was never timed
        estimated = pd.Series()
    rows = []
    for name in protocol.parts:
        mine = runs[(runs["part"] == name) & (runs["status"] != "cannot run")]
        grid_h = float(pd.to_numeric(mine.loc[mine["status"] == "ok", "cpu_s"], errors="coerce").sum()) / 3600
        tuning = tuning_h.get(name, 0.0)
        rows.append({"part": name, "estimated_cpu_h": float(estimated.get(name, math.nan)),
                     "spent_tuning_cpu_h": tuning, "spent_grid_cpu_h": grid_h, "spent_cpu_h": tuning + grid_h,
                     "runs_ended": int(mine["status"].isin(["ok", "failed"]).sum()),
                     "runs_planned": len(mine)})  # fmt: skip
    return pd.DataFrame(rows, columns=BUDGET_COLUMNS)
