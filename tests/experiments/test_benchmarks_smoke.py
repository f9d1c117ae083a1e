"""Smoke test: the ContraNorm benchmark runs end to end on tiny sizes and writes its report and plot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_contranorm_quick(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "experiments.benchmarks.bench_contranorm", "--quick", "--neighbour"]
    result = subprocess.run(
        command + ["--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = (tmp_path / "contranorm.md").read_text()
    assert report.strip() == result.stdout.strip()
    assert "| n | d | streaming s | dense s | speed-up |" in report
    assert "Fitted log-log exponents" in report
    rss_header = "| n | d | kernel | peak growth, 1 call (MB) | peak growth, 2 calls (MB) | kept after 2 calls (MB) |"
    assert rss_header in report
    assert "| 400 | 8 | streaming |" in report and "| 400 | 8 | dense |" in report
    assert "| n | d | neighbour | rounds | streaming s | dense s | speed-up |" in report
    assert "| 400 | 8 | alone | 2 |" in report and "| 400 | 8 | beside | 2 |" in report
    assert (tmp_path / "contranorm_scaling.png").stat().st_size > 1000


def test_common_helpers() -> None:
    from experiments.benchmarks import _common as common

    assert common.median([3.0, 1.0, 2.0]) == 2.0
    assert common.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert abs(common.loglog_slope([1, 2, 4, 8], [3, 12, 48, 192]) - 2.0) < 1e-12
    assert common.format_ratio(2.0, 1.0) == "2.00x faster"
    assert common.format_ratio(1.0, 2.0) == "2.00x slower"
    calls = {"x": 0, "y": 0}

    def bump(name: str):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    samples = common.time_interleaved_samples({"x": bump("x"), "y": bump("y")}, repeats=3, min_seconds=0.0)
    assert [len(v) for v in samples.values()] == [3, 3] and calls == {"x": 5, "y": 5}  # warmup + calibration + 3


def test_rss_growth_of_streaming_is_far_below_dense() -> None:
    """Fresh worker processes, default allocator: at n = 4,000 (d = 64) the dense reference holds several n x n
    float32 matrices (S, the mask, P, their gradients: n^2 * 4 bytes = 61 MB each) while the streaming kernel's
    extra memory is linear in n plus fixed costs (~40 MB measured, first-call code pages included)."""
    from experiments.benchmarks import bench_contranorm

    n, channels = 4000, 64
    rows = bench_contranorm.rss_growth_rows([n], channels)
    assert [(row["n"], row["d"], row["kernel"]) for row in rows] == [(n, channels, "streaming"), (n, channels, "dense")]
    columns = [f"{key} (MB)" for key in bench_contranorm.RSS_COLUMNS]
    assert all(set(columns) <= set(row) for row in rows)
    streaming, dense = ({key: row[key] for key in columns} for row in rows)
    square_mb = n * n * 4 / 2**20
    for growth in (streaming, dense):
        assert 0 < growth["peak growth, 1 call (MB)"] <= growth["peak growth, 2 calls (MB)"]
        assert 0 <= growth["kept after 2 calls (MB)"] <= growth["peak growth, 2 calls (MB)"]
    assert dense["peak growth, 1 call (MB)"] > 2 * square_mb, dense  # the measurement sees the n x n matrices
    assert streaming["peak growth, 2 calls (MB)"] < dense["peak growth, 1 call (MB)"] / 3, (streaming, dense)
