"""The leaderboard's CPU-hour estimator: its cost model recovers a known fixed cost, per-epoch line in depth and norm
factors from timings made by that model, and counts the tier's tuning and grid runs as the runner makes them."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from analysis.leaderboard import estimate as est  # noqa: E402
from analysis.leaderboard.protocol import (  # noqa: E402
    grid_sweep,
    knob_choices,
    load_protocol,
    runnable_norms,
    setting_config,
)
from analysis.leaderboard.run import tuned_norms  # noqa: E402
from graphnorm.sweep.grid import expand_grid  # noqa: E402

FIXED, EPOCH_A, EPOCH_B, PROBE_B = 0.5, 0.01, 0.002, 0.01
FACTORS = {"none": 1.0, "contranorm": 5.0, "granola": 2.0}


def synthetic_timings(protocol) -> pd.DataFrame:
    """Timings of every setting of ``protocol`` as the model with the constants above would measure them."""
    rows = []
    low, high = est.TIMED_DEPTHS
    for part, host, graph in protocol.settings():
        epochs = est.TIMING_EPOCHS[part.name]
        plan = [("none", low, 1), ("none", low, epochs), ("none", high, epochs)]
        plan += [(norm, high, epochs) for norm in est.TIMED_NORMS]
        for norm, depth, count in plan:
            cpu = FIXED + count * (EPOCH_A + EPOCH_B * depth) * FACTORS[norm]
            rows.append({"part": part.name, "host": host, "graph": graph.name, "norm": norm, "depth": depth,
                         "epochs": count, "cpu_s": cpu, "wall_s": cpu, "probe_cpu_s": PROBE_B * depth,
                         "train_graphs": est.TIMING_GRAPHS})  # fmt: skip
    return pd.DataFrame(rows, columns=est.TIMING_COLUMNS)


def test_the_model_recovers_its_constants():
    protocol = load_protocol("quick")
    timings = synthetic_timings(protocol)
    part, host, graph = protocol.settings()[0]
    model = est.fitted(timings[timings["graph"] == graph.name])
    low, high = est.TIMED_DEPTHS
    # float64 sums of a handful of terms: a tolerance of many ulps, far below any changed formula's effect
    assert model["fixed"] == pytest.approx(FIXED, rel=1e-9)
    assert model["epoch_low"] == pytest.approx(EPOCH_A + EPOCH_B * low, rel=1e-9)
    assert model["epoch_high"] == pytest.approx(EPOCH_A + EPOCH_B * high, rel=1e-9)
    assert model["contranorm"] == pytest.approx(5.0, rel=1e-9) and model["granola"] == pytest.approx(2.0, rel=1e-9)
    config = setting_config(part, host, graph)
    seconds = est.run_seconds(part, graph, model, "contranorm", 32, config)
    expected = FIXED + est.EPOCHS_FRACTION * config["epochs"] * (EPOCH_A + EPOCH_B * 32) * 5.0 + PROBE_B * 32
    assert seconds == pytest.approx(expected, rel=1e-9)
    other = est.run_seconds(part, graph, model, "layernorm", 32, config)
    assert other == pytest.approx(
        FIXED
        + est.EPOCHS_FRACTION * config["epochs"] * (EPOCH_A + EPOCH_B * 32) * est.OTHER_NORM_FACTOR
        + PROBE_B * 32,
        rel=1e-9,
    )


def test_a_molecular_run_stops_at_its_time_cap():
    protocol = load_protocol("full")
    part = protocol.parts["molecular"]
    graph = part.graphs["molhiv"]
    config = {**setting_config(part, "gin_vn", graph), "max_train_minutes": 0.001, "epochs": 1000}
    model = {"fixed": 0.0, "epoch_low": 1.0, "epoch_high": 1.0, "probe_low": 0.0, "probe_high": 0.0}
    epoch = est.training_graphs(graph, config) / est.TIMING_GRAPHS
    assert est.run_seconds(part, graph, model, "none", 8, config) == pytest.approx(0.06 + epoch)


def test_the_estimate_counts_the_runs_the_runner_makes():
    protocol = load_protocol("full")
    table = est.estimate(protocol, synthetic_timings(protocol))
    for row in table.itertuples():
        part = protocol.parts[row.part]
        graph = part.graphs[row.graph]
        norms = runnable_norms(setting_config(part, row.host, graph), protocol.norms)[0]
        assert row.grid_runs == len(expand_grid(grid_sweep(part, row.host, graph, norms, {}), log=None))
        tuning = sum(len(knob_choices(protocol, n)) for n in tuned_norms(protocol, part, row.host, graph))
        assert row.tuning_runs == tuning * min(part.tuning_replicates, len(graph.replicates))
        assert math.isfinite(row.cpu_h) and row.cpu_h > 0
    assert set(table["part"]) == {"node", "molecular"}
