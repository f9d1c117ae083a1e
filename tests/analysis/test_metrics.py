"""Collapse metrics: analytic cases, a brute-force check of the cone angle, invariances, dtypes, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from graphnorm.analysis import (
    collapse_metrics,
    cone_angle,
    cone_angle_info,
    dirichlet_energy,
    effective_rank,
    mad,
    mean_cosine_similarity,
    singular_values,
    stable_rank,
)

ROW_METRICS = [effective_rank, stable_rank, mean_cosine_similarity, cone_angle, mad]


def test_identical_rows_are_fully_collapsed():
    x = torch.tensor([[1.0, 2.0, -0.5]]).repeat(7, 1)
    assert cone_angle(x) == pytest.approx(0.0, abs=1e-6)
    assert mean_cosine_similarity(x) == pytest.approx(1.0)
    assert effective_rank(x) == pytest.approx(1.0)
    assert stable_rank(x) == pytest.approx(1.0)
    assert mad(x) == pytest.approx(0.0, abs=1e-12)


def test_cone_angle_analytic():
    assert cone_angle(torch.eye(2)) == pytest.approx(45.0, abs=1e-3)
    assert cone_angle(torch.eye(3)) == pytest.approx(math.degrees(math.acos(1 / math.sqrt(3))), abs=1e-3)
    assert cone_angle(torch.eye(3)) == pytest.approx(54.7356, abs=1e-3)
    x = torch.randn(5, 4)
    assert cone_angle(torch.cat([x, -x])) == 90.0
    # Opposite pair plus a perpendicular row: origin on the hull boundary, answer exactly 90.
    assert cone_angle(torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])) == 90.0
    info = cone_angle_info(torch.tensor([[3.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))
    assert info.angle_deg == pytest.approx(45.0, abs=1e-3)
    assert info.num_zero_rows == 1 and info.num_rows == 3 and info.converged
    np.testing.assert_allclose(info.axis, [math.sqrt(0.5), math.sqrt(0.5)], atol=1e-6)


def _brute_force_cone_angle(points: np.ndarray, samples: int = 20_000, seed: int = 0) -> float:
    """Min over many random unit axes of the max angle, refined around the best one: an upper bound."""
    rng = np.random.default_rng(seed)
    units = points / np.linalg.norm(points, axis=1, keepdims=True)
    axes = rng.standard_normal((samples, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    best = axes[np.argmax((axes @ units.T).min(axis=1))]
    scale = 0.05
    for _ in range(40):  # local refinement: shrinking random perturbations of the best axis
        candidates = best + scale * rng.standard_normal((2000, 3))
        candidates = np.vstack([best, candidates / np.linalg.norm(candidates, axis=1, keepdims=True)])
        best = candidates[np.argmax((candidates @ units.T).min(axis=1))]
        scale *= 0.7
    return math.degrees(math.acos(min(1.0, (units @ best).min())))


@pytest.mark.parametrize("seed", range(4))
def test_cone_angle_matches_brute_force_in_3d(seed):
    rng = np.random.default_rng(seed)
    points = rng.standard_normal((int(rng.integers(3, 40)), 3)) + np.array([0.0, 0.0, 2.5 + seed])
    exact = cone_angle(torch.from_numpy(points))
    brute = _brute_force_cone_angle(points, seed=seed)
    assert exact < 90.0
    # The brute force gives a feasible cone: never below the optimum, and close above it.
    assert brute >= exact - 1e-3
    assert brute == pytest.approx(exact, abs=5e-3)


def test_cone_angle_optimality_certificate_high_dimension():
    x = torch.randn(2708, 64, dtype=torch.float64) + 4.0 * torch.nn.functional.one_hot(torch.tensor(0), 64)
    info = cone_angle_info(x)
    assert info.converged and info.gap_deg <= 1e-4 and info.angle_deg < 90
    # The returned axis really contains every row at the reported angle.
    units = x.numpy() / np.linalg.norm(x.numpy(), axis=1, keepdims=True)
    worst = math.degrees(math.acos(min(1.0, (units @ info.axis).min())))
    assert worst == pytest.approx(info.angle_deg, abs=1e-6)


def _least_squares(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(matrix, rhs, rcond=None)[0]


def test_min_norm_point_solver_pieces_match_lapack_and_numpy():
    """The compiled solver's pieces against the libraries they replace: the bordered affine solve equals LAPACK's
    (np.linalg.solve) and, for a corral with a repeated row (exactly singular), NumPy's least squares."""
    from graphnorm.analysis.min_norm_point import _solve_affine

    rng = np.random.default_rng(0)
    corral = rng.standard_normal((4, 6))
    corral /= np.linalg.norm(corral, axis=1, keepdims=True)
    for rows, solve in ((corral, np.linalg.solve), (np.vstack([corral, corral[1]]), _least_squares)):
        k = rows.shape[0]
        bordered = np.block([[rows @ rows.T, np.ones((k, 1))], [np.ones((1, k)), np.zeros((1, 1))]])
        wanted = solve(bordered, np.r_[np.zeros(k), 1.0])[:k]
        weights = _solve_affine(rows)
        np.testing.assert_allclose(weights, wanted, rtol=1e-12, atol=1e-14)
        assert weights.sum() == pytest.approx(1.0)


def test_cone_angle_with_many_repeated_rows():
    # Deep layers repeat rows (nodes with the same neighbourhood): the corral may hold equal rows.
    rng = np.random.default_rng(1)
    base = rng.standard_normal((30, 5)) + np.array([2.0, 0.0, 0.0, 0.0, 0.0])
    once, repeated = cone_angle_info(base), cone_angle_info(np.vstack([base, base, base[:7]]))
    assert once.converged and repeated.converged
    assert repeated.angle_deg == pytest.approx(once.angle_deg, abs=2e-4)


def test_orthonormal_and_low_rank():
    q, _ = torch.linalg.qr(torch.randn(16, 5, dtype=torch.float64))
    rows = q.T  # 5 x 16 orthonormal rows
    assert effective_rank(rows) == pytest.approx(5.0, abs=1e-9)
    assert stable_rank(rows) == pytest.approx(5.0, abs=1e-9)
    assert cone_angle(rows) == pytest.approx(math.degrees(math.acos(1 / math.sqrt(5))), abs=1e-3)
    low_rank = torch.randn(200, 3) @ torch.randn(3, 32)
    assert stable_rank(low_rank) <= 3 + 1e-6
    assert effective_rank(low_rank) <= 3 + 1e-4  # finite (0 log 0 = 0), unlike the reference code's NaN
    assert not math.isnan(effective_rank(torch.zeros(3, 4)))
    assert effective_rank(torch.zeros(3, 4)) == 0.0 and stable_rank(torch.zeros(3, 4)) == 0.0


def test_singular_values_normalizations():
    x = torch.randn(50, 8, dtype=torch.float64)
    raw = singular_values(x, normalize=None)
    np.testing.assert_allclose(raw.numpy(), torch.linalg.svdvals(x).numpy(), rtol=1e-8)
    assert singular_values(x)[0] == pytest.approx(1.0)
    assert float(singular_values(x, normalize="sum").sum()) == pytest.approx(1.0)
    assert (singular_values(x).diff() <= 1e-12).all()
    centered = singular_values(x + 100.0, center=True, normalize=None)
    np.testing.assert_allclose(centered.numpy(), singular_values(x, center=True, normalize=None).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="normalize"):
        singular_values(x, normalize="l2")


def test_mean_cosine_and_mad_against_dense_reference():
    x = torch.randn(30, 6, dtype=torch.float64)
    x[3] = 0.0  # zero rows are excluded
    units = torch.nn.functional.normalize(x[x.norm(dim=1) > 0], dim=1)
    cosine = units @ units.T
    m = units.size(0)
    expected = float((cosine.sum() - cosine.diagonal().sum()) / (m * (m - 1)))
    assert mean_cosine_similarity(x) == pytest.approx(expected)
    assert mad(x) == pytest.approx(1.0 - expected)
    # Neighbour MAD: per-node mean distance over neighbours, then mean over nodes; zero distances count.
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 2, 5], [1, 0, 2, 1, 0, 2, 3]])  # (2,2) self-loop, (5,3) zero row
    full = torch.nn.functional.normalize(x, dim=1)

    def distance(i, j):
        return 1.0 - float(full[i] @ full[j])

    per_node = [distance(0, 1), (distance(1, 0) + distance(1, 2)) / 2, (distance(2, 1) + distance(2, 0)) / 2]
    assert mad(x, edge_index) == pytest.approx(sum(per_node) / 3)
    same = torch.ones(4, 3)
    assert mad(same, torch.tensor([[0, 1, 2], [1, 2, 3]])) == pytest.approx(0.0, abs=1e-12)


def test_dirichlet_energy():
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 2.0]])
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    assert dirichlet_energy(x, edge_index) == pytest.approx((1 + 1 + 4 + 4) / 3)
    frobenius_sq = 1 + 1 + 4
    assert dirichlet_energy(x, edge_index, normalized=True) == pytest.approx(10 / 3 / frobenius_sq)
    assert dirichlet_energy(torch.ones(3, 2), edge_index) == 0.0
    assert dirichlet_energy(torch.zeros(3, 2), edge_index, normalized=True) == 0.0
    outside = r"^dirichlet_energy: edge_index holds node ids in \[0, 3\], outside \[0, 3\) for a graph of 3 nodes$"
    with pytest.raises(ValueError, match=outside):
        dirichlet_energy(x, torch.tensor([[0], [3]]))
    with pytest.raises(TypeError, match=r"^mad: edge_index must be a torch.Tensor, got list$"):
        mad(x, [[0], [1]])


def test_invariances():
    x = torch.randn(40, 8, dtype=torch.float64) + 1.0
    permutation = torch.randperm(40)
    for metric in ROW_METRICS:
        assert metric(x[permutation]) == pytest.approx(metric(x), rel=1e-9, abs=1e-9), metric.__name__
        assert metric(7.5 * x) == pytest.approx(metric(x), rel=1e-9, abs=1e-9), metric.__name__
    edge_index = torch.randint(0, 40, (2, 100))
    inverse = torch.argsort(permutation)
    permuted_edges = inverse[edge_index]
    assert dirichlet_energy(x[permutation], permuted_edges) == pytest.approx(dirichlet_energy(x, edge_index))
    assert mad(x[permutation], permuted_edges) == pytest.approx(mad(x, edge_index))
    assert dirichlet_energy(3 * x, edge_index, normalized=True) == pytest.approx(
        dirichlet_energy(x, edge_index, normalized=True)
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_inputs_computed_in_float64(dtype):
    x = torch.randn(64, 16).to(dtype)
    reference = x.to(torch.float64)  # same values, float64 storage: results must agree exactly
    for metric in ROW_METRICS:
        assert metric(x) == pytest.approx(metric(reference), rel=1e-12, abs=1e-12), metric.__name__
    flat = collapse_metrics(x, torch.randint(0, 64, (2, 128)))
    assert all(isinstance(value, float) for value in flat.values())


def test_bad_input_errors():
    for metric in ROW_METRICS + [collapse_metrics]:
        with pytest.raises(ValueError, match="NaN"):
            metric(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
        with pytest.raises(ValueError, match="no rows"):
            metric(torch.zeros(0, 4))
        with pytest.raises(ValueError, match=r"shape \[n, d\]"):
            metric(torch.zeros(4))
    with pytest.raises(ValueError, match="Inf"):
        effective_rank(torch.tensor([[1.0, float("inf")]]))
    # Undefined (not erroneous) cases give NaN.
    assert math.isnan(mean_cosine_similarity(torch.ones(1, 3)))
    assert math.isnan(cone_angle(torch.zeros(3, 3)))
    assert cone_angle_info(torch.zeros(3, 3)).num_zero_rows == 3


def test_collapse_metrics_single_graph_matches_functions():
    x = torch.randn(50, 8) + 0.5
    edge_index = torch.randint(0, 50, (2, 200))
    flat = collapse_metrics(x, edge_index)
    assert flat["effective_rank"] == pytest.approx(effective_rank(x), rel=1e-6)
    assert flat["stable_rank"] == pytest.approx(stable_rank(x), rel=1e-9)
    assert flat["mean_cosine"] == pytest.approx(mean_cosine_similarity(x))
    assert flat["cone_angle"] == pytest.approx(cone_angle(x), abs=1e-3)
    assert flat["mad"] == pytest.approx(mad(x))
    assert flat["mad_neighbors"] == pytest.approx(mad(x, edge_index))
    assert flat["dirichlet_energy"] == pytest.approx(dirichlet_energy(x, edge_index))
    assert flat["dirichlet_energy_normalized"] == pytest.approx(dirichlet_energy(x, edge_index, normalized=True))
    assert flat["zero_row_fraction"] == 0.0


def _random_graph(num_nodes: int, num_edges: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(num_nodes, 6) + 0.3, torch.randint(0, num_nodes, (2, num_edges))


def test_collapse_metrics_per_graph_independent_of_batch_company_and_padding():
    graphs = [_random_graph(n, 3 * n) for n in (5, 9, 12)]
    alone = [collapse_metrics(x, edge_index) for x, edge_index in graphs]
    x = torch.cat([g[0] for g in graphs])
    offsets = [0, 5, 14]
    edge_index = torch.cat([g[1] + offset for g, offset in zip(graphs, offsets)], dim=1)
    batch = torch.cat([torch.full((g[0].size(0),), i) for i, g in enumerate(graphs)])
    batched = collapse_metrics(x, edge_index, batch=batch)
    for name in ("effective_rank", "stable_rank", "mean_cosine", "cone_angle", "mad_neighbors", "dirichlet_energy"):
        values = np.array([single[name] for single in alone])
        assert batched[name] == pytest.approx(values.mean(), abs=1e-3 if name == "cone_angle" else 1e-9), name
        assert batched[f"{name}_std"] == pytest.approx(values.std(), abs=1e-3 if name == "cone_angle" else 1e-9)
    assert batched["effective_rank_pooled"] == pytest.approx(effective_rank(x), rel=1e-6)
    # Token rows (one per graph) are reported separately and do not disturb the node metrics.
    tokens = torch.randn(3, 6) * 100
    with_tokens = collapse_metrics(
        torch.cat([x, tokens]),
        edge_index,
        batch=torch.cat([batch, torch.arange(3)]),
        token_mask=torch.cat([torch.zeros(x.size(0), dtype=torch.bool), torch.ones(3, dtype=torch.bool)]),
    )
    for name, value in batched.items():
        assert with_tokens[name] == pytest.approx(value, abs=1e-3 if "cone" in name else 1e-9), name
    assert with_tokens["token_effective_rank"] == pytest.approx(effective_rank(tokens), rel=1e-6)
    assert with_tokens["token_cone_angle"] == pytest.approx(cone_angle(tokens), abs=1e-3)


def test_zero_padding_rows_change_nothing_but_the_zero_fraction():
    x = torch.randn(20, 5) + 1.0
    padded = torch.cat([x, torch.zeros(7, 5)])
    for metric in ROW_METRICS:
        assert metric(padded) == pytest.approx(metric(x), rel=1e-9, abs=1e-6), metric.__name__
    assert collapse_metrics(padded)["zero_row_fraction"] == pytest.approx(7 / 27)


# --- the robust cone (cone_angle_q90) ------------------------------------------------------------------------
def _tight_bundle(num_rows: int = 100, spread_deg: float = 5.0, dim: int = 6, seed: int = 0) -> torch.Tensor:
    """Rows within ``spread_deg`` of the first axis, with random lengths."""
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.randn(num_rows, dim - 1, generator=generator, dtype=torch.float64)
    offsets = offsets / offsets.norm(dim=1, keepdim=True) * math.tan(math.radians(spread_deg))
    offsets *= torch.rand(num_rows, 1, generator=generator, dtype=torch.float64)
    rows = torch.cat([torch.ones(num_rows, 1, dtype=torch.float64), offsets], dim=1)
    return rows * (0.5 + 3 * torch.rand(num_rows, 1, generator=generator, dtype=torch.float64))


def test_robust_cone_ignores_one_outlier_row_where_the_exact_cone_jumps():
    from graphnorm.analysis.metrics import robust_cone_angle

    bundle = _tight_bundle()
    outlier = torch.zeros(1, 6, dtype=torch.float64)
    outlier[0, 0], outlier[0, 1] = math.cos(math.radians(70)), math.sin(math.radians(70))
    with_outlier = torch.cat([bundle, outlier])
    assert cone_angle(bundle) <= 5.0 + 1e-3
    assert cone_angle(with_outlier) > 33.0  # the exact cone must reach the outlier: at least half of ~70 degrees
    assert robust_cone_angle(with_outlier) <= cone_angle(bundle) + 1e-3
    assert robust_cone_angle(with_outlier) == pytest.approx(robust_cone_angle(bundle), abs=0.5)


def test_robust_cone_is_the_exact_cone_at_q1_and_grows_with_q():
    from graphnorm.analysis.metrics import robust_cone_angle

    x = torch.randn(80, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 1.0
    exact = cone_angle(x)
    assert robust_cone_angle(x, q=1.0) == pytest.approx(exact, abs=1e-9)
    levels = [robust_cone_angle(x, q=q) for q in (0.25, 0.5, 0.75, 0.9, 1.0)]
    assert levels == sorted(levels) and levels[0] < levels[-1]
    assert all(level <= exact + 1e-9 for level in levels)
    assert robust_cone_angle(torch.eye(2)) == pytest.approx(45.0, abs=1e-3)  # q m rounds up: both rows kept


def test_robust_cone_invariant_to_row_scaling_and_order_and_ignores_zero_rows():
    from graphnorm.analysis.metrics import robust_cone_angle

    generator = torch.Generator().manual_seed(5)
    x = torch.randn(60, 4, generator=generator, dtype=torch.float64) + 0.8
    reference = robust_cone_angle(x)
    scales = 10 ** torch.empty(60, 1, dtype=torch.float64).uniform_(-3, 3, generator=generator)
    assert robust_cone_angle(x * scales) == pytest.approx(reference, abs=1e-6)
    assert robust_cone_angle(x[torch.randperm(60, generator=generator)]) == pytest.approx(reference, abs=1e-6)
    assert robust_cone_angle(torch.cat([x, torch.zeros(5, 4, dtype=torch.float64)])) == pytest.approx(reference)


def test_robust_cone_edge_cases_and_bad_input():
    from graphnorm.analysis.metrics import robust_cone_angle

    assert robust_cone_angle(torch.tensor([[1.0, 0.0], [-1.0, 0.0]])) == 90.0  # no mean direction
    assert math.isnan(robust_cone_angle(torch.zeros(3, 2)))
    for q in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="q must be in"):
            robust_cone_angle(torch.ones(3, 2), q=q)


def test_collapse_records_carry_the_robust_cone_per_graph_and_pooled():
    from graphnorm.analysis.metrics import robust_cone_angle

    graphs = [_tight_bundle(30, seed=s).float() for s in (1, 2)]
    x = torch.cat(graphs)
    single = collapse_metrics(graphs[0])
    assert single["cone_angle_q90"] == pytest.approx(robust_cone_angle(graphs[0], tol_deg=1e-3), abs=1e-6)
    batched = collapse_metrics(x, batch=torch.tensor([0] * 30 + [1] * 30))
    expected = [robust_cone_angle(g, tol_deg=1e-3) for g in graphs]
    assert batched["cone_angle_q90"] == pytest.approx(float(np.mean(expected)), abs=1e-6)
    assert batched["cone_angle_q90_pooled"] == pytest.approx(robust_cone_angle(x, tol_deg=1e-3), abs=1e-6)


def test_robust_cone_where_the_exact_cone_is_certified_90_by_centred_rows():
    """Rows summing to zero (as after PairNorm): the exact cone is 90 by its certificate, without a Wolfe cycle;
    the robust cone is still computed, per graph too (the batched path skips only graphs with no mean direction)."""
    from graphnorm.analysis.metrics import robust_cone_angle

    graph = torch.zeros(10, 3, dtype=torch.float64)
    graph[:9, 0] = 1.0
    graph[9, 0] = -9.0  # sum of rows 0; mean unit row 0.8 e1
    graph[:9, 1] = torch.linspace(-0.01, 0.01, 9, dtype=torch.float64)
    assert cone_angle(graph) == 90.0
    single = robust_cone_angle(graph, tol_deg=1e-3)
    assert single < 1.0
    batched = collapse_metrics(torch.cat([graph, graph]), batch=torch.tensor([0] * 10 + [1] * 10))
    assert batched["cone_angle"] == 90.0
    assert batched["cone_angle_q90"] == pytest.approx(single, abs=1e-9)
