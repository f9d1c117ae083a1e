"""The leaderboard's anchors: the published numbers file loads and names cells of the full grid, and each anchor's
verdict follows from our cell's mean and Student-t interval (inside, above, below), or says why there is none."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from analysis.leaderboard.anchors import anchor_rows, load_anchors  # noqa: E402
from analysis.leaderboard.protocol import load_protocol  # noqa: E402
from analysis.leaderboard.tables import COLUMNS  # noqa: E402


def runs(values: list[float], status: str = "ok", depth: int = 64) -> pd.DataFrame:
    rows = [{"family": "homophilic", "graph": "cora", "host": "gcnii", "depth": depth, "norm": "none", "seed": seed,
             "metric": "test_acc", "value": value, "higher_is_better": True, "status": status}
            for seed, value in enumerate(values)]  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


ANCHOR = {"paper": "P", "source": "S", "cell": {"host": "gcnii", "graph": "cora", "depth": 64, "norm": "none"}}


def test_every_anchor_names_a_cell_of_the_full_grid_and_a_source():
    protocol = load_protocol("full")
    node = protocol.parts["node"]
    anchors = load_anchors()
    assert any(a["published"] == 0.855 and a["cell"]["depth"] == 64 for a in anchors)  # GCNII, Cora, 64 layers
    for anchor in anchors:
        cell = anchor["cell"]
        assert cell["host"] in node.hosts and cell["graph"] in node.graphs and anchor["source"]
        assert cell.get("depth") is None or cell["depth"] in node.depths
        assert anchor["published"] is None or 0 < anchor["published"] < 1  # fractions, like our metric


@pytest.mark.parametrize(
    ("published", "verdict"),
    [(0.80, "inside our interval"),
     (0.855, "outside our interval (0.055 above our mean, 0.030 beyond the interval's end)"),
     (0.70, "outside our interval (0.100 below our mean, 0.075 beyond the interval's end)"),
     (None, "no published number read")],
)  # fmt: skip
def test_the_verdict_follows_from_the_interval(published, verdict):
    # mean 0.80, std 0.01, n 3: t(2) half-width 0.0248
    table = anchor_rows(runs([0.79, 0.80, 0.81]), [{**ANCHOR, "published": published}])
    row = table.iloc[0]
    assert row["n"] == 3 and row["mean"] == pytest.approx(0.80) and row["ci95"] == pytest.approx(0.02484, abs=1e-4)
    assert row["verdict"] == verdict


def test_a_cell_under_way_or_absent_has_no_verdict():
    waiting = pd.concat([runs([0.79, 0.80]), runs([float("nan")], status="not run")], ignore_index=True)
    assert anchor_rows(waiting, [{**ANCHOR, "published": 0.8}]).iloc[0]["verdict"] == "our cell has not finished yet"
    absent = anchor_rows(runs([0.8, 0.8], depth=32), [{**ANCHOR, "published": 0.8}]).iloc[0]
    assert absent["verdict"] == "not in this tier's grid" and absent["n"] == 0


def test_a_malformed_anchor_is_one_line(tmp_path):
    (tmp_path / "a.yaml").write_text("anchors:\n  - {paper: P, cell: {host: gcnii}}\n")
    with pytest.raises(ValueError, match=r"anchors\[0\] needs paper, source and a cell with host, graph and norm"):
        load_anchors(tmp_path / "a.yaml")
