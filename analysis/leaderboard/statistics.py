"""The leaderboard's statistics (Demsar 2006, "Statistical Comparisons of Classifiers over Multiple Data Sets", JMLR
7:1-30): pure functions over a tidy table of runs, one row per run, with the columns of :data:`RUN_COLUMNS`
(``family, graph, host, depth, norm, seed, metric, value, higher_is_better``) and, optionally, the last layer's
collapse metrics of :data:`COLLAPSE_COLUMNS` (``effective_rank, cone_angle, dirichlet_energy``). A NaN ``value`` is a
run without a result: it counts in no mean. A cell is one (graph, host, depth, norm); seeds pair across norms by
``seed``. ``higher_is_better`` is False for errors (ZINC's MAE): every comparison below reads it.

cell_summary: mean, std, Student-t 95% CI per cell. best_per_cell: the best norm of each (graph, host, depth) and
whether a paired t-test over common seeds separates it from the runner-up. average_ranks: Friedman ranks per depth,
the Friedman and Iman-Davenport tests, Nemenyi's critical difference. collapse_predicts_accuracy: Spearman's rho between
each collapse metric and the accuracy lost with depth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

RUN_COLUMNS = ("family", "graph", "host", "depth", "norm", "seed", "metric", "value", "higher_is_better")
COLLAPSE_COLUMNS = ("effective_rank", "cone_angle", "dirichlet_energy")
CELL_KEYS = ["family", "graph", "host", "depth", "norm", "metric"]
GROUP_KEYS = ["family", "graph", "host", "depth", "metric"]  # the cells that compete: every norm of one setting
BLOCK_KEYS = ["family", "graph", "host", "metric"]  # Demsar's "data set": one block of the Friedman test
ALPHA = 0.05


def check_runs(runs: pd.DataFrame) -> None:
    """ValueError unless ``runs`` has every column of :data:`RUN_COLUMNS`, a cell's keys in every row, one row per
    (cell, seed) and one ``higher_is_better`` per (graph, metric)."""
    missing = [column for column in RUN_COLUMNS if column not in runs.columns]
    if missing:
        raise ValueError(f"runs lack the columns {missing} (expected {list(RUN_COLUMNS)})")
    unnamed = [column for column in CELL_KEYS if runs[column].isna().any()]
    if unnamed:
        raise ValueError(f"runs leave {unnamed} empty in some rows: every run names its cell")
    duplicated = runs.duplicated([*CELL_KEYS, "seed"])
    if duplicated.any():
        first = runs.loc[duplicated, [*CELL_KEYS, "seed"]].iloc[0].to_dict()
        raise ValueError(f"runs hold {int(duplicated.sum())} repeated (cell, seed) rows, e.g. {first}")
    directions = runs.groupby(["graph", "metric"])["higher_is_better"].nunique()
    if (directions > 1).any():
        raise ValueError(f"higher_is_better differs within (graph, metric) {list(directions[directions > 1].index)}")


def t_half_width(std: pd.Series, n: pd.Series, level: float = 0.95) -> pd.Series:
    """The half-width of the two-sided Student-t confidence interval of a mean, ``t_{(1+level)/2, n-1} std / sqrt(n)``
    (``std`` with ddof 1); NaN where n < 2, for one seed has no spread to estimate."""
    n = n.astype(float)
    df = n.where(n >= 2) - 1
    quantile = pd.Series(stats.t.ppf((1 + level) / 2, df.fillna(1.0)), index=n.index).where(df.notna())
    return quantile * std / np.sqrt(n.where(n >= 2))


def cell_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (family, graph, host, depth, norm, metric): ``higher_is_better``; ``n`` the seeds with a
    value; ``mean``; ``std`` (ddof 1, NaN for one seed); ``ci95`` the half-width of the 95% Student-t interval
    (scipy.stats.t, n - 1 degrees of freedom; NaN for one seed, never a zero that would claim certainty); and the
    mean of each collapse column present. A cell whose runs all lack a value keeps its row with n = 0."""
    check_runs(runs)
    grouped = runs.groupby(CELL_KEYS, sort=True)
    summary = grouped["value"].agg(n="count", mean="mean", std="std")
    summary.insert(0, "higher_is_better", grouped["higher_is_better"].first().astype(bool))
    summary["ci95"] = t_half_width(summary["std"], summary["n"])
    for column in COLLAPSE_COLUMNS:
        if column in runs.columns:
            summary[column] = grouped[column].mean()
    return summary.reset_index()


def ordered_by_merit(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` (rows of :func:`cell_summary` of one group) with a mean, best first; equal means in norm order."""
    higher = bool(cells["higher_is_better"].iloc[0])
    cells = cells[cells["mean"].notna()]
    return cells.sort_values(["mean", "norm"], ascending=[not higher, True], kind="mergesort")


def paired_t_test(best: pd.Series, other: pd.Series, higher_is_better: bool) -> tuple[int, float, float]:
    """(pairs, t, two-sided p) of scipy.stats.ttest_rel over the seeds both Series (value by seed) hold, ``t`` > 0
    when ``best`` is the better. Fewer than two pairs: (n, NaN, NaN). Differences equal in every pair (discrete
    accuracies do this): no spread, so t is 0 with p = 1 for zero differences, else +-inf with p = 0."""
    common = best.dropna().index.intersection(other.dropna().index).sort_values()
    sign = 1.0 if higher_is_better else -1.0
    a, b = sign * best[common].to_numpy(float), sign * other[common].to_numpy(float)
    if len(common) < 2:
        return len(common), math.nan, math.nan
    difference = a - b
    if np.ptp(difference) <= 1e-12 * max(1.0, float(np.abs(difference).max())):
        mean = float(difference.mean())
        return (len(common), 0.0, 1.0) if abs(mean) <= 1e-12 else (len(common), math.copysign(math.inf, mean), 0.0)
    result = stats.ttest_rel(a, b)
    return len(common), float(result.statistic), float(result.pvalue)


BEST_COLUMNS = [
    *GROUP_KEYS,
    "higher_is_better",
    "best",
    "best_mean",
    "runner_up",
    "runner_up_mean",
    "n_pairs",
    "t",
    "p",
    "separated",
    "note",
]


def best_per_cell(runs: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Per (family, graph, host, depth, metric): the norm with the best mean (``best``), the ``runner_up`` and a
    paired t-test (scipy.stats.ttest_rel) of the two over the seeds both ran (seed ids pair the runs; a seed one of
    them lacks is left out). ``separated`` is True only where p < ``alpha`` and the best is also the better on the
    common seeds (t > 0); ``note`` says why not: "tie" (equal means: ``best`` is then the first name), "one norm",
    "under 2 common seeds", "not separated", "runner-up better on common seeds".

    Why not Wilcoxon's signed-rank test (Demsar 2006, Section 3.1.3): its exact two-sided p is at least 2 / 2^n, so
    with 5 seeds never below 0.0625; it could never separate two norms at 0.05. The t-test assumes normal
    differences, which 5 seeds cannot check; it is the usual choice for few paired seeds."""
    summary = cell_summary(runs)
    values = {key: cell.set_index("seed")["value"] for key, cell in runs.groupby(CELL_KEYS, sort=False)}
    rows = []
    for key, cells in summary.groupby(GROUP_KEYS, sort=True):
        row = dict(zip(GROUP_KEYS, key))
        row.update(compare_best(ordered_by_merit(cells), values, alpha))
        rows.append(row)
    return pd.DataFrame(rows, columns=BEST_COLUMNS)


def compare_best(ordered: pd.DataFrame, values: dict[tuple, pd.Series], alpha: float) -> dict:
    """The columns of :func:`best_per_cell` after the group's keys, for ``ordered`` (its cells, best first)."""
    higher = bool(ordered["higher_is_better"].iloc[0]) if len(ordered) else True
    row = {"higher_is_better": higher, "best": None, "best_mean": math.nan, "runner_up": None}
    row.update({"runner_up_mean": math.nan, "n_pairs": 0, "t": math.nan, "p": math.nan, "separated": False})
    if len(ordered) == 0:
        return {**row, "note": "no norm with a value"}
    best = ordered.iloc[0]
    row.update(best=best["norm"], best_mean=float(best["mean"]))
    if len(ordered) == 1:
        return {**row, "note": "one norm"}
    runner = ordered.iloc[1]
    row.update(runner_up=runner["norm"], runner_up_mean=float(runner["mean"]))
    pairs, t, p = paired_t_test(values[cell_key(best)], values[cell_key(runner)], higher)
    row.update(n_pairs=pairs, t=t, p=p)
    if runner["mean"] == best["mean"]:
        note = "tie"
    elif pairs < 2:
        note = "under 2 common seeds"
    elif p < alpha and t > 0:
        return {**row, "separated": True, "note": ""}
    else:
        note = "runner-up better on common seeds" if p < alpha else "not separated"
    return {**row, "note": note}


def cell_key(cell: pd.Series) -> tuple:
    """The key of a summary row in ``runs.groupby(CELL_KEYS)``."""
    return tuple(cell[key] for key in CELL_KEYS)


def nemenyi_q(k: int, alpha: float = ALPHA) -> float:
    """Nemenyi's critical value q_alpha for ``k`` methods: the studentized range's (1 - alpha) quantile with infinite
    degrees of freedom over sqrt(2) (Demsar 2006, Table 5: 1.960, 2.343, 2.569, 2.728 for k = 2..5 at 0.05)."""
    if k < 2:
        return math.nan
    return float(stats.studentized_range.ppf(1 - alpha, k, math.inf)) / math.sqrt(2)


def nemenyi_cd(k: int, n: int, alpha: float = ALPHA) -> float:
    """Nemenyi's critical difference CD = q_alpha sqrt(k (k + 1) / (6 N)) for ``k`` methods ranked on ``n`` data sets
    (Demsar 2006, Section 3.2.2): two average ranks differing by at least CD differ significantly."""
    if k < 2 or n < 1:
        return math.nan
    return nemenyi_q(k, alpha) * math.sqrt(k * (k + 1) / (6 * n))


def iman_davenport(chi2: float, k: int, n: int) -> tuple[float, float]:
    """(F_F, p): Iman and Davenport's F_F = (N - 1) chi2_F / (N (k - 1) - chi2_F), F-distributed with k - 1 and
    (k - 1)(N - 1) degrees of freedom (Demsar 2006, Section 3.2.2); inf with p = 0 where every block ranks alike."""
    if not (k >= 2 and n >= 2) or math.isnan(chi2):
        return math.nan, math.nan
    denominator = n * (k - 1) - chi2
    if denominator <= 0:
        return math.inf, 0.0
    ff = (n - 1) * chi2 / denominator
    return ff, float(stats.f.sf(ff, k - 1, (k - 1) * (n - 1)))


def friedman_from_ranks(average: Sequence[float], n: int) -> tuple[float, float, float, float]:
    """(chi2_F, p, F_F, p_F) from the average ranks of k methods over ``n`` data sets by Demsar 2006's formula
    chi2_F = 12 N / (k (k + 1)) (sum R_j^2 - k (k + 1)^2 / 4), without the tie correction scipy applies."""
    ranks = np.asarray(average, dtype=float)
    k = len(ranks)
    if k < 2 or n < 2:
        return math.nan, math.nan, math.nan, math.nan
    chi2 = 12 * n / (k * (k + 1)) * (float(np.sum(ranks**2)) - k * (k + 1) ** 2 / 4)
    return (chi2, float(stats.chi2.sf(chi2, k - 1)), *iman_davenport(chi2, k, n))


def friedman(matrix: np.ndarray | None) -> tuple[float, float]:
    """(chi2_F, p) of scipy.stats.friedmanchisquare over ``matrix`` (rows: data sets, columns: methods; larger is
    better), corrected for ties (equal to Demsar's formula without ties). NaN for under 3 methods or 2 data sets
    (scipy's bounds); 0 with p = 1 where every row is all ties (the tie correction would divide by zero)."""
    n, k = matrix.shape if matrix is not None else (0, 0)
    if k < 3 or n < 2:
        return math.nan, math.nan
    if all(np.ptp(row) == 0 for row in matrix):
        return 0.0, 1.0
    result = stats.friedmanchisquare(*matrix.T)
    return float(result.statistic), float(result.pvalue)


@dataclass(frozen=True)
class RankResult:
    """:func:`average_ranks` at one ``depth``: ``ranks`` (one row per block and norm: its keys, ``norm``, ``mean``,
    ``rank``), ``average`` (``norm``, ``avg_rank``, best first), ``k`` norms over ``n`` blocks, Friedman's ``chi2``
    and ``p`` (tie-corrected), Iman-Davenport's ``ff`` and ``p_ff``, Nemenyi's ``cd`` at ``alpha``, and the norms
    ``dropped`` for missing a block."""

    depth: int
    ranks: pd.DataFrame
    average: pd.DataFrame
    k: int
    n: int
    chi2: float
    p: float
    ff: float
    p_ff: float
    cd: float
    alpha: float = ALPHA
    dropped: tuple[str, ...] = field(default_factory=tuple)


def average_ranks(summary: pd.DataFrame, depth: int, alpha: float = ALPHA) -> RankResult:
    """Rank the norms of :func:`cell_summary` at ``depth`` in every block (Demsar's data set: one graph, host and
    metric) by mean, 1 the best, ties sharing their average rank (Demsar 2006, Section 3.2.2), then average the
    ranks. The Friedman test needs complete blocks: a norm without a mean in every block is dropped (listed in
    ``dropped``) rather than a block, so that one norm that cannot run on one graph costs its own ranking only.
    Filter ``summary`` first (a host, a family) to rank within it."""
    everyone = summary[summary["depth"] == depth]
    at = everyone[everyone["mean"].notna()]
    n = at.groupby(BLOCK_KEYS).ngroups
    blocks_of_norm = at.groupby("norm").size()  # a (block, norm) pair at one depth is one cell: at most one row
    kept = sorted(blocks_of_norm.index[blocks_of_norm == n])
    dropped = tuple(sorted(set(everyone["norm"]) - set(kept)))
    ranks = rank_blocks(at[at["norm"].isin(kept)])
    average = ranks.groupby("norm")["rank"].mean().rename("avg_rank").reset_index()
    average = average.sort_values(["avg_rank", "norm"], kind="mergesort", ignore_index=True)
    k, n = len(kept), n if kept else 0
    matrix = -ranks.pivot_table(index=BLOCK_KEYS, columns="norm", values="rank").to_numpy(float) if k else None
    chi2, p = friedman(matrix)
    ff, p_ff = iman_davenport(chi2, k, n)
    return RankResult(depth, ranks, average, k, n, chi2, p, ff, p_ff, nemenyi_cd(k, n, alpha), alpha, dropped)


def ranks_by_depth(summary: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """:func:`average_ranks` at every depth of ``summary`` as one tidy table, one row per (depth, norm): ``avg_rank``
    and the depth's ``k``, ``n``, ``chi2``, ``p``, ``ff``, ``p_ff``, ``cd`` (repeated on its rows); a dropped norm
    keeps a row with a NaN rank, so that a table or heat map can say it missed a block."""
    columns = ["depth", "norm", "avg_rank", "k", "n", "chi2", "p", "ff", "p_ff", "cd"]
    tables = []
    for depth in sorted(summary["depth"].unique()):
        result = average_ranks(summary, int(depth), alpha)
        dropped = pd.DataFrame({"norm": list(result.dropped), "avg_rank": math.nan})
        table = pd.concat([result.average, dropped], ignore_index=True) if result.dropped else result.average
        tests = {name: getattr(result, name) for name in columns[3:]}
        tables.append(table.assign(depth=result.depth, **tests)[columns])
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=columns)


def rank_blocks(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` (summary rows with a mean) ranked within each block, 1 the best mean, ties averaged: the columns
    of the block's keys, ``norm``, ``mean``, ``rank``."""
    columns = [*BLOCK_KEYS, "norm", "mean", "rank"]
    ranked = []
    for _, block in cells.groupby(BLOCK_KEYS, sort=True):
        block = block.sort_values("norm")
        sign = 1.0 if bool(block["higher_is_better"].iloc[0]) else -1.0
        ranked.append(block.assign(rank=stats.rankdata(-sign * block["mean"].to_numpy(float), method="average")))
    return pd.concat(ranked, ignore_index=True)[columns] if ranked else pd.DataFrame(columns=columns)


def depth_drops(runs: pd.DataFrame) -> pd.DataFrame:
    """Per cell deeper than its setting's shallowest: the summary row plus ``shallowest`` (the smallest depth with a
    mean of that family, graph, host, norm and metric) and ``drop``, the metric lost from there to this depth,
    signed so that a loss is positive for either direction (accuracy: mean there - mean here; MAE: here - there)."""
    summary = cell_summary(runs)
    summary = summary[summary["mean"].notna()]
    setting = ["family", "graph", "host", "norm", "metric"]
    shallowest = summary.groupby(setting)["depth"].transform("min")
    first = summary[summary["depth"] == shallowest].set_index(setting)["mean"].rename("shallow_mean")
    deeper = summary[summary["depth"] > shallowest].join(first, on=setting)
    sign = np.where(deeper["higher_is_better"], 1.0, -1.0)
    deeper = deeper.assign(shallowest=shallowest[deeper.index], drop=sign * (deeper["shallow_mean"] - deeper["mean"]))
    return deeper.drop(columns="shallow_mean").reset_index(drop=True)


def collapse_predicts_accuracy(runs: pd.DataFrame, by: str | Sequence[str] | None = None) -> pd.DataFrame:
    """Which last-layer collapse metric best predicts the metric lost with depth: Spearman's rho
    (scipy.stats.spearmanr) between each collapse column's cell mean at depth L and the cell's ``drop`` from the
    shallowest depth (:func:`depth_drops`), over every cell deeper than its shallowest (the shallowest cells' drop is
    0 by definition, so they are left out). Rank correlation, for the metrics span orders of magnitude (Dirichlet
    energy) and the drop need only move monotonically with them. A collapsed layer (low effective rank) should lose
    more, so a good predictor's rho is strongly negative for the effective rank. One row per collapse column (and
    per group of ``by``, e.g. "family": ZINC's MAE then stays apart from accuracies): ``rho``, ``p``, ``n`` the
    cells with both numbers, ``best`` True for the largest |rho| of its group. Under 3 cells or a constant column:
    NaN."""
    keys = [by] if isinstance(by, str) else list(by or [])
    drops = depth_drops(runs)
    present = [column for column in COLLAPSE_COLUMNS if column in drops.columns]
    rows = []
    for key, group in drops.groupby(keys, sort=True) if keys else [((), drops)]:
        for column in present:
            rho, p, n = spearman(group[column], group["drop"])
            rows.append({**dict(zip(keys, key)), "collapse_metric": column, "rho": rho, "p": p, "n": n})
    table = pd.DataFrame(rows, columns=[*keys, "collapse_metric", "rho", "p", "n"])
    strength = table["rho"].abs()
    top = strength.groupby([table[key] for key in keys]).transform("max") if keys else strength.max()
    table["best"] = strength.notna() & (strength == top)
    return table


def spearman(x: pd.Series, y: pd.Series) -> tuple[float, float, int]:
    """(rho, p, n) of scipy.stats.spearmanr over the rows where both are numbers; NaN under 3 rows or where either
    side is constant (no ranking to correlate)."""
    both = pd.concat([x, y], axis=1).dropna()
    n = len(both)
    if n < 3 or both.iloc[:, 0].nunique() < 2 or both.iloc[:, 1].nunique() < 2:
        return math.nan, math.nan, n
    result = stats.spearmanr(both.iloc[:, 0], both.iloc[:, 1])
    return float(result.statistic), float(result.pvalue), n
