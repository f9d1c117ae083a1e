"""The probe's ``precision`` option and its faster cone solver: float32 rows give the float64 reference's numbers
within the stated tolerances (on the same-numbers fixture too), bad values fail in one line, and the solver's
incremental pieces equal the direct computations they replace.

Tolerances against the float64 reference: 1e-5 relative for ranks and energies (and every other value but the
following), 1e-5 absolute for the normalized spectrum sv_*, the certified 1e-3 degrees for cone angles.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from record_tolerance import value_tolerance
from torch_geometric.data import Data

from graphnorm.analysis import CollapseProbe, collapse_records
from graphnorm.analysis import min_norm_point as solver
from graphnorm.analysis.collapse import PRECISIONS, collapse_records_layers, warm_kernels
from graphnorm.analysis.cone import cone_from_unit_rows, robust_cone_from_unit_rows
from graphnorm.config import RunConfig
from graphnorm.models import DeepGCN

CONE_TOL_DEG = 1e-3
RELATIVE = 1e-5  # ranks, energies and the other values
SPECTRUM = 1e-5  # sv_* (ratios to the largest singular value, in [0, 1])
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "refactor_records.json"


def tolerance(metric: str, expected: float) -> float:
    if metric.startswith("cone_angle"):
        return CONE_TOL_DEG
    if metric.startswith("sv_"):
        return SPECTRUM
    return RELATIVE * abs(expected)


def deviations(got: list[dict], reference: list[dict]) -> dict[str, float]:
    """Largest |got - reference| per metric (relative for all but cones and sv_*); asserts the same records and
    every value within :func:`tolerance`."""
    assert len(got) == len(reference)
    worst: dict[str, float] = {}
    for record, wanted in zip(got, reference):
        assert {k: v for k, v in record.items() if k != "value"} == {k: v for k, v in wanted.items() if k != "value"}
        value, expected = record["value"], wanted["value"]
        if expected is None or math.isnan(expected):
            assert value is None or math.isnan(value), (record, wanted)
            continue
        difference = abs(value - expected)
        assert difference <= tolerance(record["metric"], expected), (record, wanted)
        relative = record["metric"].startswith(("cone_angle", "sv_"))
        size = difference if relative or expected == 0 else difference / abs(expected)
        worst[record["metric"]] = max(worst.get(record["metric"], 0.0), size)
    return worst


def _graph(num_nodes: int = 300, seed: int = 0) -> Data:
    generator = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, num_nodes, (2, 4 * num_nodes), generator=generator)
    return Data(
        x=torch.randn(num_nodes, 12, generator=generator),
        edge_index=torch.cat([edges, edges.flip(0)], dim=1),
        num_nodes=num_nodes,
    )


@pytest.mark.parametrize("norm", ["pairnorm", "none"])
def test_float32_probe_matches_the_float64_reference(norm):
    """A PairNorm model and a collapsing one without norm (effective rank near 1, small cones in its deep layers)."""
    data = _graph()
    torch.manual_seed(0)
    model = DeepGCN(12, 32, 3, num_layers=24, norm=norm)
    reference = CollapseProbe(model).probe_records(data)
    got = CollapseProbe(model, precision="float32").probe_records(data)
    worst = deviations(got, reference)
    assert {"effective_rank", "cone_angle", "dirichlet_energy", "mad_neighbors", "sv_001"} <= set(worst)
    if norm == "none":  # the deep layers did collapse: the case where float32 arithmetic would lose the digits
        ranks = [r["value"] for r in reference if r["metric"] == "effective_rank"]
        assert min(ranks) < 1.5


def test_float32_batched_and_token_rows_match_the_reference():
    generator = torch.Generator().manual_seed(1)
    xs = [torch.randn(90, 8, generator=generator) + 0.4 for _ in range(3)]
    batch = torch.arange(3).repeat_interleave(30)
    token_mask = torch.zeros(90, dtype=torch.bool)
    token_mask[[0, 30, 60]] = True
    edges = torch.randint(0, 30, (2, 60), generator=generator)
    edge_index = torch.cat([edges + 30 * g for g in range(3)], dim=1)
    kwargs = dict(edge_index=edge_index, batch=batch, token_mask=token_mask)
    reference = collapse_records_layers(xs, **kwargs)
    got = collapse_records_layers(xs, **kwargs, precision="float32")
    for layer_got, layer_reference in zip(got, reference):
        deviations(layer_got, layer_reference)


def test_precision_is_checked_in_one_line():
    x = torch.randn(10, 3)
    for call in (
        lambda: collapse_records(x, precision="float16"),
        lambda: CollapseProbe(DeepGCN(3, 4, 2, num_layers=2, norm="pairnorm"), precision="half"),
    ):
        with pytest.raises(ValueError, match="precision must be one of 'float64', 'float32'"):
            call()
    with pytest.raises(ValueError, match="probe_precision must be one of float64, float32; got 'bfloat16'"):
        RunConfig.from_dict({"probe_precision": "bfloat16"})
    assert RunConfig().probe_precision == "float64" and PRECISIONS[0] == "float64"


def test_float32_rejects_float64_input_beyond_its_range():
    x = torch.randn(20, 4, dtype=torch.float64)
    x[3, 1] = 1e39  # finite in float64, Inf in float32
    assert math.isfinite(collapse_records(x)[0]["value"])
    with pytest.raises(ValueError, match="beyond float32's range.*precision='float64'"):
        collapse_records(x, precision="float32")


def test_float32_on_the_same_numbers_fixture(data_root: Path, tmp_path: Path):
    """The fixture's PairNorm Cora run (trained as the fixture test trains it: one thread, kernels capped at AVX2, so
    the model is the fixture's) probed with probe_precision float32, against the fixture's float64 layers."""
    from test_refactor_fixtures import AVX2_CEILING, RUNS

    out = tmp_path / "layers.json"
    script = (
        "import json, sys, torch\n"
        "from graphnorm.config import RunConfig\n"
        "from graphnorm.train import run\n"
        "torch.set_num_threads(1)\n"
        "config = RunConfig.from_dict({**json.loads(sys.argv[1]), 'data_root': sys.argv[2], 'device': 'cpu'})\n"
        "open(sys.argv[3], 'w').write(json.dumps(run(config)['layers']))\n"
    )
    config = {**RUNS["cora_gcn_pairnorm"], "probe_precision": "float32"}
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, **AVX2_CEILING, "PYTHONPATH": str(repo)}
    command = [sys.executable, "-c", script, json.dumps(config), str(data_root), str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = json.loads(json.loads(FIXTURE.read_text())["cora_gcn_pairnorm"]["layers"])
    worst = deviations(json.loads(out.read_text()), expected)
    assert len(worst) > 10


# --- the cone solver's incremental pieces ------------------------------------------------------------------------
def _factor_of(matrix: np.ndarray) -> np.ndarray:
    factor = np.zeros((matrix.shape[0] + 2, matrix.shape[0] + 2))
    for k in range(matrix.shape[0]):
        assert solver._factor_append(factor, k, matrix[k, :k].copy(), matrix[k, k])
    return factor


def test_factored_affine_solve_equals_the_bordered_one():
    rng = np.random.default_rng(0)
    for k in (1, 2, 5, 12):
        corral = rng.standard_normal((k, 16))
        corral /= np.linalg.norm(corral, axis=1, keepdims=True)
        gram = corral @ corral.T
        factor = _factor_of(gram + 1.0)
        np.testing.assert_allclose(solver._solve_factored(factor, k), solver._solve_affine(corral), atol=1e-11)


def test_factor_delete_gives_the_factor_of_the_smaller_matrix():
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((7, 10))
    matrix = rows @ rows.T + 1.0
    for position in (0, 3, 6):
        factor = _factor_of(matrix)
        solver._factor_delete(factor, 7, position)
        kept = [i for i in range(7) if i != position]
        upper = np.triu(factor[:6, :6])
        np.testing.assert_allclose(upper.T @ upper, matrix[np.ix_(kept, kept)], atol=1e-12)


def test_dependent_corral_row_is_refused_by_the_factor():
    rng = np.random.default_rng(2)
    rows = rng.standard_normal((3, 5))
    matrix = np.vstack([rows, rows[1]]) @ np.vstack([rows, rows[1]]).T + 1.0  # a repeated row: singular
    factor = np.zeros((6, 6))
    for k in range(3):
        assert solver._factor_append(factor, k, matrix[k, :k].copy(), matrix[k, k])
    assert not solver._factor_append(factor, 3, matrix[3, :3].copy(), matrix[3, 3])


def test_cone_of_a_subset_by_index_equals_the_copied_subset():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1500, 12)) + 1.5
    norms = np.linalg.norm(x, axis=1)
    units = x / norms[:, None]
    subset = np.flatnonzero(rng.random(1500) < 0.7)
    by_index = cone_from_unit_rows(units, norms, 1e-4, rows=subset)
    copied = cone_from_unit_rows(units[subset], norms[subset], 1e-4)
    assert by_index[0] == pytest.approx(copied[0], abs=1e-4)
    assert by_index[2] <= 1e-4 and by_index[4]
    # The robust cone with the caller's sums (the probe's path) and without them.
    shared = robust_cone_from_unit_rows(units, norms, 0.9, 1e-4, units.sum(axis=0), norms @ units)
    assert shared == pytest.approx(robust_cone_from_unit_rows(units, norms, 0.9, 1e-4), abs=1e-4)


def test_warm_kernels_compiles_every_kernel_the_probe_runs():
    from graphnorm.analysis import cone
    from graphnorm.analysis.collapse import kernels, measure

    warm_kernels()
    # The kernels the probe calls from Python (the others are compiled into them).
    for kernel in (
        kernels._stacked_edge_metrics,
        measure._measure_layers,
        cone.stacked_cones,
        cone.exact_and_robust_cones,
    ):
        assert kernel.signatures, kernel
    assert {str(sig[0].dtype) for sig in kernels._stacked_edge_metrics.signatures} >= {"float32", "float64"}
    # And afterwards a probe of either precision gives records (nothing left to compile is not observable here).
    for precision in PRECISIONS:
        assert collapse_records(torch.rand(40, 3) + 0.1, torch.randint(0, 40, (2, 80)), precision=precision)


def _robust_subset(units: np.ndarray, q: float) -> np.ndarray:
    """S_q of :func:`robust_cone_from_unit_rows`, computed here in NumPy."""
    total = units.sum(axis=0)
    cosines = units @ (total / np.linalg.norm(total))
    k = math.ceil(q * len(units) - 1e-9)
    return np.flatnonzero(cosines >= np.sort(cosines)[len(units) - k])


def test_warm_started_robust_cone_is_within_tol_of_a_cold_start():
    """The robust cone's solve starts from the exact cone's final corral (the rows of it in S_q): the answer stays
    certified, so it is within the tolerance of a cold start on S_q, and never wider than the exact cone."""
    from graphnorm.analysis import cone

    rng = np.random.default_rng(11)
    tol, q = 1e-3, 0.9
    row_sets = []
    for num_rows, width, spread in ((1500, 8, 1.0), (900, 16, 0.3), (400, 12, 2.0), (2000, 64, 0.05)):
        axis = rng.standard_normal(width)
        row_sets.append(axis / np.linalg.norm(axis) + spread * rng.standard_normal((num_rows, width)))
    collapsed = np.tile(rng.standard_normal(24), (1200, 1)) + 1e-3 * rng.standard_normal((1200, 24))
    collapsed[:30] = rng.standard_normal((30, 24))  # a few outliers that decide the exact cone
    row_sets.append(collapsed)
    warm_started = 0
    for x in row_sets:
        norms = np.linalg.norm(x, axis=1)
        units = x / norms[:, None]
        rows = np.arange(len(units))
        units_sum, weighted_sum = units.sum(axis=0), norms @ units
        exact, robust, _, _ = cone._both_cones(units, norms, rows, units_sum, weighted_sum, q, tol)
        subset = _robust_subset(units, q)
        cold = cone_from_unit_rows(units, norms, tol, rows=subset)[0]
        assert robust == pytest.approx(cold, abs=tol)
        assert robust <= exact + tol
        # The public one-matrix functions and the probe's compiled call give the same numbers up to round-off (other
        # compiled routes: an angle near 0 is an arccos near 1, which turns eps into ~sqrt(eps) rad).
        public = cone_from_unit_rows(units, norms, tol, units_sum=units_sum, weighted_sum=weighted_sum)[0]
        assert exact == pytest.approx(public, rel=1e-12, abs=value_tolerance("cone_angle", public))
        public = robust_cone_from_unit_rows(units, norms, q, tol, units_sum, weighted_sum)
        assert robust == pytest.approx(public, rel=1e-12, abs=value_tolerance("cone_angle", public))
        assert robust == pytest.approx(cone.exact_and_robust_cones(units, norms, rows, q, tol)[1], abs=tol)
        corral = cone._cone_from_start(
            units, norms, rows, units_sum, weighted_sum, tol, 10_000, np.empty(0, dtype=np.intp), np.empty(0)
        )[5]
        warm_started += bool(np.isin(corral, subset).any())
    assert warm_started >= 3  # the warm start is exercised, not only the cold fallback
