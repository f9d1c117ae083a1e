"""Smoke tests of the benchmark suite (experiments/benchmarks): every benchmark runs at tiny sizes and the one
report is written. No timing is asserted (the machine is shared); only that the numbers exist and are sane."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # experiments/ is not an installed package
    sys.path.insert(0, str(REPO))

from experiments.benchmarks import _common, bench_contranorm_model, bench_norms, run_all  # noqa: E402

# bench_contranorm has its own smoke test (tests/experiments/test_benchmarks_smoke.py), and the scale benchmark, whose
# every size runs in a fresh process, the next test: the two halves of the suite run side by side under xdist.
ALONE = ("contranorm", "scale")


def test_run_all_quick_writes_one_report(tmp_path, data_root):
    together = [name for name in run_all.BENCHMARKS if name not in ALONE]
    path = run_all.run_all(quick=True, out_dir=tmp_path, only=together)
    assert path == tmp_path / run_all.REPORT_NAME
    text = path.read_text()
    assert "## Summary" in text
    for title in ("3. Per-graph", "4. DeepGCN", "5. Collapse probe", "6. Whole-model cost", "7. GCNII"):
        assert title in text
    assert "Load average" in text
    assert text.count("![") >= 2  # the GCN and ContraNorm-model scaling plots
    for png in ("gcn_epoch_scaling.png", "contranorm_model_scaling.png"):
        assert (tmp_path / png).stat().st_size > 0
    sections = {section.split("\n", 1)[0]: section for section in text.split("\n## ")[1:]}
    for title, section in sections.items():
        if title[:2] in ("3.", "4.", "5.", "6.", "7."):  # this suite's (bench_contranorm is another module's)
            assert "**Failed:**" not in section, section
    assert torch.get_num_threads() >= 1  # thread setting restored


def test_run_all_quick_scale_section(tmp_path, data_root):
    text = run_all.run_all(quick=True, out_dir=tmp_path, only=["scale"]).read_text()
    section = text.split("\n## 11. Scale")[1]
    assert "**Failed:**" not in section
    assert all(f"| 1000 | {variant} |" in section for variant in ("sparse", "pyg", "sparse+checkpoint", "sparse+bf16"))


def test_time_interleaved_medians_and_calls():
    calls = {"a": 0, "b": 0}

    def make(name):
        def fn():
            calls[name] += 1

        return fn

    times = _common.time_interleaved({"a": make("a"), "b": make("b")}, repeats=3, warmup=1, min_seconds=0.0)
    assert set(times) == {"a", "b"}
    assert all(value >= 0 and math.isfinite(value) for value in times.values())
    assert calls == {"a": 5, "b": 5}  # warmup + calibration + 3 rounds


def test_median():
    assert _common.median([3.0, 1.0, 2.0]) == 2.0
    assert _common.median([4.0, 1.0, 2.0, 3.0]) == 2.5


def test_peak_memory_sees_a_large_allocation():
    # 64 MB: above glibc's largest dynamic mmap threshold (32 MB), so it is always a fresh mapping; a 16 MB block
    # could be served from heap memory an earlier test had already made resident, and read as no growth.
    peak = _common.peak_memory(lambda: torch.ones(64 * 2**20 // 4).sum())
    if peak is None:
        pytest.skip("no /proc/self/clear_refs on this platform")
    assert peak >= 32 * 2**20


def test_peak_memory_sees_a_block_the_heap_could_have_reused():
    """A 16 MB block right after a 16 MB block was freed: glibc would serve it from the resident heap (no RSS growth)
    once its dynamic mmap threshold has risen; peak_memory forces fresh mappings during the call, so it shows."""
    for _ in range(3):  # frees of mmapped blocks raise glibc's dynamic threshold past 16 MB
        block = torch.ones(16 * 2**20 // 4)
        del block
    warm = torch.ones(16 * 2**20 // 4)
    del warm  # 16 MB of freed, resident heap (or a returned mapping)
    peak = _common.peak_memory(lambda: torch.ones(16 * 2**20 // 4).sum())
    if peak is None:
        pytest.skip("no /proc/self/clear_refs on this platform")
    assert peak >= 14 * 2**20


def test_contranorm_targets_are_judged_from_the_measured_rows():
    from experiments.benchmarks import bench_contranorm

    comparison = [
        {"n": 2708, "speed-up": 1.2, "streaming extra MB": 70.0},
        {"n": 20_000, "speed-up": 1.4, "streaming extra MB": 210.0},
    ]
    scaling_rows = [{"n": 10_000, "fraction of mm rate": 0.1}, {"n": 20_000, "fraction of mm rate": 0.65}]
    rss_rows = [
        {"n": 20_000, "kernel": "streaming", "peak growth, 1 call (MB)": 120.0, "peak growth, 2 calls (MB)": 149.0},
        {"n": 20_000, "kernel": "dense", "peak growth, 1 call (MB)": 9000.0, "peak growth, 2 calls (MB)": 9000.0},
    ]
    neighbour_rows = [
        {"n": 20_000, "neighbour": "alone", "speed-up": 1.9},
        {"n": 20_000, "neighbour": "beside", "speed-up": 1.45},
    ]
    targets = bench_contranorm.evaluate_targets(comparison, scaling_rows, rss_rows, neighbour_rows)
    assert [(what.split(",")[0], measured, met) for what, _, measured, met in targets] == [
        ("speed-up over dense", 1.2, True),
        ("speed-up over dense", 1.4, False),  # 20,000 needs 1.5x
        ("extra peak memory (MB)", 210.0, False),
        ("process RSS growth (MB)", 149.0, True),  # the streaming kernel's peak over two calls, < 150 MB
        ("speed-up over dense beside a neighbour", 1.45, False),
        ("FLOP rate / square-mm rate", 0.65, False),  # needs at least 0.7
    ]
    rss_rows[0]["peak growth, 2 calls (MB)"] = 150.0
    assert not bench_contranorm.evaluate_targets([], [], rss_rows)[0][3]
    assert bench_contranorm.evaluate_targets([{"n": 200, "speed-up": 9.0, "streaming extra MB": 1.0}], []) == []
    small_rss = [{"n": 400, "kernel": "streaming", "peak growth, 2 calls (MB)": 900.0}]
    small_neighbour = [{"n": 400, "neighbour": "beside", "speed-up": 0.5}]
    assert bench_contranorm.evaluate_targets([], [], small_rss, small_neighbour) == []


def test_report_tables_escape_pipes_and_round():
    """A section's tables and targets go through graphnorm's one table writer: pipes escaped, numbers rounded to
    three significant digits, a missing value as a dash, an unmet target in bold."""
    rows = [{"name": "a | b", "value": 1.23456, "none": None}]
    section = run_all.table_report("x", "X", "setup", rows, [run_all.Target("ratio", "<= 1", 1.23456, False)])
    lines = section.to_markdown().splitlines()
    assert "| name | value | none |" in lines and "| a \\| b | 1.23 | - |" in lines
    assert "| ratio | <= 1 | 1.23 | **NO** |" in lines


def test_norm_cases_agree_with_their_reference():
    """Like with like: each norm and its reference give the same output (same formula), so the timings compare
    equal work. RMSNorm (eps placement) and SepNorm (BatchNorm running stats) are checked loosely."""
    tensors = bench_norms.make_batch(num_graphs=20, min_nodes=3, max_nodes=9, channels=8)
    tensors["num_graphs"] = torch.tensor(20)
    for case in bench_norms.CASES:
        ours, reference = case.ours(8), case.reference(8)
        with torch.no_grad():
            a = bench_norms._call(ours, case, True, tensors, tensors["x"])
            b = bench_norms._call(reference, case, False, tensors, tensors["x"])
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=lambda m, c=case: f"{c.label}: {m}")


def test_dense_contranorm_matches_ours():
    """The dense baseline computes the same ContraNorm as graphnorm's (without its LayerNorm)."""
    from graphnorm.norms import build_norm

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=generator)
    edge_index = torch.randint(0, 40, (2, 60), generator=generator)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    ours = build_norm("contranorm", 6, scale=1.0, layer_norm=False)
    dense = bench_contranorm_model.DenseContraNorm(6, scale=1.0)
    torch.testing.assert_close(ours(x, edge_index=edge_index), dense(x, edge_index=edge_index), atol=1e-5, rtol=1e-5)


def test_contranorm_worker_reports_memory(data_root):
    result = bench_contranorm_model.measure_config("ours", num_layers=2, epochs=1, quick=True)
    assert result["impl"] == "ours" and result["layers"] == 2 and len(result["epoch_s"]) == 1
    assert result["peak_rss_bytes"] > 0
