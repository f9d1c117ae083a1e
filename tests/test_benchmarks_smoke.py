"""Smoke test: the ContraNorm benchmark runs end to end on tiny sizes and writes its report and plot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bench_contranorm_quick(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "experiments.benchmarks.bench_contranorm", "--quick", "--out", str(tmp_path)],
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
    assert (tmp_path / "contranorm_scaling.png").stat().st_size > 1000


def test_common_helpers() -> None:
    from experiments.benchmarks import _common as common

    assert common.median([3.0, 1.0, 2.0]) == 2.0
    assert common.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert abs(common.loglog_slope([1, 2, 4, 8], [3, 12, 48, 192]) - 2.0) < 1e-12
    assert common.format_ratio(2.0, 1.0) == "2.00x faster"
    assert common.format_ratio(1.0, 2.0) == "2.00x slower"
    table = common.markdown_table([{"a": 1, "b": 0.123456}, {"a": 2, "b": None}])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.123 |", "| 2 | - |"]
    calls = {"x": 0, "y": 0}

    def bump(name: str):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    samples = common.time_interleaved_samples({"x": bump("x"), "y": bump("y")}, repeats=3, min_seconds=0.0)
    assert [len(v) for v in samples.values()] == [3, 3] and calls == {"x": 5, "y": 5}  # warmup + calibration + 3
