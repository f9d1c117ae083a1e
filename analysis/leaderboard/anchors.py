"""The leaderboard held against published numbers (``experiments/leaderboard/anchors.yaml``): per anchor, our cell's
mean and 95% interval over seeds beside the paper's number, and whether the number lies inside our interval. An
anchor without a number (its table could not be read in a source) keeps its row and says why; so does one whose
cell is still under way or not in the tier shown."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from graphnorm.files import load_yaml_file

from .protocol import REPO
from .statistics import cell_summary

ANCHORS = REPO / "experiments" / "leaderboard" / "anchors.yaml"
CELL_KEYS = ("host", "graph", "depth", "norm")
ANCHOR_COLUMNS = ["paper", "source", "host", "graph", "depth", "norm", "published", "mean", "ci95", "n", "verdict",
                  "differences"]  # fmt: skip


def load_anchors(path: Path = ANCHORS) -> list[dict[str, Any]]:
    """The anchors of ``path``; ``ValueError`` naming the first one without a paper, source or host/graph/norm."""
    raw = load_yaml_file(Path(path), "leaderboard anchors")
    anchors = (raw or {}).get("anchors") if isinstance(raw, dict) else None
    if not isinstance(anchors, list):
        raise ValueError(f"{path}: needs a list 'anchors'")
    for i, anchor in enumerate(anchors):
        cell = anchor.get("cell") if isinstance(anchor, dict) else None
        if not isinstance(cell, dict) or not {"host", "graph", "norm"} <= set(cell) or not anchor.get("source"):
            raise ValueError(f"{path}: anchors[{i}] needs paper, source and a cell with host, graph and norm")
    return anchors


def verdict(published: float | None, mean: float, ci95: float, n: int, state: str = "finished") -> str:
    """Whether ``published`` lies inside our interval ``mean ± ci95``, in words; ``state``: the cell is
    ``finished``, ``under way`` or ``absent`` from the tier's grid."""
    if published is None:
        return "no published number read"
    if state == "absent":
        return "not in this tier's grid"
    if state == "under way" or n == 0:
        return "our cell has not finished yet"
    if n < 2 or math.isnan(ci95):
        return f"one seed only: ours {mean:.3f}, no interval"
    if abs(published - mean) <= ci95:
        return "inside our interval"
    gap, side = abs(published - mean), "above" if published > mean else "below"
    return f"outside our interval ({gap:.3f} {side} our mean, {gap - ci95:.3f} beyond the interval's end)"


def anchor_rows(runs: pd.DataFrame, anchors: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per anchor: the statistics of our cell (from the tidy ``runs``, once none of its runs waits to run)
    and the verdict."""
    rows = []
    for anchor in anchors:
        cell = anchor["cell"]
        depth = cell.get("depth")
        mine = runs[(runs["host"] == cell["host"]) & (runs["graph"] == cell["graph"]) & (runs["norm"] == cell["norm"])
                    & (runs["depth"] == depth)]  # fmt: skip
        state = "absent" if mine.empty else "under way" if (mine["status"] == "not run").any() else "finished"
        done = mine[mine["status"] == "ok"] if state == "finished" else mine.iloc[:0]
        summary = cell_summary(done) if len(done) else None
        mean = float(summary["mean"].iloc[0]) if summary is not None else math.nan
        ci95 = float(summary["ci95"].iloc[0]) if summary is not None else math.nan
        n = int(summary["n"].iloc[0]) if summary is not None else 0
        published = anchor.get("published")
        rows.append({"paper": anchor["paper"], "source": anchor["source"], **{k: cell.get(k) for k in CELL_KEYS},
                     "published": published, "mean": mean, "ci95": ci95, "n": n,
                     "verdict": verdict(published, mean, ci95, n, state),
                     "differences": anchor.get("differences", "")})  # fmt: skip
    return pd.DataFrame(rows, columns=ANCHOR_COLUMNS)
