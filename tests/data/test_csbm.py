"""The ``csbm`` dataset: contextual stochastic block model graphs with a known reference accuracy.

Every statistical tolerance is 4 standard errors of the sampling error the docstring of each test derives (a
correct generator fails one such check with probability about 6e-5); the graphs are drawn with fixed seeds, so the
tests are deterministic."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from graphnorm.config import RunConfig
from graphnorm.data import load_dataset
from graphnorm.data.csbm import (
    class_means,
    csbm_graph,
    edge_probabilities,
    pair_counts,
    reference_accuracy,
    simplex_accuracy_integral,
)

Z = 4.0  # standard errors allowed


def test_same_seed_same_graph_bit_for_bit_and_another_seed_another_graph() -> None:
    first, second = load_dataset("csbm", seed=3).data, load_dataset("csbm", seed=3).data
    for key in ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(first[key], second[key]), key
    other = load_dataset("csbm", seed=4).data
    assert not torch.equal(first.x, other.x)
    assert first.edge_index.shape != other.edge_index.shape or not torch.equal(first.edge_index, other.edge_index)


def test_same_seed_same_graph_in_a_fresh_process() -> None:
    """No dependence on the process's global random state or on the order of earlier calls."""
    code = (
        "import hashlib, torch; from graphnorm.data.csbm import csbm_graph; d = csbm_graph(num_nodes=500, seed=7);"
        "print(hashlib.sha256(d.edge_index.numpy().tobytes() + d.x.numpy().tobytes() + d.y.numpy().tobytes())"
        ".hexdigest())"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    torch.manual_seed(123)
    np.random.seed(5)
    data = csbm_graph(num_nodes=500, seed=7)
    import hashlib

    here = hashlib.sha256(data.edge_index.numpy().tobytes() + data.x.numpy().tobytes() + data.y.numpy().tobytes())
    assert here.hexdigest() == fresh


def test_generation_leaves_the_global_random_state_alone() -> None:
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    load_dataset("csbm", num_nodes=300)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], numpy_state)


def test_graph_is_simple_undirected_sorted_with_balanced_classes_and_stratified_split() -> None:
    data = csbm_graph(num_nodes=1003, num_classes=3, average_degree=8.0, homophily=0.6, seed=1)
    source, target = data.edge_index
    assert data.edge_index.dtype == torch.long and data.x.dtype == torch.float32 and data.y.dtype == torch.long
    assert not bool((source == target).any()), "self loop"
    keys = source * 1003 + target
    assert bool((keys[1:] > keys[:-1]).all()), "sorted by (source, target), no duplicate"
    assert torch.equal(torch.sort(target * 1003 + source).values, keys), "every edge in both directions"
    assert torch.bincount(data.y).tolist() == [335, 334, 334]  # 1003 = 3 * 334 + 1: the first class one larger
    for c, size in enumerate([335, 334, 334]):
        in_class = data.y == c
        counts = [int((mask & in_class).sum()) for mask in (data.train_mask, data.val_mask, data.test_mask)]
        assert counts == [round(0.2 * size), round(0.2 * size), size - 2 * round(0.2 * size)]
    assert not bool((data.train_mask & data.val_mask).any() | (data.val_mask & data.test_mask).any())
    assert bool((data.train_mask | data.val_mask | data.test_mask).all())


@pytest.mark.parametrize(("classes", "homophily"), [(2, 0.8), (4, 0.3)])
def test_realised_homophily_and_degree_within_the_binomial_error(classes: int, homophily: float) -> None:
    """Inside edges M_in ~ Bin(P_in, p), across M_out ~ Bin(P_out, q), independent. The realised homophily
    h^ = M_in / (M_in + M_out) has, by the delta method, variance ((1-h)^2 Var M_in + h^2 Var M_out) / m^2 with
    m = M_in + M_out's mean; the mean degree 2 (M_in + M_out) / n has variance 4 (Var M_in + Var M_out) / n^2."""
    n, degree = 20000, 10.0
    task = load_dataset("csbm", num_nodes=n, num_classes=classes, average_degree=degree, homophily=homophily)
    p, q = edge_probabilities(n, classes, degree, homophily)
    inside, across = pair_counts(n, classes)
    var_in, var_out = inside * p * (1 - p), across * q * (1 - q)
    m = n * degree / 2
    se_h = math.sqrt((1 - homophily) ** 2 * var_in + homophily**2 * var_out) / m
    se_degree = 2 * math.sqrt(var_in + var_out) / n
    stats = task.stats
    assert abs(stats["realised_homophily"] - homophily) <= Z * se_h, (stats, se_h)
    assert abs(stats["degree_mean"] - degree) <= Z * se_degree, (stats, se_degree)
    # Degrees are sums of independent Bernoulli pairs: nearly Poisson, so their spread is about sqrt(d).
    assert abs(stats["degree_std"] - math.sqrt(degree)) < 0.1 * math.sqrt(degree)
    assert stats["num_edges"] * 2 == task.data.edge_index.size(1)


@pytest.mark.parametrize(("classes", "snr"), [(2, 1.0), (3, 2.5)])
def test_class_mean_distance_and_noise_scale_within_the_sampling_error(classes: int, snr: float) -> None:
    """Empirical class means m^_a, m^_b: m^_a - m^_b = Delta + e with e ~ N(0, s^2 I_F), s^2 = 1/n_a + 1/n_b. So
    D = ||m^_a - m^_b||^2 - F s^2 estimates snr^2 without bias, with variance 4 snr^2 s^2 + 2 F s^4. The pooled
    within-class variance (unit noise) has standard error about sqrt(2 / (N F))."""
    n, features = 6000, 16
    data = load_dataset("csbm", num_nodes=n, num_classes=classes, feature_snr=snr, num_features=features).data
    x, y = data.x.double(), data.y
    means = torch.stack([x[y == c].mean(dim=0) for c in range(classes)])
    sizes = torch.bincount(y).double()
    for a in range(classes):
        for b in range(a + 1, classes):
            s2 = float(1 / sizes[a] + 1 / sizes[b])
            estimate = float(((means[a] - means[b]) ** 2).sum()) - features * s2
            se = math.sqrt(4 * snr**2 * s2 + 2 * features * s2**2)
            assert abs(estimate - snr**2) <= Z * se, (a, b, estimate, snr**2, se)
    residual = x - means[y]
    pooled = float((residual**2).sum()) / ((n - classes) * features)
    assert abs(pooled - 1.0) <= Z * math.sqrt(2 / (n * features)), pooled


def test_class_means_are_centred_and_equidistant() -> None:
    means = torch.from_numpy(class_means(5, 7, 1.7))
    assert torch.allclose(means.sum(dim=0), torch.zeros(7, dtype=torch.float64), atol=1e-12)
    distances = torch.cdist(means, means)
    off_diagonal = distances[~torch.eye(5, dtype=torch.bool)]
    assert torch.allclose(off_diagonal, torch.full_like(off_diagonal, 1.7), atol=1e-12)


@pytest.mark.parametrize("snr", [0.0, 0.5, 1.3, 4.0])
def test_two_class_integral_matches_the_closed_form(snr: float) -> None:
    closed_form = 0.5 * (1 + math.erf(snr / 2 / math.sqrt(2)))
    assert reference_accuracy(snr, 2) == pytest.approx(closed_form, abs=1e-15)
    assert simplex_accuracy_integral(snr, 2) == pytest.approx(closed_form, abs=1e-10)
    assert simplex_accuracy_integral(0.0, 6) == pytest.approx(1 / 6, abs=1e-10)  # no signal: chance


@pytest.mark.parametrize(("classes", "snr"), [(2, 1.0), (3, 1.5), (5, 2.0)])
def test_reference_accuracy_matches_a_monte_carlo_estimate_of_the_bayes_classifier(classes: int, snr: float) -> None:
    """The Bayes rule with the true means (argmax_c <x, mu_c> - ||mu_c||^2 / 2) on the generated features: its
    accuracy over N nodes is a binomial proportion, standard error sqrt(acc (1 - acc) / N)."""
    n = 60000
    data = csbm_graph(num_nodes=n, num_classes=classes, average_degree=2.0, feature_snr=snr, seed=11)
    means = torch.from_numpy(class_means(classes, data.x.size(1), snr))
    scores = data.x.double() @ means.t() - 0.5 * (means**2).sum(dim=1)
    measured = float((scores.argmax(dim=1) == data.y).double().mean())
    expected = reference_accuracy(snr, classes)
    assert abs(measured - expected) <= Z * math.sqrt(expected * (1 - expected) / n), (measured, expected)


def test_task_carries_the_reference_accuracy_and_statistics_into_a_run_record(one_thread: None) -> None:
    from graphnorm.train import run

    options = {"num_nodes": 300, "feature_snr": 1.349, "homophily": 0.9}
    task = load_dataset("csbm", **options)
    assert task.reference_accuracy == reference_accuracy(1.349, 2) == task.stats["reference_accuracy"]
    assert task.reference_accuracy == pytest.approx(0.75, abs=1e-3)
    config = RunConfig.from_dict(
        {"dataset": "csbm", "dataset_kwargs": options, "num_layers": 2, "epochs": 2, "probe": False}
    )
    record = run(config)
    for key in ("reference_accuracy", "realised_homophily", "degree_mean", "degree_std", "num_edges"):
        assert record[key] == task.stats[key], key
    assert record["num_eval_nodes"] == int(task.data.test_mask.sum()) == 300 - 2 * 2 * 30


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"homophily": 1.2}, "homophily must be a finite number in [0, 1]"),
        ({"homophily": -0.1}, "homophily must be a finite number in [0, 1]"),
        ({"homophily": float("nan")}, "homophily must be a finite number"),
        ({"average_degree": 2000}, "average_degree = 2000 must be below num_nodes - 1 = 1999"),
        ({"average_degree": 0}, "average_degree must be a finite number in (0, inf)"),
        ({"feature_snr": -1.0}, "feature_snr must be a finite number in [0, inf)"),
        ({"num_classes": 1}, "num_classes must be an integer >= 2"),
        ({"num_nodes": 2.5}, "num_nodes must be an integer >= 2"),
        ({"num_features": 2, "num_classes": 3}, "num_features must be an integer >= num_classes = 3"),
        ({"num_nodes": 100, "average_degree": 60, "homophily": 1.0}, "edge probability within classes of 1.2"),
        ({"train_fraction": 0.6, "val_fraction": 0.4}, "each split needs at least one node per class"),
        ({"seed": -1}, "seed must be a non-negative integer"),
    ],
)
def test_bad_options_are_one_clear_error(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match="csbm: ") as error:
        load_dataset("csbm", **options)
    assert message in str(error.value)
    with pytest.raises(ValueError, match="dataset_kwargs") as error:
        RunConfig.from_dict({"dataset": "csbm", "dataset_kwargs": options})
    # the csbm check's own message, or the config's type check naming the option (a NaN, a float for an integer)
    assert message in str(error.value) or any(f"dataset_kwargs.{key} must be" in str(error.value) for key in options)
