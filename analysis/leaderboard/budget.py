"""The leaderboard's CPU budget: per part, the CPU-hours estimated before running (:mod:`.estimate`, from the
committed timings) beside those spent so far, tuning and grid apart, and the runs ended of those planned. Written
by ``run`` as ``<tier>_budget.csv`` from the knob table (each combination's tuning CPU) and the tidy table, read by
the page. A run's CPU seconds are its process's, one torch thread (:mod:`.timed`); a failed run records none.
Tuning recorded before the knob table kept its CPU seconds is carried as a part's total
(``unitemized_tuning_cpu_h``), from one budget file to the next."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .estimate import estimate
from .protocol import Protocol

BUDGET_COLUMNS = ["part", "estimated_cpu_h", "spent_tuning_cpu_h", "spent_grid_cpu_h", "spent_cpu_h", "runs_ended",
                  "runs_planned", "unitemized_tuning_cpu_h"]  # fmt: skip


def read_budget(path: Path) -> pd.DataFrame | None:
    """An earlier ``<tier>_budget.csv``, ``None`` where there is none. A file from before the knob table kept each
    combination's CPU seconds has no ``unitemized_tuning_cpu_h``: its tuning total is that."""
    if not Path(path).exists():
        return None
    budget = pd.read_csv(path)
    if "unitemized_tuning_cpu_h" not in budget:
        budget["unitemized_tuning_cpu_h"] = budget["spent_tuning_cpu_h"]
    return budget


def budget_table(
    protocol: Protocol,
    runs: pd.DataFrame,
    knobs: pd.DataFrame,
    timings: pd.DataFrame | None,
    earlier: pd.DataFrame | None,
) -> pd.DataFrame:
    """One row per part (:data:`BUDGET_COLUMNS`): estimated (NaN without timings) and spent CPU-hours, runs ended
    (ok or failed) of the grid's planned runs (those a host cannot run are not planned). Tuning: the knob table's
    CPU seconds plus the part's unitemized tuning in the ``earlier`` budget."""
    try:
        estimated = estimate(protocol, timings).groupby("part")["cpu_h"].sum() if timings is not None else pd.Series()
    except ValueError:  # timings of another protocol: some setting was never timed
        estimated = pd.Series()
    itemized = pd.to_numeric(knobs["cpu_s"], errors="coerce").groupby(knobs["part"]).sum() / 3600
    carried = earlier.set_index("part")["unitemized_tuning_cpu_h"] if earlier is not None else pd.Series()
    rows = []
    for name in protocol.parts:
        mine = runs[(runs["part"] == name) & (runs["status"] != "cannot run")]
        grid_h = float(pd.to_numeric(mine.loc[mine["status"] == "ok", "cpu_s"], errors="coerce").sum()) / 3600
        unitemized = float(carried.get(name, 0.0))
        tuning = float(itemized.get(name, 0.0)) + unitemized
        rows.append({"part": name, "estimated_cpu_h": float(estimated.get(name, math.nan)),
                     "spent_tuning_cpu_h": tuning, "spent_grid_cpu_h": grid_h, "spent_cpu_h": tuning + grid_h,
                     "runs_ended": int(mine["status"].isin(["ok", "failed"]).sum()),
                     "runs_planned": len(mine), "unitemized_tuning_cpu_h": unitemized})  # fmt: skip
    return pd.DataFrame(rows, columns=BUDGET_COLUMNS)
