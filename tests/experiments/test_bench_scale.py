"""The scaling benchmark (experiments/benchmarks/bench_scale.py): one measurement at 1,000 nodes in this process per
propagation, and the exponent, targets and CSV it derives from rows. Timings are not asserted (shared machine)."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # experiments/ is not an installed package
    sys.path.insert(0, str(REPO))

from experiments.benchmarks import bench_scale  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("variant", ["sparse", "pyg", "sparse+checkpoint", "default", "gcnconv"])
def test_worker_measures_one_size(variant: str) -> None:
    row = bench_scale.worker(1000, variant, epochs=1, probe=False)
    assert row["nodes"] == 1000 and row["variant"] == variant
    assert row["path"] == {"default": "pyg", "gcnconv": "GCNConv"}.get(variant, variant.split("+")[0])
    assert 8000 < row["directed edges"] < 12000  # average degree 10, both directions stored
    for key in ("first epoch (s)", "epoch (s)", "epoch CPU (s)", "eval forward (s)", "peak RSS (MB)"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["probe (s)"] is None
    assert row["peak RSS (MB)"] >= row["peak RSS train (MB)"] >= row["graph RSS (MB)"] > 0


def rows_with_epochs(epochs: dict[int, float]) -> list[dict]:
    return [
        {"nodes": edges // 10, "variant": "sparse", "directed edges": edges, "epoch (s)": t, "peak RSS train (MB)": 1e3}
        for edges, t in epochs.items()
    ]


def test_growth_exponent_and_targets_from_rows(tmp_path) -> None:
    linear = rows_with_epochs({10**5: 0.1, 10**6: 1.0, 10**7: 10.0})
    assert bench_scale.growth_exponent(linear) == pytest.approx(1.0)
    met = {target.what: target.met for target in bench_scale.targets(linear)}
    assert met == {
        "10^6 nodes: sparse epoch (s)": True,
        "10^6 nodes: sparse peak RSS (MB)": True,
        "growth exponent of the sparse epoch vs edges": True,
    }
    quadratic = rows_with_epochs({10**5: 0.01, 10**6: 1.0, 10**7: 100.0})
    assert bench_scale.growth_exponent(quadratic) == pytest.approx(2.0)
    assert not all(target.met for target in bench_scale.targets(quadratic))
    skipped = [*linear, {"nodes": 10**6, "variant": "pyg", "note": "skipped: 10 MB available"}]
    path = bench_scale.write_csv(skipped, tmp_path / "scale.csv")
    with open(path) as handle:
        read = list(csv.DictReader(handle))
    assert [row["variant"] for row in read] == ["sparse", "sparse", "sparse", "pyg"]
    assert read[-1]["note"].startswith("skipped") and read[0]["note"] == ""
    shown = bench_scale.table_rows(skipped)
    assert shown[1]["epoch / sparse epoch"] == pytest.approx(1.0) and shown[-1]["epoch (s)"] is None


def test_default_and_gcnconv_rows_get_ratios_to_gcnconv() -> None:
    rows = [
        {"nodes": 10**6, "variant": "default", "path": "sparse", "epoch (s)": 10.0, "peak RSS train (MB)": 3000.0},
        {"nodes": 10**6, "variant": "gcnconv", "path": "GCNConv", "epoch (s)": 25.0, "peak RSS train (MB)": 6000.0},
    ]
    shown = bench_scale.table_rows(rows)
    assert shown[0]["epoch / GCNConv epoch"] == pytest.approx(0.4) and shown[0]["peak RSS / GCNConv"] == 0.5
    assert shown[1]["epoch / GCNConv epoch"] == 1.0 and shown[0]["epoch / sparse epoch"] is None
    assert [target.what for target in bench_scale.targets(rows)] == [
        "10^6 nodes: default epoch (s)",
        "10^6 nodes: default peak RSS (MB)",
    ]
