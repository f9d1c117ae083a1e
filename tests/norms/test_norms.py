"""Each norm against its paper's formula, written independently here (numpy, explicit loops over graphs and nodes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch_geometric.nn.norm as pyg_norm

from graphnorm.norms import (
    AdaNorm,
    BatchNorm,
    DetachNorm,
    DiffGroupNorm,
    GraphNorm,
    InstanceNorm,
    LayerNorm,
    LayerNormSimple,
    LearnableScaler,
    MeanSubtraction,
    NodeNorm,
    PairNorm,
    RMSNorm,
    SepNorm,
    build_norm,
)
from graphnorm.norms.ops import graph_stats as chunked_ops

C = 8
SIZES = (4, 3, 5)  # three graphs of different sizes


def make_batch(sizes=SIZES, channels: int = C, dtype=torch.float64, shift: float = 0.5):
    """Random features (non-zero mean, varied scale) and the PyG batch vector for graphs of ``sizes`` nodes."""
    x = torch.randn(sum(sizes), channels, dtype=dtype) * torch.rand(1, channels, dtype=dtype).add(0.5) + shift
    batch = torch.cat([torch.full((n,), g, dtype=torch.long) for g, n in enumerate(sizes)])
    return x, batch


def graph_rows(batch: torch.Tensor):
    """Row indices of each graph, as numpy arrays."""
    b = batch.numpy()
    return [np.flatnonzero(b == g) for g in range(int(b.max()) + 1)]


def randomize_parameters(module: torch.nn.Module) -> None:
    """Non-trivial affine parameters, so that the test also checks where they enter the formula."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + 1.0)


def np_(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float64)


# ---------------------------------------------------------------- references (paper formulas, numpy)


def ref_layernorm_rows(x, weight=None, bias=None, eps=1e-5):
    out = np.empty_like(x)
    for i, row in enumerate(x):
        mu = row.sum() / len(row)
        var = ((row - mu) ** 2).sum() / len(row)
        out[i] = (row - mu) / np.sqrt(var + eps)
    if weight is not None:
        out = out * weight + bias
    return out


def ref_layernorm_graph(x, batch, weight, bias, eps=1e-5):
    out = np.empty_like(x)
    for rows in graph_rows(batch):
        block = x[rows]
        mu = block.mean()
        var = ((block - mu) ** 2).mean()
        out[rows] = (block - mu) / np.sqrt(var + eps)
    return out * weight + bias


def ref_rmsnorm(x, gain, bias, k, eps=1e-8):
    out = np.empty_like(x)
    for i, row in enumerate(x):
        rms = np.sqrt((row[:k] ** 2).sum() / k)
        out[i] = row / (rms + eps) * gain
    return out if bias is None else out + bias


def ref_pairnorm(x, batch, mode, scale, eps=1e-6):
    out = np.empty_like(x)
    for rows in graph_rows(batch):
        block = x[rows]
        mu = block.mean(axis=0)
        if mode == "PN":
            centered = block - mu
            out[rows] = scale * centered / np.sqrt(eps + (centered**2).sum(axis=1).mean())
        elif mode == "PN-SI":
            centered = block - mu
            out[rows] = scale * centered / np.sqrt(eps + (centered**2).sum(axis=1, keepdims=True))
        else:  # PN-SCS: scale rows individually, subtract the input mean
            out[rows] = scale * block / np.sqrt(eps + (block**2).sum(axis=1, keepdims=True)) - mu
    return out


def ref_adanorm(x, C_, k, eps=1e-5):
    y = ref_layernorm_rows(x, eps=eps)
    return C_ * (1 - k * y) * y


def ref_graphnorm(x, batch, alpha, gamma, beta, eps=1e-5):
    out = np.empty_like(x)
    for rows in graph_rows(batch):
        block = x[rows]
        shifted = block - alpha * block.mean(axis=0)
        var = (shifted**2).mean(axis=0)
        out[rows] = gamma * shifted / np.sqrt(var + eps) + beta
    return out


def ref_instancenorm(x, batch, gamma, beta, eps=1e-5):
    out = np.empty_like(x)
    for rows in graph_rows(batch):
        block = x[rows]
        mu = block.mean(axis=0)
        var = ((block - mu) ** 2).mean(axis=0)
        out[rows] = (block - mu) / np.sqrt(var + eps)
    return out * gamma + beta


def ref_nodenorm(x, p, eps=1e-5):
    out = np.empty_like(x)
    for i, row in enumerate(x):
        std = np.sqrt(((row - row.mean()) ** 2).mean() + eps)
        out[i] = row / std ** (1.0 / p)
    return out


def ref_batchnorm(x, mean, var, weight, bias, eps=1e-5):
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def ref_diffgroupnorm_train(x, W, gamma, beta, lamda, eps=1e-5):
    """Returns output and the per-group batch mean / unbiased var (for the running-statistics check)."""
    logits = x @ W.T  # [N, G]
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s = s / s.sum(axis=1, keepdims=True)
    total = np.zeros_like(x)
    means, uvars = [], []
    for g in range(W.shape[0]):
        h = s[:, g : g + 1] * x
        mu, var = h.mean(axis=0), h.var(axis=0)
        means.append(mu)
        uvars.append(h.var(axis=0, ddof=1))
        total += (h - mu) / np.sqrt(var + eps) * gamma[g] + beta[g]
    return x + lamda * total, np.stack(means), np.stack(uvars)


def ref_diffgroupnorm_eval(x, W, gamma, beta, lamda, running_mean, running_var, eps=1e-5):
    logits = x @ W.T
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s = s / s.sum(axis=1, keepdims=True)
    total = np.zeros_like(x)
    for g in range(W.shape[0]):
        h = s[:, g : g + 1] * x
        total += (h - running_mean[g]) / np.sqrt(running_var[g] + eps) * gamma[g] + beta[g]
    return x + lamda * total


# ---------------------------------------------------------------- formulas, train and eval mode

MODES = ["train", "eval"]


def set_mode(module: torch.nn.Module, mode: str) -> torch.nn.Module:
    return module.train(mode == "train")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_node_matches_formula(mode, affine):
    x, batch = make_batch()
    norm = set_mode(LayerNorm(C, affine=affine).double(), mode)
    randomize_parameters(norm)
    w = np_(norm.weight) if affine else None
    b = np_(norm.bias) if affine else None
    np.testing.assert_allclose(np_(norm(x, batch)), ref_layernorm_rows(np_(x), w, b), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_layernorm_graph_matches_formula(mode):
    x, batch = make_batch()
    norm = set_mode(LayerNorm(C, mode="graph").double(), mode)
    randomize_parameters(norm)
    expected = ref_layernorm_graph(np_(x), batch, np_(norm.weight), np_(norm.bias))
    np.testing.assert_allclose(np_(norm(x, batch)), expected, rtol=1e-10, atol=1e-10)
    # One graph: same result with and without a batch vector (PyG differs here; we do not).
    single = x[:4]
    torch.testing.assert_close(norm(single), norm(single, torch.zeros(4, dtype=torch.long)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("p", "k"), [(-1, C), (1.0, C), (0.5, C // 2), (0.3, 2)])
@pytest.mark.parametrize("bias", [False, True])
def test_rmsnorm_matches_formula(mode, p, k, bias):
    x, batch = make_batch()
    norm = set_mode(RMSNorm(C, p=p, bias=bias).double(), mode)
    randomize_parameters(norm)
    expected = ref_rmsnorm(np_(x), np_(norm.weight), np_(norm.bias) if bias else None, k)
    np.testing.assert_allclose(np_(norm(x, batch)), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("p", [0, 0.05, 1.5, -0.5, True])
def test_rmsnorm_rejects_bad_p(p):
    with pytest.raises(ValueError, match="p"):
        RMSNorm(C, p=p)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pn_mode", ["PN", "PN-SI", "PN-SCS"])
@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_pairnorm_matches_formula(mode, pn_mode, scale):
    x, batch = make_batch()
    norm = set_mode(PairNorm(C, mode=pn_mode, scale=scale), mode)
    expected = ref_pairnorm(np_(x), batch, pn_mode, scale)
    np.testing.assert_allclose(np_(norm(x, batch)), expected, rtol=1e-10, atol=1e-10)


def test_pairnorm_rejects_bad_mode():
    with pytest.raises(ValueError, match=r"^pairnorm: mode must be one of 'PN', 'PN-SI', 'PN-SCS'; got 'SI'$"):
        PairNorm(C, mode="SI")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("C_", "k"), [(2.0, 0.1), (1.0, 0.5)])
def test_adanorm_matches_formula(mode, C_, k):
    x, batch = make_batch()
    norm = set_mode(AdaNorm(C, C=C_, k=k), mode)
    np.testing.assert_allclose(np_(norm(x, batch)), ref_adanorm(np_(x), C_, k), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cls", [LayerNormSimple, DetachNorm])
def test_layernorm_simple_and_detachnorm_forward_match_formula(mode, cls):
    x, batch = make_batch()
    norm = set_mode(cls(C), mode)
    assert not list(norm.parameters())  # no gain, no bias
    np.testing.assert_allclose(np_(norm(x, batch)), ref_layernorm_rows(np_(x)), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_learnable_scaler_matches_formula(mode):
    x, batch = make_batch()
    norm = set_mode(LearnableScaler(C).double(), mode)
    torch.testing.assert_close(norm(x, batch), x)  # init "ones": identity at start
    randomize_parameters(norm)
    expected = np_(x) * np_(norm.weight) + np_(norm.bias)
    np.testing.assert_allclose(np_(norm(x, batch)), expected, rtol=1e-12, atol=1e-12)


def test_learnable_scaler_normal_init_draws_standard_normal_gains():
    norm = LearnableScaler(4000, init="normal")
    gains = norm.weight.detach()
    assert abs(gains.mean().item()) < 0.1 and abs(gains.std().item() - 1.0) < 0.1
    assert (gains < 0).any()  # really N(0, 1), not ones
    torch.testing.assert_close(norm.bias.detach(), torch.zeros(4000))
    with pytest.raises(ValueError, match=r"^learnable_scaler: init must be one of 'ones', 'normal'; got 'uniform'$"):
        LearnableScaler(4, init="uniform")


@pytest.mark.parametrize("mode", MODES)
def test_graphnorm_matches_formula(mode):
    x, batch = make_batch()
    norm = set_mode(GraphNorm(C).double(), mode)
    randomize_parameters(norm)
    expected = ref_graphnorm(np_(x), batch, np_(norm.mean_scale), np_(norm.weight), np_(norm.bias))
    np.testing.assert_allclose(np_(norm(x, batch)), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("affine", [False, True])
def test_instancenorm_matches_formula(mode, affine):
    x, batch = make_batch(sizes=(4, 1, 5))  # includes a one-node graph
    norm = set_mode(InstanceNorm(C, affine=affine).double(), mode)
    randomize_parameters(norm)
    gamma = np_(norm.weight) if affine else 1.0
    beta = np_(norm.bias) if affine else 0.0
    expected = ref_instancenorm(np_(x), batch, gamma, beta)
    np.testing.assert_allclose(np_(norm(x, batch)), expected, rtol=1e-10, atol=1e-10)
    # A lone one-node graph without a batch vector does not crash (PyG's F.instance_norm path would).
    np.testing.assert_allclose(np_(norm(x[4:5])), np.broadcast_to(beta, (1, C)), atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_nodenorm_matches_formula(mode, p):
    x, batch = make_batch()
    norm = set_mode(NodeNorm(C, p=p), mode)
    np.testing.assert_allclose(np_(norm(x, batch)), ref_nodenorm(np_(x), p), rtol=1e-10, atol=1e-10)


def test_meansubtraction_matches_formula():
    x, batch = make_batch()
    expected = np_(x).copy()
    for rows in graph_rows(batch):
        expected[rows] -= np_(x)[rows].mean(axis=0)
    np.testing.assert_allclose(np_(MeanSubtraction(C)(x, batch)), expected, rtol=1e-12, atol=1e-12)


def test_batchnorm_train_then_eval_matches_formula():
    x, batch = make_batch()
    norm = BatchNorm(C).double().train()
    randomize_parameters(norm)
    w, b = np_(norm.module.module.weight), np_(norm.module.module.bias)
    xn = np_(x)
    expected_train = ref_batchnorm(xn, xn.mean(axis=0), xn.var(axis=0), w, b)
    np.testing.assert_allclose(np_(norm(x, batch)), expected_train, rtol=1e-10, atol=1e-10)
    # Running statistics: momentum 0.1 from (0, 1), unbiased variance.
    running_mean = 0.1 * xn.mean(axis=0)
    running_var = 0.9 + 0.1 * xn.var(axis=0, ddof=1)
    np.testing.assert_allclose(np_(norm.module.module.running_mean), running_mean, rtol=1e-10)
    np.testing.assert_allclose(np_(norm.module.module.running_var), running_var, rtol=1e-10)
    norm.eval()
    x2, _ = make_batch()
    expected_eval = ref_batchnorm(np_(x2), running_mean, running_var, w, b)
    np.testing.assert_allclose(np_(norm(x2, batch)), expected_eval, rtol=1e-10, atol=1e-10)


def test_batchnorm_single_row_in_training_uses_running_statistics():
    x, _ = make_batch()
    norm = BatchNorm(C).double().train()
    norm(x)  # one real update
    stats = norm.module.module.running_mean.clone(), norm.module.module.running_var.clone()
    row = x[:1] * 3.0
    out = norm(row)
    expected = ref_batchnorm(np_(row), np_(stats[0]), np_(stats[1]), 1.0, 0.0)
    np.testing.assert_allclose(np_(out), expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(norm.module.module.running_mean, stats[0])  # not updated
    torch.testing.assert_close(norm.module.module.running_var, stats[1])
    out.sum().backward()  # still differentiable


def test_diffgroupnorm_train_then_eval_matches_formula():
    x, batch = make_batch()
    norm = DiffGroupNorm(C, groups=3, lamda=0.5).double().train()
    randomize_parameters(norm)
    m = norm.module
    W = np_(m.lin.weight)
    gamma, beta = np_(m.norm.weight).reshape(3, C), np_(m.norm.bias).reshape(3, C)
    expected, means, uvars = ref_diffgroupnorm_train(np_(x), W, gamma, beta, 0.5)
    np.testing.assert_allclose(np_(norm(x, batch)), expected, rtol=1e-9, atol=1e-9)
    running_mean, running_var = 0.1 * means, 0.9 + 0.1 * uvars
    np.testing.assert_allclose(np_(m.norm.running_mean).reshape(3, C), running_mean, rtol=1e-9, atol=1e-12)
    norm.eval()
    x2, _ = make_batch()
    expected_eval = ref_diffgroupnorm_eval(np_(x2), W, gamma, beta, 0.5, running_mean, running_var)
    np.testing.assert_allclose(np_(norm(x2, batch)), expected_eval, rtol=1e-9, atol=1e-9)
    # A single row in training: normalized with the running statistics (as eval), which stay unchanged.
    norm.train()
    before = m.norm.running_mean.clone()
    row_out = norm(x2[:1])
    np.testing.assert_allclose(np_(row_out), expected_eval[:1], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(m.norm.running_mean, before)


# ---------------------------------------------------------------- gradients where the papers detach


def layernorm_backward(x: np.ndarray, grad_y: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Analytic gradient of y = (x - mu) / sigma per row (mu, sigma NOT detached)."""
    out = np.empty_like(x)
    for i, (row, g) in enumerate(zip(x, grad_y)):
        sigma = np.sqrt(row.var() + eps)
        y = (row - row.mean()) / sigma
        out[i] = (g - g.mean() - y * (g * y).mean()) / sigma
    return out


def test_adanorm_gradient_treats_scaling_factor_as_constant():
    x, _ = make_batch()
    x.requires_grad_(True)
    grad_out = torch.randn_like(x)
    AdaNorm(C, C=2.0, k=0.1)(x).backward(grad_out)
    # Hand-written reference: dz/dy = C * (1 - k*y) with (1 - k*y) a constant, then back through y = LN(x).
    xn, gn = np_(x), np_(grad_out)
    y = ref_layernorm_rows(xn)
    expected = layernorm_backward(xn, 2.0 * (1 - 0.1 * y) * gn)
    np.testing.assert_allclose(np_(x.grad), expected, rtol=1e-9, atol=1e-10)
    # The non-detached version, same forward, has a different gradient (the -2k*y term).
    x2 = x.detach().clone().requires_grad_(True)
    mu = x2.mean(dim=1, keepdim=True)
    y2 = (x2 - mu) / ((x2 - mu).pow(2).mean(dim=1, keepdim=True) + 1e-5).sqrt()
    (2.0 * (1 - 0.1 * y2) * y2).backward(grad_out)
    assert not np.allclose(np_(x2.grad), np_(x.grad), atol=1e-4)


def test_detachnorm_gradient_is_identity_over_sigma():
    x, _ = make_batch()
    x.requires_grad_(True)
    grad_out = torch.randn_like(x)
    DetachNorm(C)(x).backward(grad_out)
    xn = np_(x)
    sigma = np.sqrt(xn.var(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np_(x.grad), np_(grad_out) / sigma, rtol=1e-10, atol=1e-12)
    # LayerNorm-simple (statistics not detached): same forward, different gradient.
    x2 = x.detach().clone().requires_grad_(True)
    LayerNormSimple(C)(x2).backward(grad_out)
    np.testing.assert_allclose(np_(x2.grad), layernorm_backward(xn, np_(grad_out)), rtol=1e-9, atol=1e-10)
    assert not np.allclose(np_(x2.grad), np_(x.grad), atol=1e-4)


GRADCHECK_NORMS = [
    ("batchnorm", {}),
    ("layernorm", {}),
    ("layernorm", {"mode": "graph"}),
    ("rmsnorm", {"p": 0.5, "bias": True}),
    ("pairnorm", {"mode": "PN"}),
    ("pairnorm", {"mode": "PN-SI"}),
    ("pairnorm", {"mode": "PN-SCS"}),
    ("layernorm_simple", {}),
    ("learnable_scaler", {}),
    ("graphnorm", {}),
    ("nodenorm", {}),
    ("diffgroupnorm", {"groups": 2}),
    ("instancenorm", {"affine": True}),
    ("meansubtraction", {}),
]


@pytest.mark.parametrize(("name", "kwargs"), GRADCHECK_NORMS)
def test_gradients_match_finite_differences(name, kwargs):
    x, batch = make_batch(sizes=(3, 4), channels=4)
    norm = build_norm(name, 4, **kwargs).double().train()
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: norm(t, batch), (x,), eps=1e-6, atol=1e-5)


@pytest.fixture
def small_chunks(monkeypatch):
    """Row chunks of 2 rows (C = 8), so the chunked helpers cross chunk and graph boundaries in these tiny tests."""
    monkeypatch.setattr(chunked_ops, "CHUNK_ELEMENTS", 16)


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize(("center_cols", "scale_cols", "with_bias"), [(C, C, True), (1, 1, False), (C, 1, True)])
def test_graph_center_scale_gradients_match_finite_differences(
    small_chunks, batched, center_cols, scale_cols, with_bias
):
    # graph_center_scale is a custom autograd.Function with a hand-written backward.
    x, batch = make_batch(sizes=(3, 4, 2, 1))
    graphs = 4 if batched else 1
    center = torch.randn(graphs, center_cols, dtype=x.dtype)
    scale = torch.randn(graphs, scale_cols, dtype=x.dtype)
    bias = torch.randn(C, dtype=x.dtype) if with_bias else None
    inputs = tuple(t.requires_grad_(True) for t in (x, center, scale) + ((bias,) if with_bias else ()))
    b = batch if batched else None
    out = chunked_ops.graph_center_scale(x, center, scale, b, bias)
    gathered = (lambda t: t[batch]) if batched else (lambda t: t)
    expected = (x - gathered(center)) * gathered(scale) + (bias if with_bias else 0)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda *t: chunked_ops.graph_center_scale(t[0], t[1], t[2], b, t[3] if with_bias else None), inputs
    )
    sq_inputs = (x, center)
    expected_sq = torch.zeros(graphs, C, dtype=x.dtype).index_add_(
        0, batch if batched else torch.zeros_like(batch), (x - gathered(center)) ** 2
    )
    torch.testing.assert_close(chunked_ops.graph_centered_sq_sum(x, center, b, graphs), expected_sq)
    assert torch.autograd.gradcheck(lambda *t: chunked_ops.graph_centered_sq_sum(t[0], t[1], b, graphs), sq_inputs)


PYG_EQUIVALENTS = [
    ("graphnorm", {}, lambda: pyg_norm.GraphNorm(C)),
    ("instancenorm", {}, lambda: pyg_norm.InstanceNorm(C)),
    ("instancenorm", {"affine": True}, lambda: pyg_norm.InstanceNorm(C, affine=True)),
    ("layernorm", {"mode": "graph"}, lambda: pyg_norm.LayerNorm(C, mode="graph")),
    ("pairnorm", {"mode": "PN", "eps": 1e-5}, lambda: pyg_norm.PairNorm(scale_individually=False)),
]  # not PN-SI: PyG divides by eps + ||x||, we (as the official code) by sqrt(eps + ||x||^2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize(("name", "kwargs", "pyg"), PYG_EQUIVALENTS)
def test_matches_pyg_module(small_chunks, name, kwargs, pyg, dtype, tol, mode):
    # Our own implementations of PyG's norms: same parameters in, same outputs and gradients out.
    x, batch = make_batch(sizes=(4, 1, 6, 3, 5), dtype=dtype, shift=3.0)
    ours = set_mode(build_norm(name, C, **kwargs).to(dtype), mode)
    reference = set_mode(pyg().to(dtype), mode)
    randomize_parameters(ours)
    reference.load_state_dict(ours.state_dict())
    x.requires_grad_(True)
    out, expected = ours(x, batch, 5), reference(x, batch, 5)
    torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, *ours.parameters()], grad_out)
    expected_grads = torch.autograd.grad(expected, [x, *reference.parameters()], grad_out)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_graphnorm_loads_checkpoints_of_the_pyg_wrapper():
    # Until GraphNorm had its own implementation it held PyG's module as ``self.module``.
    norm = GraphNorm(C)
    legacy = {f"module.{k}": torch.full((C,), float(i)) for i, k in enumerate(["weight", "bias", "mean_scale"])}
    norm.load_state_dict(legacy)
    assert norm.bias.eq(1.0).all() and norm.mean_scale.eq(2.0).all()


# ---------------------------------------------------------------- invariances


@pytest.mark.parametrize("factor", [0.01, 3.0, 250.0])
def test_rmsnorm_rescaling_invariance(factor):
    x, batch = make_batch()
    norm = RMSNorm(C, eps=1e-14).double()
    torch.testing.assert_close(norm(factor * x, batch), norm(x, batch), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["node", "graph"])
@pytest.mark.parametrize("factor", [0.5, 40.0])
def test_layernorm_rescaling_invariance(mode, factor):
    x, batch = make_batch()
    norm = LayerNorm(C, mode=mode, eps=1e-12).double()
    torch.testing.assert_close(norm(factor * x, batch), norm(x, batch), rtol=1e-8, atol=1e-8)


def test_layernorm_recentering_invariance():
    x, batch = make_batch()
    norm = LayerNorm(C, eps=1e-12).double()
    per_node_shift = torch.randn(x.size(0), 1, dtype=x.dtype) * 10
    torch.testing.assert_close(norm(x + per_node_shift, batch), norm(x, batch), rtol=1e-8, atol=1e-8)
    graph_norm = LayerNorm(C, mode="graph", eps=1e-12).double()
    per_graph_shift = (torch.randn(len(SIZES), dtype=x.dtype) * 10)[batch].unsqueeze(1)
    torch.testing.assert_close(graph_norm(x + per_graph_shift, batch), graph_norm(x, batch), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("scale", [1.0, 5.0])
def test_pairnorm_pn_zero_mean_and_mean_row_norm_equals_scale(scale):
    x, batch = make_batch()
    out = PairNorm(C, mode="PN", scale=scale)(x, batch)
    for rows in graph_rows(batch):
        block = out[rows]
        torch.testing.assert_close(block.mean(dim=0), torch.zeros(C, dtype=x.dtype), atol=1e-12, rtol=0)
        rms_row_norm = block.pow(2).sum(dim=1).mean().sqrt()
        torch.testing.assert_close(rms_row_norm, torch.tensor(scale, dtype=x.dtype), rtol=1e-6, atol=0)


@pytest.mark.parametrize("scale", [1.0, 5.0])
def test_pairnorm_si_zero_centered_input_and_unit_rows(scale):
    x, batch = make_batch()
    out = PairNorm(C, mode="PN-SI", scale=scale)(x, batch)
    torch.testing.assert_close(out.norm(dim=1), torch.full((x.size(0),), scale, dtype=x.dtype), rtol=1e-6, atol=0)
    # PN-SI centers before scaling: shifting a whole graph leaves the output unchanged.
    shift = (torch.randn(len(SIZES), C, dtype=x.dtype) * 5)[batch]
    torch.testing.assert_close(PairNorm(C, mode="PN-SI", scale=scale)(x + shift, batch), out)


def test_pairnorm_scs_rows_before_centering_have_norm_scale():
    x, batch = make_batch()
    out = PairNorm(C, mode="PN-SCS", scale=2.0)(x, batch)
    restored = out + torch.stack([x[batch == g].mean(dim=0) for g in range(len(SIZES))])[batch]
    expected = torch.full((x.size(0),), 2.0, dtype=x.dtype)
    torch.testing.assert_close(restored.norm(dim=1), expected, rtol=1e-6, atol=0)  # eps=1e-6 inside the root


# ---------------------------------------------------------------- per-graph independence

PER_GRAPH = [
    ("layernorm", {}),
    ("layernorm", {"mode": "graph"}),
    ("rmsnorm", {}),
    ("pairnorm", {"mode": "PN"}),
    ("pairnorm", {"mode": "PN-SI"}),
    ("pairnorm", {"mode": "PN-SCS"}),
    ("adanorm", {}),
    ("layernorm_simple", {}),
    ("detachnorm", {}),
    ("learnable_scaler", {}),
    ("graphnorm", {}),
    ("nodenorm", {}),
    ("instancenorm", {"affine": True}),
    ("meansubtraction", {}),
    ("none", {}),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("name", "kwargs"), PER_GRAPH)
def test_per_graph_independence(name, kwargs, mode):
    x, batch = make_batch()
    norm = set_mode(build_norm(name, C, **kwargs).double(), mode)
    randomize_parameters(norm)
    out = norm(x, batch)
    starts = np.cumsum((0,) + SIZES)
    for g in range(len(SIZES)):
        rows = slice(int(starts[g]), int(starts[g + 1]))
        alone = norm(x[rows])  # the graph on its own, no batch vector
        torch.testing.assert_close(out[rows], alone, rtol=1e-10, atol=1e-10)
        # Changing the other graphs does not change this one.
        x_other = x.clone()
        x_other[batch != g] = torch.randn_like(x_other[batch != g]) * 7
        torch.testing.assert_close(norm(x_other, batch)[rows], out[rows], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("name", "kwargs"), [*PER_GRAPH, ("instancenorm", {}), ("batchnorm", {})])
def test_centers_each_graph_says_whether_every_graph_has_the_same_mean_row(name, kwargs, mode):
    """The flag a model reads to warn of a readout that sees nothing of the graph, checked against the output: with
    random parameters, each graph's mean row is the same for every graph exactly where the norm says so."""
    norm = build_norm(name, C, **kwargs).double()
    randomize_parameters(norm)
    if mode == "eval":  # running statistics from a batch first, where the norm keeps any
        norm(*make_batch())
    x, batch = make_batch()
    means = torch.stack([rows.mean(dim=0) for rows in set_mode(norm, mode)(x, batch).split(SIZES)])
    same = torch.allclose(means, means[:1].expand_as(means), rtol=0, atol=1e-9)
    assert same == norm.centers_each_graph


# ---------------------------------------------------------------- SepNorm


def token_batch(sizes=SIZES, token_pos: str = "first"):
    """Graphs with one token row each (first or last row of every graph)."""
    x, batch = make_batch(sizes)
    mask = torch.zeros(x.size(0), dtype=torch.bool)
    starts = np.cumsum((0,) + tuple(sizes))
    for g in range(len(sizes)):
        mask[int(starts[g]) if token_pos == "first" else int(starts[g + 1]) - 1] = True
    return x, batch, mask


@pytest.mark.parametrize("token_pos", ["first", "last"])
def test_sepnorm_defaults_normalize_tokens_by_batchnorm_and_nodes_by_layernorm(token_pos):
    x, batch, mask = token_batch(token_pos=token_pos)
    norm = SepNorm(C).double().train()
    out = np_(norm(x, batch, token_mask=mask))
    xn, m = np_(x), mask.numpy()
    tokens = xn[m]
    expected_tokens = ref_batchnorm(tokens, tokens.mean(axis=0), tokens.var(axis=0), 1.0, 0.0)
    np.testing.assert_allclose(out[m], expected_tokens, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out[~m], ref_layernorm_rows(xn[~m]), rtol=1e-10, atol=1e-10)
    # Token statistics come from token rows only: changing node rows leaves token outputs unchanged.
    x2 = x.clone()
    x2[~mask] *= 10
    np.testing.assert_allclose(np_(norm(x2, batch, token_mask=mask))[m], out[m], rtol=1e-10, atol=1e-10)


def test_sepnorm_node_rows_get_their_own_batch_vector():
    x, batch, mask = token_batch()
    norm = SepNorm(C, token_norm="layernorm", node_norm="pairnorm", node_kwargs={"mode": "PN"}).double()
    out = np_(norm(x, batch, token_mask=mask))
    m = mask.numpy()
    expected_nodes = ref_pairnorm(np_(x)[~m], batch[~mask], "PN", 1.0)
    np.testing.assert_allclose(out[~m], expected_nodes, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out[m], ref_layernorm_rows(np_(x)[m]), rtol=1e-10, atol=1e-10)


def test_sepnorm_graphs_are_independent_in_eval_mode():
    """In eval mode the token BatchNorm uses running statistics, so every graph is normalized on its own."""
    x, batch, mask = token_batch()
    norm = SepNorm(C).double().train()
    norm(x, batch, token_mask=mask)  # move the running statistics away from (0, 1)
    norm.eval()
    out = norm(x, batch, token_mask=mask)
    starts = np.cumsum((0,) + SIZES)
    for g in range(len(SIZES)):
        rows = slice(int(starts[g]), int(starts[g + 1]))
        torch.testing.assert_close(out[rows], norm(x[rows], token_mask=mask[rows]), rtol=1e-10, atol=1e-10)


def test_sepnorm_single_graph_in_training_uses_running_statistics():
    x, batch, mask = token_batch(sizes=(5,))
    norm = SepNorm(C).double().train()
    out = norm(x, token_mask=mask)  # must not raise "Expected more than 1 value per channel"
    bn = norm.token_norm.module.module
    torch.testing.assert_close(bn.running_mean, torch.zeros(C, dtype=x.dtype))  # not updated
    torch.testing.assert_close(bn.running_var, torch.ones(C, dtype=x.dtype))
    expected_token = np_(x)[0] / np.sqrt(1.0 + 1e-5)  # (x - 0) / sqrt(1 + eps)
    np.testing.assert_allclose(np_(out)[0], expected_token, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np_(out)[1:], ref_layernorm_rows(np_(x)[1:]), rtol=1e-10, atol=1e-10)
    out.sum().backward()


def test_sepnorm_rejects_malformed_token_masks():
    x, batch, mask = token_batch()
    norm = SepNorm(C).double()
    with pytest.raises(ValueError, match="token_mask is required"):
        norm(x, batch)
    two_in_one = mask.clone()
    two_in_one[1] = True  # graph 0 gets a second token
    with pytest.raises(ValueError, match="graph 0 has 2"):
        norm(x, batch, token_mask=two_in_one)
    moved = mask.clone()
    moved[4], moved[1] = False, True  # graph 0 has two, graph 1 none (same total)
    with pytest.raises(ValueError, match="exactly one token"):
        norm(x, batch, token_mask=moved)
    none_in_last = mask.clone()
    none_in_last[7] = False
    with pytest.raises(ValueError, match="graph 2 has 0"):
        norm(x, batch, token_mask=none_in_last)
    with pytest.raises(ValueError, match="shape"):
        norm(x, batch, token_mask=mask[:-1])
    with pytest.raises(TypeError, match="bool"):
        norm(x, batch, token_mask=mask.long())
    with pytest.raises(ValueError, match="graph 3 has 0"):
        norm(x, batch, batch_size=4, token_mask=mask)  # an extra (empty) graph has no token


def test_sepnorm_restricts_edge_index_to_node_rows():
    """Node rows see only node-node edges, relabelled to their own row numbers."""
    x, batch, mask = token_batch(sizes=(3, 3))  # tokens at rows 0 and 3; nodes 1, 2, 4, 5
    edge_index = torch.tensor([[0, 1, 2, 4, 3], [1, 2, 1, 5, 5]])
    seen = {}

    class RecordEdges(torch.nn.Module):  # probe: records what SepNorm passes on, then acts as identity
        def forward(self, x, batch=None, batch_size=None, edge_index=None, token_mask=None):
            seen["edge_index"], seen["batch"] = edge_index, batch
            return x

    norm = SepNorm(C, node_norm=RecordEdges()).double()
    norm(x, batch, edge_index=edge_index, token_mask=mask)
    torch.testing.assert_close(seen["edge_index"], torch.tensor([[0, 1, 2], [1, 0, 3]]))
    torch.testing.assert_close(seen["batch"], torch.tensor([0, 0, 1, 1]))


class _Opaque(torch.nn.Module):
    """Hides a norm's type, so SepNorm takes its general gather / scatter path."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x, batch=None, batch_size=None, edge_index=None, token_mask=None):
        return self.inner(x, batch=batch, batch_size=batch_size, edge_index=edge_index)


@pytest.mark.parametrize("token_pos", ["first", "last"])
def test_sepnorm_row_wise_fast_path_matches_general_path(token_pos):
    x, batch, mask = token_batch(token_pos=token_pos)
    fast = SepNorm(C).double().train()
    randomize_parameters(fast)
    general = SepNorm(C).double()
    # Share the very same sub-norms (build_norm would copy instances), so gradients reach `fast`'s parameters.
    general.token_norm, general.node_norm = fast.token_norm, _Opaque(fast.node_norm)
    x.requires_grad_(True)
    out_fast, out_general = fast(x, batch, token_mask=mask), general(x, batch, token_mask=mask)
    torch.testing.assert_close(out_fast, out_general, rtol=1e-12, atol=1e-12)
    grad_out = torch.randn_like(out_fast)
    params = list(fast.parameters())
    for got, want in zip(
        torch.autograd.grad(out_fast, [x, *params], grad_out),
        torch.autograd.grad(out_general, [x, *params], grad_out),
        strict=True,
    ):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
