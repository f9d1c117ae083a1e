"""The leaderboard's statistics (analysis/leaderboard/statistics.py, cd_diagram.py) against textbook and hand-computed
numbers: Demsar 2006's Nemenyi critical values (Table 5) and worked example (Table 6: four C4.5 variants on 14 data
sets), Student-t intervals, paired t-tests over common seeds, ties, missing seeds, lower-is-better metrics, and the
Spearman correlation of collapse metrics with the accuracy lost over depth."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
if str(ANALYSIS) not in sys.path:  # the leaderboard sits under analysis/, which is not a package
    sys.path.insert(0, str(ANALYSIS))

from leaderboard.cd_diagram import cd_diagram, nemenyi_cliques  # noqa: E402
from leaderboard.statistics import (  # noqa: E402
    average_ranks,
    best_per_cell,
    cell_summary,
    collapse_predicts_accuracy,
    depth_drops,
    friedman,
    friedman_from_ranks,
    nemenyi_cd,
    nemenyi_q,
    ranks_by_depth,
)

# Demsar 2006, Table 6: the ranks of C4.5, C4.5+m, C4.5+cf, C4.5+m+cf (AUC) on 14 data sets, ties averaged.
DEMSAR_METHODS = ["C4.5", "C4.5+m", "C4.5+cf", "C4.5+m+cf"]
DEMSAR_RANKS = [
    [4, 3, 2, 1],
    [1, 2, 3, 4],
    [4, 1, 2, 3],
    [4, 1, 3, 2],
    [4, 2, 3, 1],
    [1, 2.5, 4, 2.5],
    [3, 2, 4, 1],
    [2.5, 2.5, 4, 1],
    [4, 3, 2, 1],
    [2.5, 2.5, 2.5, 2.5],
    [4, 2.5, 1, 2.5],
    [3, 2, 4, 1],
    [4, 1, 2, 3],
    [3, 1, 4, 2],
]
DEMSAR_AVERAGE = {"C4.5": 3.143, "C4.5+m": 2.000, "C4.5+cf": 2.893, "C4.5+m+cf": 1.964}


def runs_table(values: dict[tuple, list[float] | dict[int, float]], **columns) -> pd.DataFrame:
    """Tidy runs: ``values`` maps (graph, depth, norm) to its values by seed (a list: seeds 0, 1, ...)."""
    rows = []
    for (graph, depth, norm), by_seed in values.items():
        items = by_seed.items() if isinstance(by_seed, dict) else enumerate(by_seed)
        for seed, value in items:
            rows.append({"graph": graph, "depth": depth, "norm": norm, "seed": seed, "value": value})
    table = pd.DataFrame(rows)
    table.insert(0, "family", columns.pop("family", "homophilic"))
    table.insert(2, "host", columns.pop("host", "deepgcn"))
    table["metric"] = columns.pop("metric", "test_acc")
    table["higher_is_better"] = columns.pop("higher_is_better", True)
    return table.assign(**columns)


def demsar_summary() -> pd.DataFrame:
    """Demsar's Table 6 as a cell summary at depth 8: one graph per data set, mean = 5 - rank (higher is better)."""
    rows = [
        {"family": "f", "graph": f"set{i:02d}", "host": "h", "depth": 8, "norm": method, "metric": "auc"}
        | {"higher_is_better": True, "n": 1, "mean": 5.0 - rank}
        for i, ranks in enumerate(DEMSAR_RANKS)
        for method, rank in zip(DEMSAR_METHODS, ranks)
    ]
    return pd.DataFrame(rows)


# --- Nemenyi's critical values and difference ---


@pytest.mark.parametrize(("k", "q"), [(2, 1.960), (3, 2.343), (4, 2.569), (5, 2.728), (10, 3.164)])
def test_nemenyi_q_matches_demsar_table_5(k: int, q: float) -> None:
    assert nemenyi_q(k) == pytest.approx(q, abs=1e-3)


def test_nemenyi_q_at_alpha_010_and_the_worked_example_cd() -> None:
    assert nemenyi_q(4, alpha=0.10) == pytest.approx(2.291, abs=1e-3)  # Table 5, alpha = 0.10
    assert nemenyi_cd(4, 14) == pytest.approx(1.25, abs=5e-3)  # Demsar's worked example: CD = 2.569 sqrt(20/84)
    assert nemenyi_cd(4, 14, alpha=0.10) == pytest.approx(1.12, abs=5e-3)
    assert math.isnan(nemenyi_cd(1, 14)) and math.isnan(nemenyi_q(1))


# --- Friedman ranks: Demsar's worked example ---


def test_average_ranks_reproduce_demsar_table_6() -> None:
    result = average_ranks(demsar_summary(), depth=8)
    assert (result.k, result.n, result.dropped) == (4, 14, ())
    ranks = dict(zip(result.average["norm"], result.average["avg_rank"]))
    assert ranks == pytest.approx(DEMSAR_AVERAGE, abs=5e-4)
    assert list(result.average["norm"]) == ["C4.5+m+cf", "C4.5+m", "C4.5+cf", "C4.5"]  # best first
    assert result.cd == pytest.approx(1.25, abs=5e-3)
    # Demsar's chi2_F = 9.28 and F_F = 3.69 use no tie correction; scipy's statistic divides by
    # 1 - sum(t^3 - t) / (N k (k^2 - 1)) = 1 - (3 * 6 + 60) / 840 over the three tied pairs and the four-way tie.
    chi2, p, ff, p_ff = friedman_from_ranks(list(ranks.values()), 14)
    assert chi2 == pytest.approx(9.28, abs=5e-3) and ff == pytest.approx(3.69, abs=5e-3)
    assert p_ff < 0.05  # F(3, 39) at 0.05 is 2.85: the methods differ (Demsar's conclusion)
    assert result.chi2 == pytest.approx(9.2786 / (1 - 78 / 840), abs=1e-3)
    assert result.ff == pytest.approx(13 * result.chi2 / (42 - result.chi2), rel=1e-12)


def test_scipy_friedman_equals_demsars_formula_without_ties() -> None:
    matrix = np.array([[0.9, 0.8, 0.7], [0.6, 0.9, 0.5], [0.8, 0.7, 0.6], [0.5, 0.4, 0.9]])
    ranks = stats.rankdata(-matrix, axis=1).mean(axis=0)
    assert ranks == pytest.approx([1.5, 2.0, 2.5])  # rank sums 6, 8, 10
    chi2, p = friedman(matrix)
    assert (chi2, p) == pytest.approx(friedman_from_ranks(ranks, 4)[:2], rel=1e-12)
    assert chi2 == pytest.approx(12 * 4 / (3 * 4) * (1.5**2 + 2**2 + 2.5**2 - 3 * 16 / 4))  # = 2
    assert friedman(np.ones((4, 3))) == (0.0, 1.0)  # all ties: no evidence, and no division by zero
    assert all(math.isnan(value) for value in friedman(matrix[:, :2]))  # two methods: scipy's bound


def test_average_ranks_ties_direction_and_missing_norms() -> None:
    summary = pd.DataFrame(
        [
            ("g1", "a", 0.80, True),
            ("g1", "b", 0.80, True),
            ("g1", "c", 0.70, True),
            ("g1", "d", 0.95, True),
            ("zinc", "a", 0.30, False),  # MAE: the lowest is the best
            ("zinc", "b", 0.50, False),
            ("zinc", "c", 0.40, False),
        ],
        columns=["graph", "norm", "mean", "higher_is_better"],
    ).assign(family="f", host="h", depth=4, metric="m", n=3)
    result = average_ranks(summary, depth=4)
    assert result.dropped == ("d",)  # no mean on zinc: dropped, the two blocks kept
    ranks = result.ranks.set_index(["graph", "norm"])["rank"]
    assert ranks[("g1", "a")] == ranks[("g1", "b")] == 1.5 and ranks[("g1", "c")] == 3
    assert [ranks[("zinc", norm)] for norm in "abc"] == [1, 3, 2]
    assert dict(zip(result.average["norm"], result.average["avg_rank"])) == {"a": 1.25, "b": 2.25, "c": 2.5}
    assert (result.k, result.n) == (3, 2)
    empty = average_ranks(summary, depth=64)
    assert (empty.k, empty.n, len(empty.average)) == (0, 0, 0) and math.isnan(empty.cd)


def test_ranks_by_depth_is_one_tidy_table() -> None:
    demsar = demsar_summary()
    summary = pd.concat([demsar, demsar.assign(depth=2, mean=demsar["mean"].where(demsar["norm"] != "C4.5"))])
    table = ranks_by_depth(summary)
    assert list(table.columns) == ["depth", "norm", "avg_rank", "k", "n", "chi2", "p", "ff", "p_ff", "cd"]
    at_8 = table[table["depth"] == 8].set_index("norm")
    assert at_8["avg_rank"].to_dict() == pytest.approx(DEMSAR_AVERAGE, abs=5e-4)
    assert set(at_8["cd"]) == {average_ranks(demsar, 8).cd}
    at_2 = table[table["depth"] == 2].set_index("norm")
    assert math.isnan(at_2.loc["C4.5", "avg_rank"]) and set(at_2["k"]) == {3}  # C4.5 lacks every mean at depth 2


# --- cell summary ---


def test_cell_summary_mean_std_and_student_t_interval() -> None:
    runs = runs_table({("g", 2, "a"): [0.80, 0.82, 0.84], ("g", 2, "b"): [0.5], ("g", 2, "c"): [0.6, math.nan, 0.7]})
    summary = cell_summary(runs).set_index("norm")
    assert summary.loc["a", "n"] == 3 and summary.loc["a", "mean"] == pytest.approx(0.82)
    assert summary.loc["a", "std"] == pytest.approx(0.02)
    assert summary.loc["a", "ci95"] == pytest.approx(4.302653 * 0.02 / math.sqrt(3), rel=1e-6)  # t(0.975, 2)
    assert summary.loc["b", "n"] == 1 and math.isnan(summary.loc["b", "std"]) and math.isnan(summary.loc["b", "ci95"])
    assert summary.loc["c", "n"] == 2  # a run without a value counts in no mean
    assert summary.loc["c", "ci95"] == pytest.approx(12.706205 * math.sqrt(0.005) / math.sqrt(2), rel=1e-6)


def test_runs_are_checked() -> None:
    runs = runs_table({("g", 2, "a"): [0.8, 0.9]})
    with pytest.raises(ValueError, match="lack the columns"):
        cell_summary(runs.drop(columns="seed"))
    with pytest.raises(ValueError, match="empty"):
        cell_summary(runs.assign(host=[None, "deepgcn"]))
    with pytest.raises(ValueError, match="repeated"):
        cell_summary(pd.concat([runs, runs.iloc[:1]]))
    mixed = runs.assign(higher_is_better=[True, False])
    with pytest.raises(ValueError, match="higher_is_better"):
        cell_summary(mixed)


def test_cell_summary_averages_the_collapse_columns() -> None:
    runs = runs_table({("g", 2, "a"): [0.8, 0.9]}, effective_rank=[10.0, 20.0])
    assert cell_summary(runs)["effective_rank"].tolist() == [15.0]
    assert "cone_angle" not in cell_summary(runs).columns


# --- best norm per cell: paired t-test over seeds ---


def best_row(runs: pd.DataFrame) -> pd.Series:
    table = best_per_cell(runs)
    assert len(table) == 1
    return table.iloc[0]


def test_best_is_separated_by_a_paired_t_test() -> None:
    a = [0.80, 0.82, 0.84, 0.81, 0.83]
    b = [x - d for x, d in zip(a, [0.02, 0.03, 0.01, 0.02, 0.02])]
    row = best_row(runs_table({("g", 16, "a"): a, ("g", 16, "b"): b, ("g", 16, "c"): [0.3] * 5}))
    assert (row["best"], row["runner_up"], row["n_pairs"]) == ("a", "b", 5)
    # differences 0.02, 0.03, 0.01, 0.02, 0.02: mean 0.02, sd sqrt(0.0002 / 4), t = 0.02 / (sd / sqrt 5) = 2 sqrt 10
    assert row["t"] == pytest.approx(2 * math.sqrt(10), rel=1e-6)
    assert row["p"] == pytest.approx(2 * stats.t.sf(2 * math.sqrt(10), 4), rel=1e-6) and row["p"] < 0.05
    assert bool(row["separated"]) and row["note"] == ""


def test_wilcoxon_could_never_separate_five_seeds() -> None:
    """Why the paired t-test: with 5 pairs, Wilcoxon's smallest two-sided p is 2 / 2^5 = 0.0625 > 0.05."""
    assert stats.wilcoxon([0.01, 0.02, 0.03, 0.04, 0.05]).pvalue == pytest.approx(0.0625)


def test_close_norms_are_not_separated() -> None:
    a, b = [0.80, 0.70, 0.85, 0.75, 0.81], [0.78, 0.74, 0.80, 0.77, 0.80]
    row = best_row(runs_table({("g", 16, "a"): a, ("g", 16, "b"): b}))
    assert row["best"] == "a" and not row["separated"] and row["note"] == "not separated"
    assert row["p"] == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-12) and row["p"] > 0.05


def test_only_common_seeds_are_paired() -> None:
    a = {0: 0.90, 1: 0.80, 2: 0.82, 3: 0.84, 4: 0.81}  # mean 0.834
    b = {1: 0.78, 2: 0.79, 3: 0.83, 4: 0.80, 5: 0.70}  # mean 0.78; a's seed 0 and b's seed 5 have no partner
    row = best_row(runs_table({("g", 16, "a"): a, ("g", 16, "b"): b}))
    assert row["best_mean"] == pytest.approx(0.834) and row["runner_up_mean"] == pytest.approx(0.78)
    assert row["n_pairs"] == 4
    # seeds 1-4: differences 0.02, 0.03, 0.01, 0.01, mean 0.0175, sd sqrt(0.000275 / 3), t = 0.0175 / (sd / 2)
    assert row["t"] == pytest.approx(0.0175 / (math.sqrt(0.000275 / 3) / 2), rel=1e-6)
    assert row["t"] == pytest.approx(3.6556, abs=1e-4)


def test_best_by_mean_can_lose_on_the_common_seeds() -> None:
    a = {0: 0.99, 1: 0.50, 2: 0.51, 3: 0.52, 4: 0.53}  # best mean thanks to a seed b lacks
    b = {1: 0.55, 2: 0.57, 3: 0.56, 4: 0.58}
    row = best_row(runs_table({("g", 16, "a"): a, ("g", 16, "b"): b}))
    assert row["best"] == "a" and row["t"] < 0 and row["p"] < 0.05
    assert not row["separated"] and row["note"] == "runner-up better on common seeds"


def test_lower_is_better_metric() -> None:
    mae = runs_table(
        {("zinc", 8, "a"): [0.30, 0.32, 0.31], ("zinc", 8, "b"): [0.50, 0.55, 0.52]},
        family="molecular",
        metric="test_mae",
        higher_is_better=False,
    )
    row = best_row(mae)
    assert (row["best"], row["runner_up"], bool(row["higher_is_better"])) == ("a", "b", False)
    assert row["t"] > 0 and bool(row["separated"])  # t is signed so that > 0 favours the best


def test_ties_single_norms_and_too_few_pairs() -> None:
    tie = best_row(runs_table({("g", 64, "b"): [0.3, 0.3, 0.3], ("g", 64, "a"): [0.3, 0.3, 0.3]}))
    assert (tie["best"], tie["runner_up"], tie["note"], bool(tie["separated"])) == ("a", "b", "tie", False)
    assert (tie["t"], tie["p"]) == (0.0, 1.0)  # equal in every pair: no division by a zero spread
    alone = best_row(runs_table({("g", 64, "a"): [0.3, 0.4]}))
    assert alone["note"] == "one norm" and alone["runner_up"] is None and not alone["separated"]
    single = best_row(runs_table({("g", 64, "a"): [0.9], ("g", 64, "b"): [0.5]}))
    assert single["note"] == "under 2 common seeds" and math.isnan(single["p"]) and not single["separated"]


def test_equal_differences_in_every_pair_separate() -> None:
    """Discrete accuracies can differ by the same step on every seed: t is infinite, p is 0."""
    row = best_row(runs_table({("g", 4, "a"): [0.6, 0.7, 0.8], ("g", 4, "b"): [0.5, 0.6, 0.7]}))
    assert row["t"] == math.inf and row["p"] == 0.0 and bool(row["separated"])


def test_one_row_per_graph_host_depth() -> None:
    runs = pd.concat(
        [
            runs_table({("g", 2, "a"): [0.8, 0.9], ("g", 4, "a"): [0.7, 0.6]}),
            runs_table({("g", 2, "a"): [0.5, 0.6]}, host="gcnii"),
        ]
    )
    table = best_per_cell(runs)
    assert list(zip(table["host"], table["depth"])) == [("deepgcn", 2), ("deepgcn", 4), ("gcnii", 2)]


# --- collapse metrics against the accuracy lost with depth ---


def collapse_runs() -> pd.DataFrame:
    """4 norms at depths 2 and 8 (one seed): accuracy 0.8 at depth 2; at 8, drops 0.1 to 0.4, effective rank 40 down
    to 10 (a perfect negative ranking), cone angle 1, 3, 2, 4 and a constant Dirichlet energy."""
    values = {("g", 2, norm): [0.8] for norm in "abcd"} | {
        ("g", 8, n): [0.8 - d] for n, d in zip("abcd", (0.1, 0.2, 0.3, 0.4))
    }
    runs = runs_table(values)
    deep = runs["depth"] == 8
    runs.loc[deep, "effective_rank"] = [40.0, 30.0, 20.0, 10.0]
    runs.loc[deep, "cone_angle"] = [1.0, 3.0, 2.0, 4.0]
    runs.loc[deep, "dirichlet_energy"] = 0.5
    return runs


def test_depth_drops_are_signed_by_direction() -> None:
    drops = depth_drops(collapse_runs()).set_index("norm")
    assert drops["drop"].to_dict() == pytest.approx({"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4})
    assert set(drops["shallowest"]) == {2} and set(drops["depth"]) == {8}
    mae = runs_table({("zinc", 2, "a"): [0.3], ("zinc", 8, "a"): [0.5]}, metric="mae", higher_is_better=False)
    assert depth_drops(mae)["drop"].tolist() == pytest.approx([0.2])  # MAE rose by 0.2: a loss, so positive


def test_collapse_predicts_accuracy_by_spearman() -> None:
    table = collapse_predicts_accuracy(collapse_runs()).set_index("collapse_metric")
    assert table.loc["effective_rank", "rho"] == pytest.approx(-1.0)
    # cone angle ranks 1, 3, 2, 4 against drop ranks 1, 2, 3, 4: rho = 1 - 6 (0 + 1 + 1 + 0) / (4 (16 - 1)) = 0.8
    assert table.loc["cone_angle", "rho"] == pytest.approx(0.8)
    assert math.isnan(table.loc["dirichlet_energy", "rho"])  # constant: no ranking
    assert table["n"].tolist() == [4, 4, 4]
    assert table.index[table["best"]].tolist() == ["effective_rank"]
    assert table.loc["cone_angle", "p"] == pytest.approx(stats.spearmanr([1, 3, 2, 4], [1, 2, 3, 4]).pvalue)


def test_collapse_correlation_by_family() -> None:
    runs = pd.concat([collapse_runs(), collapse_runs().assign(family="heterophilic", graph="h")])
    table = collapse_predicts_accuracy(runs, by="family")
    assert list(table.columns) == ["family", "collapse_metric", "rho", "p", "n", "best"]
    assert table[table["best"]]["family"].tolist() == ["heterophilic", "homophilic"]


# --- Nemenyi cliques and the CD diagram ---


def test_nemenyi_cliques_in_demsars_example() -> None:
    assert nemenyi_cliques(DEMSAR_AVERAGE, 1.25) == [("C4.5+m+cf", "C4.5+m", "C4.5+cf", "C4.5")]
    # At alpha 0.10 (CD 1.12) C4.5+m+cf beats C4.5 (3.143 - 1.964 = 1.179), as Demsar concludes.
    assert nemenyi_cliques(DEMSAR_AVERAGE, 1.12) == [("C4.5+m+cf", "C4.5+m", "C4.5+cf"), ("C4.5+cf", "C4.5")]


def test_nemenyi_cliques_by_hand() -> None:
    ranks = pd.Series({"e": 5.0, "a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})
    assert nemenyi_cliques(ranks, 1.5) == [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]
    assert nemenyi_cliques(ranks, 1.0) == []  # a difference of exactly CD is significant
    assert nemenyi_cliques(ranks, 10.0) == [("a", "b", "c", "d", "e")]
    assert nemenyi_cliques(ranks, math.nan) == []
    table = pd.DataFrame({"norm": ["x", "y", "z"], "avg_rank": [1.0, 1.2, 2.9]})
    assert nemenyi_cliques(table, 1.0) == [("x", "y")]


def test_cd_diagram_writes_the_same_file_twice(tmp_path: Path) -> None:
    for suffix in ("svg", "png"):
        first = cd_diagram(DEMSAR_AVERAGE, 1.25, tmp_path / f"cd.{suffix}", title="Demsar 2006, Table 6")
        data = first.read_bytes()
        assert len(data) > 1000
        assert (
            cd_diagram(DEMSAR_AVERAGE, 1.25, tmp_path / f"again.{suffix}", "Demsar 2006, Table 6").read_bytes() == data
        )
    assert b"<svg" in (tmp_path / "cd.svg").read_bytes()
    assert (tmp_path / "cd.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="svg"):
        cd_diagram(DEMSAR_AVERAGE, 1.25, tmp_path / "cd.txt")
