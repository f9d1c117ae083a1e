"""ContraNorm's linear-time estimator (positive random features): unbiased sums, the exclusion as the estimator's own
terms, convergence to the exact kernel as the features grow, per-graph independence, gradients, determinism, memory.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_contranorm import _rss_bytes, random_graph_batch
from torch import Tensor

import graphnorm.norms.ops.contranorm_random_features as linear
from graphnorm.config import RunConfig
from graphnorm.norms import ContraNorm, build_norm
from graphnorm.sweep import expand_grid, load_sweep_config

REPO = Path(__file__).resolve().parents[2]


def exact_mix(x: Tensor, edge_index: Tensor | None, tau: float, mask_self: bool) -> Tensor:
    """``P x`` of one graph through the exact kernel (the module's default path)."""
    norm = ContraNorm(x.size(1), tau=tau, exclude_neighbors=mask_self, layer_norm=False).to(x.dtype)
    return norm.negative_mix(x, None, edge_index)


def approximate_mix(x: Tensor, edge_index: Tensor | None, tau: float, mask_self: bool, m: int, seed: int) -> Tensor:
    norm = ContraNorm(x.size(1), tau=tau, exclude_neighbors=mask_self, layer_norm=False, random_features=m,
                      feature_seed=seed).to(x.dtype)  # fmt: skip
    return norm.negative_mix(x, None, edge_index)


def relative_error(estimate: Tensor, exact: Tensor) -> float:
    return float((estimate - exact).norm() / exact.norm())


def clustered_features(n: int, d: int, seed: int) -> Tensor:
    """Rows around a few shared directions, as hidden features of a GNN are (so ``P x`` is far from zero)."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(4, d, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 4, (n,), generator=generator)
    return centres[labels] + 0.7 * torch.randn(n, d, generator=generator, dtype=torch.float64)


def test_features_are_gaussian_rows_in_orthogonal_blocks() -> None:
    weights = linear.orthogonal_gaussian_features(40, 8, seed=3)
    assert weights.shape == (40, 8) and weights.dtype == torch.float64
    block = weights[:8]
    gram = block @ block.T
    torch.testing.assert_close(
        gram - torch.diag(torch.diagonal(gram)), torch.zeros(8, 8, dtype=torch.float64), atol=1e-10, rtol=0
    )
    assert torch.equal(weights, linear.orthogonal_gaussian_features(40, 8, seed=3))
    assert not torch.equal(weights, linear.orthogonal_gaussian_features(40, 8, seed=4))
    # marginally N(0, I): the squared length of a row averages d (chi-square with d degrees of freedom)
    many = linear.orthogonal_gaussian_features(4000, 8, seed=0)
    assert abs(float(many.square().sum(dim=1).mean()) - 8.0) < 0.3
    assert abs(float(many.mean())) < 0.05


def test_numerator_and_denominator_are_unbiased() -> None:
    """Over many draws of W, the mean of the un-shifted estimated sums (numerator and softmax denominator over the
    negatives) matches the exact sums within 5 standard errors, for every row and column."""
    n, d, m, draws, tau = 30, 4, 8, 400, 0.7
    _, edge_index = random_graph_batch([n], edges_per_node=2, seed=1)
    x = clustered_features(n, d, seed=0)
    x_hat = F.normalize(x, dim=1)
    rows, cols, _ = linear._unique_excluded_pairs(edge_index[0], edge_index[1], n, True, x.device)
    weights_exact = torch.exp(x_hat @ x_hat.T / tau)
    weights_exact[rows, cols] = 0.0
    exact = torch.cat([weights_exact @ x, weights_exact.sum(dim=1, keepdim=True)], dim=1)  # [n, d + 1]
    estimates = []
    all_draws = linear.orthogonal_gaussian_features(m * draws, d, seed=0)  # m = 2 whole orthogonal blocks per draw
    for w in all_draws.split(m):
        sums, log_scale = linear.random_feature_sums(x_hat, x, 1.0 / tau, w, [n], rows, cols)
        estimates.append(sums * torch.exp(log_scale) / m)
    estimates = torch.stack(estimates)  # [draws, n, d + 1]
    standard_error = estimates.std(dim=0) / math.sqrt(draws)
    z = (estimates.mean(dim=0) - exact).abs() / standard_error
    assert float(z.max()) < 5.0, f"largest z-score {float(z.max()):.2f}"


@pytest.mark.parametrize("mask_self", [True, False])
def test_error_falls_like_one_over_sqrt_m(mask_self) -> None:
    """Relative error of ``P x`` against the exact kernel, averaged over 4 feature seeds: 16x more features cut it
    about 4x (at least 2.5x here), and 4096 features are within 6%."""
    n, d = 400, 8
    _, edge_index = random_graph_batch([n], edges_per_node=4, seed=2)
    edges = edge_index if mask_self else None
    x = clustered_features(n, d, seed=1)
    exact = exact_mix(x, edges, 0.5, mask_self)
    errors = {
        m: sum(relative_error(approximate_mix(x, edges, 0.5, mask_self, m, seed), exact) for seed in range(4)) / 4
        for m in (64, 1024, 4096)
    }
    assert errors[64] / errors[1024] > 2.5, errors
    assert errors[4096] < 0.06, errors


def test_exclusion_subtracts_the_estimators_own_terms() -> None:
    """The output equals the estimator's n x n kernel matrix with the excluded pairs zeroed, row-normalized: the
    correction removes exactly those terms (once per pair, however often the edge is listed, the self-loop included),
    per graph of a batch."""
    sizes = [9, 40, 1, 25]
    batch, edge_index = random_graph_batch(sizes, edges_per_node=3, seed=5)
    n, d, m, tau = batch.numel(), 5, 12, 0.8
    x = torch.randn(n, d, dtype=torch.float64)
    x_hat = F.normalize(x, dim=1)
    w = linear.orthogonal_gaussian_features(m, d, seed=7)
    u = x_hat / math.sqrt(tau)
    phi = torch.exp(u @ w.T - 0.5 * u.square().sum(dim=1, keepdim=True))  # [n, m]
    kernel = phi @ phi.T * (batch.unsqueeze(0) == batch.unsqueeze(1))  # no mass across graphs
    kernel[edge_index[0], edge_index[1]] = 0.0
    kernel.fill_diagonal_(0.0)
    has_negatives = kernel.sum(dim=1, keepdim=True) > 0
    expected = kernel @ x / kernel.sum(dim=1, keepdim=True).where(has_negatives, torch.ones(()))
    got = linear.random_feature_mix(x_hat, x, 1.0 / tau, w, sizes, edge_index[0], edge_index[1], True)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)
    assert torch.equal(got[9 + 40], torch.zeros(d, dtype=torch.float64))  # the one-node graph: no negatives


def test_graphs_in_a_batch_are_independent_and_order_free() -> None:
    """Each graph of a batch (sorted or shuffled) gets what it gets alone: no mass crosses graphs."""
    sizes = [20, 300, 9]
    batch, edge_index = random_graph_batch(sizes, seed=4)
    x = torch.randn(batch.numel(), 8, dtype=torch.float64)
    norm = ContraNorm(8, random_features=64).double()
    together = norm(x, batch=batch, edge_index=edge_index)
    start = 0
    for graph, size in enumerate(sizes):
        inside = batch[edge_index[0]] == graph
        alone = norm(x[start : start + size], edge_index=edge_index[:, inside] - start)
        torch.testing.assert_close(together[start : start + size], alone, atol=1e-12, rtol=1e-10)
        start += size
    perm = torch.randperm(batch.numel(), generator=torch.Generator().manual_seed(0))
    shuffled = norm(x[perm], batch=batch[perm], edge_index=torch.argsort(perm)[edge_index])
    torch.testing.assert_close(shuffled, together[perm], atol=1e-12, rtol=1e-10)
    with pytest.raises(ValueError, match="different graphs"):
        norm(x[:29], batch=batch[:29], edge_index=torch.tensor([[0], [25]]))


@pytest.mark.parametrize("exclude_neighbors", [True, False])
def test_gradcheck_float64(exclude_neighbors) -> None:
    """Autograd through the features and the pair correction's own sparse backward, against finite differences."""
    batch, edge_index = random_graph_batch([7, 5], edges_per_node=2, seed=6)
    norm = ContraNorm(3, scale=0.7, tau=0.6, exclude_neighbors=exclude_neighbors, random_features=5).double()
    x = torch.randn(batch.numel(), 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: norm(v, batch=batch, edge_index=edge_index), (x,))


def test_pair_correction_gradcheck_all_inputs() -> None:
    n, m, d = 6, 4, 3
    q = torch.rand(n, m, dtype=torch.float64, requires_grad=True)
    k = torch.rand(n, m, dtype=torch.float64, requires_grad=True)
    v = torch.randn(n, d, dtype=torch.float64, requires_grad=True)
    rows, cols = torch.tensor([0, 0, 2, 3, 5, 5]), torch.tensor([1, 4, 2, 0, 1, 5])  # unique, row-major
    assert torch.autograd.gradcheck(lambda a, b, c: linear._ExcludedPairSums.apply(a, b, c, rows, cols), (q, k, v))


def test_same_seed_same_output_other_seed_other_output() -> None:
    _, edge_index = random_graph_batch([200], seed=8)
    x = torch.randn(200, 8)
    outputs = [ContraNorm(8, random_features=32, feature_seed=s)(x, edge_index=edge_index) for s in (1, 1, 2)]
    assert torch.equal(outputs[0], outputs[1])
    assert not torch.allclose(outputs[0], outputs[2])
    norm = ContraNorm(8, random_features=32, feature_seed=1)
    assert torch.equal(norm(x, edge_index=edge_index), norm(x, edge_index=edge_index))  # fixed for the module's life
    assert "random_features=32, feature_seed=1" in repr(norm)
    assert "random_features" not in repr(ContraNorm(8))


def test_switching_forms_on_a_built_module_is_building_with_them() -> None:
    """use_random_features(m, seed) gives the output of a module built with them, and None the exact form again; the
    trained weights (the LayerNorm's here) are kept, and a bad value is rejected without changing the module."""
    _, edge_index = random_graph_batch([150], seed=11)
    x = torch.randn(150, 8)
    norm = ContraNorm(8, scale=0.8)
    with torch.no_grad():
        norm.layer_norm.weight.uniform_(0.5, 1.5)
    exact = norm(x, edge_index=edge_index)
    built = ContraNorm(8, scale=0.8, random_features=32, feature_seed=3)
    built.load_state_dict(norm.state_dict())
    norm.use_random_features(32, feature_seed=3)
    assert norm.random_features == 32 and "random_features=32, feature_seed=3" in repr(norm)
    assert torch.equal(norm(x, edge_index=edge_index), built(x, edge_index=edge_index))
    assert not torch.allclose(norm(x, edge_index=edge_index), exact)
    with pytest.raises(ValueError, match="random_features must be a positive int"):
        norm.use_random_features(0)
    assert norm.random_features == 32
    norm.use_random_features(None)
    assert norm.feature_weights is None and torch.equal(norm(x, edge_index=edge_index), exact)


def test_no_negatives_gives_no_repulsive_term() -> None:
    n = 30
    rows, cols = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    edge_index = torch.stack([rows.flatten(), cols.flatten()])
    x = torch.randn(n, 4, requires_grad=True)
    out = ContraNorm(4, scale=0.5, layer_norm=False, random_features=16)(x, edge_index=edge_index)
    torch.testing.assert_close(out, 1.5 * x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 1.5))


def test_half_precision_input_is_computed_in_float32() -> None:
    _, edge_index = random_graph_batch([100], seed=9)
    x = torch.randn(100, 8)
    norm = ContraNorm(8, random_features=64)
    out_half = norm(x.half(), edge_index=edge_index)
    assert out_half.dtype == torch.float16 and torch.isfinite(out_half).all()
    torch.testing.assert_close(out_half.float(), norm(x.half().float(), edge_index=edge_index), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "256"])
def test_bad_random_features_are_rejected(bad) -> None:
    with pytest.raises(ValueError, match="random_features must be a positive int"):
        ContraNorm(8, random_features=bad)


def test_bad_feature_seed_is_rejected() -> None:
    with pytest.raises(ValueError, match="feature_seed must be an int"):
        ContraNorm(8, random_features=8, feature_seed="zero")


def test_switch_is_one_keyword_through_the_config_path() -> None:
    norm = build_norm("contranorm", 16, random_features=128, layer_norm=False)
    assert norm.random_features == 128 and norm.feature_weights.shape == (128, 16)
    configs = expand_grid(load_sweep_config(REPO / "experiments" / "sweeps" / "cora_contranorm_linear.yaml"), log=None)
    kernels = {c.norm_kwargs.get("random_features") for c in configs}
    assert kernels == {None, 256} and {c.num_layers for c in configs} == {16} and len(configs) == 6


def test_bad_values_are_rejected_when_the_config_is_validated() -> None:
    RunConfig.from_dict({"norm": "contranorm", "norm_kwargs": {"random_features": 64}})
    with pytest.raises(ValueError, match="random_features must be a positive int"):
        RunConfig.from_dict({"norm": "contranorm", "norm_kwargs": {"random_features": 0}})


def test_features_are_drawn_on_the_cpu_whatever_the_default_device() -> None:
    with torch.device("meta"):
        norm = ContraNorm(8, random_features=16, feature_seed=2)
    assert norm.feature_weights.device.type == "cpu"
    assert torch.equal(norm.feature_weights, ContraNorm(8, random_features=16, feature_seed=2).feature_weights)


def test_memory_is_linear_not_quadratic() -> None:
    """Forward + backward at n = 20,000 with 10 excluded pairs per node must stay far below n^2 floats (1.6 GB)."""
    n, d, m = 20_000, 8, 32
    x = torch.randn(n, d, requires_grad=True)
    edge_index = torch.randint(0, n, (2, 10 * n))
    norm = ContraNorm(d, random_features=m)
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset the peak-RSS counter VmHWM
    baseline = _rss_bytes("VmRSS")
    norm(x, edge_index=edge_index).sum().backward()
    extra = _rss_bytes("VmHWM") - baseline
    assert extra < 0.05 * n * n * 4, f"peak extra memory {extra / 1e6:.1f} MB; n x n would be {n * n * 4 / 1e6:.0f} MB"
    assert torch.isfinite(x.grad).all()
