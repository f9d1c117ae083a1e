"""The leaderboard page from a tidy table: the numbers are the table's (means, 95% intervals, seed counts, ranks),
the answer names the norm the statistics rank first, a cell that cannot run or whose runs failed says why, the text
from the data shows as text, and the page is the same for the same table."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from analysis.leaderboard.page import build_leaderboard  # noqa: E402
from analysis.leaderboard.run import write_csv  # noqa: E402
from analysis.leaderboard.tables import COLUMNS, read_runs, write_runs  # noqa: E402

HOSTILE = "<script>alert(1)</script> | [x](javascript:alert(1)) =cmd"
VALUES = {"good": (0.80, 0.60), "bad": (0.70, 0.20)}  # norm -> (mean at depth 2, at depth 8)


def tidy_table() -> pd.DataFrame:
    rows = []
    for graph in ("texas", "csbm_homophilic"):
        family = "heterophilic" if graph == "texas" else "homophilic"
        for norm, (shallow, deep) in VALUES.items():
            for depth, mean in ((2, shallow), (8, deep)):
                for seed in (0, 1, 2):
                    value = mean + 0.01 * (seed - 1)
                    rows.append({"family": family, "graph": graph, "host": "deepgcn", "depth": depth, "norm": norm,
                                 "seed": seed, "metric": "test_acc", "value": value, "higher_is_better": True,
                                 "effective_rank": 10 * value, "cone_angle": 90 * value, "dirichlet_energy": value,
                                 "status": "ok", "reason": "", "cpu_s": 2.0, "norm_kwargs": "{}", "variant": "",
                                 "part": "node", "run_id": f"{norm}-L{depth}-s{seed}"})  # fmt: skip
        rows.append({**rows[-1], "norm": "sepnorm", "value": float("nan"), "status": "cannot run",
                     "reason": "sepnorm needs graph-token rows", "run_id": ""})  # fmt: skip
    failed = {**rows[0], "norm": "fragile", "value": float("nan"), "status": "failed", "reason": HOSTILE}
    return pd.DataFrame([*rows, failed], columns=COLUMNS)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("page")
    write_runs(tidy_table(), root / "results" / "quick")
    return build_leaderboard(root / "out", root / "results", tier="quick").read_text(), root


def row(text: str, graph: str, depth: int, norm: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {graph} |") and f"| {depth} | {norm} |" in ln)
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_cells_show_the_tables_numbers(page):
    text, _ = page
    cells = row(text, "texas", 8, "good")
    assert (
        cells[6] == "0.600" and cells[7] == "± 0.0248" and cells[8] == "3" and cells[9] == "1"
    )  # t(2) * 0.01 / sqrt 3
    assert cells[10].startswith("yes, p = ")  # 0.60 vs 0.20 on every seed: separated
    assert row(text, "texas", 8, "bad")[9] == "2" and row(text, "texas", 8, "bad")[10] == ""
    assert cells[11] == "6.00"  # three runs of 2 CPU seconds


def test_the_answer_names_the_norm_ranked_first(page):
    text, _ = page
    assert "At 8 layers on heterophilic graphs, `good` has the best average rank, 1.00 of 2 norms" in text
    assert "8 layers on heterophilic graphs" in text and "Not ranked (no result in every setting): `sepnorm`." in text
    assert "Left out for missing a setting: `fragile`." in text  # the CD diagrams at 2 and 8 layers
    assert "Left out for missing a setting: `sepnorm`." in text


def test_cells_without_results_say_why(page):
    text, _ = page
    assert "sepnorm needs graph-token rows" in row(text, "texas", 8, "sepnorm")[12]
    fragile = row(text, "texas", 2, "fragile")
    assert fragile[6] == "" and fragile[12].startswith("1 of 1 runs failed: ")


def test_text_from_the_data_shows_as_text(page):
    text, _ = page
    assert "<script>" not in text and "&lt;script>alert(1)&lt;/script> \\| [x\\](javascript:" in text


def test_the_page_is_the_same_for_the_same_table(page):
    text, root = page
    again = build_leaderboard(root / "again", root / "results", tier="quick").read_text()
    assert again == text
    figures = sorted(p.name for p in (root / "out" / "figures").glob("leaderboard_*.png"))
    assert figures == ["leaderboard_cd_2.png", "leaderboard_cd_8.png", "leaderboard_ranks.png"]
    assert text.count('!!! warning "Quick tier"') == 1


def test_a_grid_under_way_is_compared_only_where_every_run_has_ended(tmp_path):
    """csbm_homophilic at 8 layers still waits for one run of ``bad``: that group leaves the answers, the other
    groups keep them, and the page says how far the grid has come."""
    table = tidy_table()
    waiting = (table["graph"] == "csbm_homophilic") & (table["depth"] == 8) & (table["norm"] == "bad")
    table.loc[waiting & (table["seed"] == 2), ["value", "status", "reason"]] = [float("nan"), "not run", "not run yet"]
    write_runs(table, tmp_path / "results" / "quick")
    text = build_leaderboard(tmp_path / "out", tmp_path / "results", tier="quick").read_text()
    planned = len(table) - 2  # the two sepnorm rows cannot run; of the others, one waits
    assert '!!! note "Under way"' in text and f"{planned - 1} of {planned} runs of this tier have ended" in text
    assert "Finished graph/host settings: texas/deepgcn." in text
    # at 8 layers (the deepest, so the answer's depth) only texas counts
    assert "At 8 layers on homophilic graphs: no results yet." in text
    assert "At 8 layers on heterophilic graphs, `good` has the best average rank, 1.00 of 2 norms over 1" in text
    assert "1 of 3 runs not run: not run yet" in row(text, "csbm_homophilic", 8, "bad")[12]


def test_the_page_holds_the_cells_against_the_papers(page):
    text, _ = page
    section = text.split("## Held against the papers")[1].split("## Every cell")[0]
    gcnii = next(line for line in section.splitlines() if "gcnii / cora / 64 layers / none" in line)
    assert "| 0.855 |" in gcnii and "not in this tier's grid" in gcnii  # the quick tier has no GCNII
    assert "no published number read" in section


def test_the_collapse_answer_pools_the_families_of_one_metric(page):
    """Each family alone has too few deep cells; texas and csbm_homophilic together (both accuracy) have four, where
    every collapse column (10 x, 90 x and 1 x the value) falls as the accuracy lost grows."""
    text, _ = page
    section = text.split("## Which collapse metric predicts the loss with depth")[1].split("## Ranks")[0]
    assert "- heterophilic: too few cells deeper than the shallowest for a correlation." in section
    assert "- every test_acc cell: `effective_rank`, Spearman's rho = -1.00" in section and "4 cells" in section


def test_the_budget_shows_estimated_and_spent_hours(tmp_path):
    write_runs(tidy_table(), tmp_path / "results" / "quick")
    spent = {"spent_tuning_cpu_h": 0.25, "spent_grid_cpu_h": 1.5, "spent_cpu_h": 1.75}
    budget = pd.DataFrame(
        [{"part": "node", "estimated_cpu_h": 18.57, **spent, "runs_ended": 300, "runs_planned": 9984}]
    )
    write_csv(budget, tmp_path / "results" / "quick_budget.csv")
    text = build_leaderboard(tmp_path / "out", tmp_path / "results", tier="quick").read_text()
    assert "## CPU budget" in text and "| node | 18.6 | 0.250 + 1.50 = 1.75 | 300 / 9984 |" in text


def test_the_runs_table_is_one_csv_per_part_and_host_read_back_whole(tmp_path):
    """Each (part, host) gets its own file, so that none grows past review size; a host the table no longer has
    loses its file; reading the folder gives back every row, text as written (the spreadsheet guard removed)."""
    table = tidy_table()
    table = pd.concat([table, table.assign(host="gcnii")], ignore_index=True)
    folder = tmp_path / "full"
    folder.mkdir()
    (folder / "node_dropped_host.csv").write_text("family\n")
    written = write_runs(table, folder)
    assert sorted(path.name for path in written) == sorted(path.name for path in folder.iterdir())
    assert sorted(path.name for path in written) == ["node_deepgcn.csv", "node_gcnii.csv"]
    back = read_runs(folder)
    keys = ["host", "graph", "depth", "norm", "seed"]
    expected, back = (frame.sort_values(keys).reset_index(drop=True) for frame in (table, back))
    pd.testing.assert_series_equal(back["value"], expected["value"], check_dtype=False)
    assert back["reason"].tolist() == expected["reason"].tolist() and HOSTILE in back["reason"].tolist()
    assert read_runs(tmp_path / "missing").columns.tolist() == COLUMNS


def test_the_protocol_section_states_what_each_graph_sets():
    """A graph's subset, dataset keywords and norm keywords are part of the recipe its cells ran under: the page
    states them beside the graph."""
    from analysis.leaderboard.page import protocol_lines
    from analysis.leaderboard.protocol import load_protocol

    protocol = load_protocol("full")
    text = "\n".join(protocol_lines(protocol, pd.DataFrame()))
    for part in protocol.parts.values():
        for graph in part.graphs.values():
            stated = text.split(f"{graph.name} (", 1)[1].split(")", 1)[0]
            for key in ("limit_graphs", "dataset_kwargs", "norm_kwargs"):
                if key in graph.config or (key == "norm_kwargs" and graph.norm_kwargs):
                    assert f"`{key}: " in stated, (graph.name, key, stated)
    assert "molhiv (molecular, 3 seeds; `limit_graphs: " in text
