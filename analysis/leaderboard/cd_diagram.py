"""The critical-difference diagram of Demsar 2006 ("Statistical Comparisons of Classifiers over Multiple Data Sets",
JMLR 7:1-30, Section 3.2.2 and its Figures 1-2): the methods' average ranks on an axis (rank 1, the best, at the
left), the better half named on the left and the rest on the right, a thick bar joining each group of methods whose
ranks lie within Nemenyi's critical difference CD of one another (not significantly different), and the CD itself as
a bar above the axis. :func:`nemenyi_cliques` computes the groups (pure, tested on its own); :func:`cd_diagram` draws.
Average ranks: a mapping or Series norm -> rank, or :func:`statistics.average_ranks`' ``average`` table.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure

from graphnorm.files import save_figure

METADATA = {"svg": {"Date": None}, "png": {"Software": None}, "pdf": {"CreationDate": None}}  # same bytes each build
CLIQUE_STEP, LABEL_STEP = 0.3, 0.55  # vertical spacing (axis units) of the group bars and of the label rows


def ranks_in_order(avg_ranks: Mapping[str, float] | pd.Series | pd.DataFrame) -> list[tuple[str, float]]:
    """(name, average rank) pairs, best (lowest rank) first, equal ranks in name order; a DataFrame must have the
    columns ``norm`` and ``avg_rank``."""
    if isinstance(avg_ranks, pd.DataFrame):
        avg_ranks = dict(zip(avg_ranks["norm"], avg_ranks["avg_rank"]))
    pairs = [(str(name), float(rank)) for name, rank in dict(avg_ranks).items()]
    return sorted(pairs, key=lambda pair: (pair[1], pair[0]))


def nemenyi_cliques(avg_ranks: Mapping[str, float] | pd.Series | pd.DataFrame, cd: float) -> list[tuple[str, ...]]:
    """The maximal groups of two or more methods whose average ranks all differ by less than ``cd`` (Demsar 2006:
    two methods differ significantly when their ranks differ by at least CD), each a tuple of names best first, the
    groups in order of their best member. With ranks sorted, such a group is a run of neighbours, so each method
    opens the longest run it can and a run inside an earlier one is dropped. NaN ``cd``: no groups."""
    pairs = ranks_in_order(avg_ranks)
    cliques, reach = [], 0
    for start, (_, low) in enumerate(pairs):
        end = start
        while end + 1 < len(pairs) and pairs[end + 1][1] - low < cd:
            end += 1
        if end > start and end > reach:
            cliques.append(tuple(name for name, _ in pairs[start : end + 1]))
            reach = end
    return cliques


def cd_diagram(
    avg_ranks: Mapping[str, float] | pd.Series | pd.DataFrame, cd: float, path: str | os.PathLike, title: str = ""
) -> Path:
    """Draw the critical-difference diagram of ``avg_ranks`` with critical difference ``cd`` and save it to ``path``
    (.svg, .png or .pdf, through graphnorm.files.save_figure: an atomic write, the same bytes for the same input);
    the path written."""
    path = Path(path)
    form = path.suffix.lstrip(".").lower()
    if form not in METADATA:
        raise ValueError(f"{path}: a CD diagram is saved as .svg, .png or .pdf, not {path.suffix or 'no suffix'}")
    pairs = ranks_in_order(avg_ranks)
    if not pairs:
        raise ValueError("a CD diagram needs at least one average rank")
    cliques = nemenyi_cliques(avg_ranks, cd)
    highest = max(2, len(pairs), math.ceil(max(rank for _, rank in pairs)))
    first_row = 0.5 + CLIQUE_STEP * len(cliques)
    half = math.ceil(len(pairs) / 2)
    rows = max(half, len(pairs) - half)
    figure = Figure(figsize=(6.4, 1.2 + 0.28 * (rows + len(cliques))))
    axis = figure.add_axes((0, 0, 1, 1))
    axis.set_axis_off()
    margin = 0.12 * (highest - 1) + 0.3
    axis.set_xlim(1 - margin, highest + margin)
    axis.set_ylim(first_row + LABEL_STEP * rows, -1.3)
    draw_rank_axis(axis, highest, cd)
    for index, (name, rank) in enumerate(pairs):
        left = index < half
        row = first_row + LABEL_STEP * (index if left else len(pairs) - 1 - index)
        end = 1 - margin * 0.6 if left else highest + margin * 0.6
        axis.plot([rank, rank, end], [0, row, row], color="black", linewidth=0.8)
        axis.text(
            end,
            row,
            f"{name} ({rank:.2f}) " if left else f" ({rank:.2f}) {name}",
            ha="right" if left else "left",
            va="center",
            fontsize=9,
        )
    for number, clique in enumerate(cliques):
        ranks = [rank for name, rank in pairs if name in clique]
        y = 0.25 + CLIQUE_STEP * number
        axis.plot([min(ranks) - 0.03, max(ranks) + 0.03], [y, y], color="black", linewidth=3, solid_capstyle="butt")
    if title:
        axis.set_title(title, fontsize=10)
    with rc_context({"svg.hashsalt": "graphnorm-cd-diagram"}):
        save_figure(figure, path, "the CD diagram", dpi=120, bbox_inches="tight", metadata=METADATA[form])
    return path


def draw_rank_axis(axis, highest: int, cd: float) -> None:
    """The rank axis from 1 to ``highest`` at y = 0 (ticks at whole and half ranks, numbers above) and the CD bar
    above it, starting at rank 1 (none where ``cd`` is not a finite number)."""
    axis.plot([1, highest], [0, 0], color="black", linewidth=1)
    for tick in range(2 * highest - 1):
        rank = 1 + tick / 2
        whole = tick % 2 == 0
        axis.plot([rank, rank], [0, -0.18 if whole else -0.1], color="black", linewidth=0.8)
        if whole:
            axis.text(rank, -0.25, f"{rank:g}", ha="center", va="bottom", fontsize=9)
    if math.isfinite(cd):
        axis.plot([1, 1 + cd], [-0.95, -0.95], color="black", linewidth=1)
        for end in (1, 1 + cd):
            axis.plot([end, end], [-0.87, -1.03], color="black", linewidth=1)
        axis.text(1 + cd / 2, -1.05, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=9)
