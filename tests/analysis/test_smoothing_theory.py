"""The smoothing theory (graphnorm.analysis.smoothing_theory) against its limits and against simulation on generated
CSBM graphs.

Measured quantities are per-graph averages over nodes; their sampling error is estimated from independent graphs
(seeds 0..R-1): standard error = std over graphs / sqrt(R), and a check allows Z = 4 of them (with R = 8 graphs, a
correct formula fails one such check with probability about 0.5 %, Student's t with 7 degrees of freedom; the seeds
are fixed, so the outcome is deterministic). One step (k = 1) is exact in the theory, so there the check is the
sampling error alone. Beyond one step the tree calculation approximates revisited nodes' degrees (the "annealed"
degrees of the module docstring), a bias this test bounds separately, as stated where it does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from graphnorm.analysis.smoothing_theory import (
    class_mean_separation,
    class_transition_eigenvalue,
    linear_accuracy,
    mean_aggregate,
    predicted_best_depth,
    smoothing_moments,
    walk_distances,
    within_class_variance,
)
from graphnorm.data.csbm import class_means, csbm_graph, reference_accuracy

Z = 4.0
GRAPHS = 8
NODES = 20000
NOISE_COLUMNS = 8


def measured_moments(homophily: float, steps: int, degree: float = 10.0) -> dict[str, np.ndarray]:
    """a_k = mean_i s_i (P^k s)_i, b_k = mean_i (P^k s)_i^2 for the class signs s = +-1 (2 classes), and
    c_k = mean_i (P^k z)_i^2 for unit noise z, on GRAPHS graphs: arrays [GRAPHS, steps + 1]."""
    a, b, c = [], [], []
    for seed in range(GRAPHS):
        data = csbm_graph(num_nodes=NODES, average_degree=degree, homophily=homophily, seed=seed)
        signs = (2 * data.y - 1).double()[:, None]
        noise = torch.from_numpy(np.random.default_rng(seed).standard_normal((NODES, NOISE_COLUMNS)))
        smoothed = mean_aggregate(torch.cat([signs, noise], dim=1), data.edge_index, steps)
        a.append([float((h[:, 0] * signs[:, 0]).mean()) for h in smoothed])
        b.append([float((h[:, 0] ** 2).mean()) for h in smoothed])
        c.append([float((h[:, 1:] ** 2).mean()) for h in smoothed])
    return {"a": np.array(a), "b": np.array(b), "c": np.array(c)}


def standard_error(values: np.ndarray) -> np.ndarray:
    return values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])


def test_distributions_are_probabilities_and_step_zero_is_the_input() -> None:
    single, pair = walk_distances(12, 4.0)
    for distribution in (*single, *pair):
        assert (distribution >= 0).all() and distribution.sum() == pytest.approx(1.0, abs=1e-12)
    moments = smoothing_moments(5, 0.8, 10.0)
    assert moments["a"][0] == moments["b"][0] == moments["c"][0] == 1.0
    assert linear_accuracy(3, 1.2, 0.8, 10.0)[0] == pytest.approx(reference_accuracy(1.2), abs=1e-15)
    assert linear_accuracy(3, 1.2, 0.8, 10.0, num_classes=4)[0] == pytest.approx(reference_accuracy(1.2, 4), abs=1e-12)


@pytest.mark.parametrize(("homophily", "classes"), [(0.9, 2), (0.3, 2), (0.6, 3)])
def test_dense_limit_is_the_mean_field_contraction_of_wu_et_al(homophily: float, classes: int) -> None:
    """Degree -> infinity: the walk leaves at every step, so the separation contracts by
    lambda = (p - q)/(p + q) = (C h - 1)/(C - 1) per step, the signal spread and the noise vanish."""
    lam = class_transition_eigenvalue(homophily, classes)
    separation = class_mean_separation(6, 2.0, homophily, 1e7, classes)
    assert np.allclose(separation, 2.0 * lam ** np.arange(7), atol=1e-5)
    variance = within_class_variance(6, 2.0, homophily, 1e7, classes)
    assert np.all(variance["total"][1:] < 1e-5)


@pytest.mark.parametrize("homophily", [0.5, 0.75])
def test_one_step_is_exact_against_simulation(homophily: float) -> None:
    """k = 1: a_1 = E[(1 + lambda D)/(D + 1)], b_1, c_1 = E[1/(D + 1)] hold exactly for Poisson degrees (the
    block model's are binomial, nearer Poisson the larger the graph)."""
    measured = measured_moments(homophily, 1)
    theory = smoothing_moments(1, homophily, 10.0)
    for key in ("a", "b", "c"):
        mean, se = measured[key][:, 1].mean(), standard_error(measured[key])[1]
        assert abs(mean - theory[key][1]) <= Z * se, (key, mean, theory[key][1], se)


@pytest.mark.parametrize("homophily", [0.5, 0.75])
def test_several_steps_against_simulation_within_the_annealing_bias(homophily: float) -> None:
    """k = 2..4: the theory draws a revisited node's degree afresh, and E[1/(D+1)]^2 < E[1/(D+1)^2] (Jensen), so it
    underestimates how often two walks meet: c_k (and b_k, which is c_k at lambda = 0) comes out low. Measured on
    these graphs at degree 10: c_k low by 7 %, 16 %, 25 % at k = 2, 3, 4 (both homophilies), b_k by up to 20 %
    (h = 0.5) and 5 % (h = 0.75), a_k high by under 4.5 %. The checks: a_k within 4 sampling errors plus 6 % of the
    value; b_k and c_k within 4 sampling errors plus 30 %, and never above the measurement by more than 4 sampling
    errors (the bias has a sign). The test fails if a change moves the formulas farther from the graphs than that."""
    measured = measured_moments(homophily, 4)
    theory = smoothing_moments(4, homophily, 10.0)
    for key, bias in (("a", 0.06), ("b", 0.30), ("c", 0.30)):
        mean, se = measured[key].mean(axis=0), standard_error(measured[key])
        for k in range(2, 5):
            allowed = Z * se[k] + bias * abs(theory[key][k])
            assert abs(mean[k] - theory[key][k]) <= allowed, (key, k, mean[k], theory[key][k], allowed)
            if key != "a":
                assert theory[key][k] <= mean[k] + Z * se[k], (key, k, mean[k], theory[key][k])
    if homophily == 0.5:  # lambda = 0: the whole separation is walks that came back; the dense limit says 0
        assert measured["a"].mean(axis=0)[2] > 20 * standard_error(measured["a"])[2]


def test_separation_against_the_class_means_of_smoothed_features() -> None:
    """The distance between the two classes' empirical mean smoothed features, feature_snr * a_k, checked on one
    graph per seed with the feature noise in: its sampling error per graph is that of the class-mean difference,
    about sqrt(4 / N) per coordinate before smoothing."""
    snr, homophily, steps = 1.349, 0.7, 3
    theory = class_mean_separation(steps, snr, homophily, 10.0)
    distances = []
    for seed in range(GRAPHS):
        data = csbm_graph(num_nodes=NODES, homophily=homophily, feature_snr=snr, seed=seed)
        direction = torch.from_numpy(class_means(2, 16, snr)[1] - class_means(2, 16, snr)[0]) / snr
        smoothed = mean_aggregate(data.x.double() @ direction[:, None].double(), data.edge_index, steps)
        distances.append([float(h[data.y == 1].mean() - h[data.y == 0].mean()) for h in smoothed])
    distances = np.array(distances)
    mean, se = distances.mean(axis=0), standard_error(distances)
    assert abs(mean[1] - theory[1]) <= Z * se[1], (mean, theory, se)
    for k in (2, 3):
        assert abs(mean[k] - theory[k]) <= Z * se[k] + 0.02 * theory[k], (k, mean, theory, se)


def test_predicted_best_depth_trades_denoising_against_mixing() -> None:
    # No homophily (two classes, h = 1/2): the neighbours carry no class, so smoothing only hurts: depth 0.
    assert predicted_best_depth(1.0, 0.5, 10.0) == 0
    # Strong homophily, weak features: many steps help; more homophily -> deeper before mixing wins.
    assert predicted_best_depth(0.5, 0.9, 10.0) > predicted_best_depth(1.35, 0.7, 10.0) >= 2
    # Among the depths a GCN sweep has (>= 1 layer), at h = 1/2 the walk's returns make even depths better.
    assert predicted_best_depth(1.0, 0.5, 10.0, depths=[1, 2, 4, 8]) == 2
    accuracy = linear_accuracy(8, 1.0, 0.5, 10.0)
    assert accuracy[2] > accuracy[1] and accuracy[2] > accuracy[3]
    with pytest.raises(ValueError, match="depths must be non-negative"):
        predicted_best_depth(1.0, 0.5, 10.0, depths=[-1, 2])
    with pytest.raises(ValueError, match="homophily must be in"):
        smoothing_moments(3, 1.5, 10.0)
