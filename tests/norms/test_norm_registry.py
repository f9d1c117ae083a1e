"""The registry contract, checked for every registered norm (new norms are covered automatically)."""

from __future__ import annotations

import pytest
import torch

import graphnorm.norms as norms
from graphnorm.norms import available_norms, build_norm, norm_class, norm_keywords

CHANNELS = 16
ALL_NORMS = available_norms()
EXPECTED_NORMS = {
    "adanorm",
    "batchnorm",
    "detachnorm",
    "diffgroupnorm",
    "graphnorm",
    "instancenorm",
    "layernorm",
    "layernorm_simple",
    "learnable_scaler",
    "meansubtraction",
    "nodenorm",
    "none",
    "pairnorm",
    "rmsnorm",
    "sepnorm",
}


def graph_batch(sizes=(5, 3, 6), dtype=torch.float32):
    """Features, batch vector, within-graph ring edges and a token mask (first row of each graph)."""
    x = torch.randn(sum(sizes), CHANNELS, dtype=dtype) * 2 + 0.3
    batch = torch.cat([torch.full((n,), g, dtype=torch.long) for g, n in enumerate(sizes)])
    edges, start = [], 0
    token_mask = torch.zeros(sum(sizes), dtype=torch.bool)
    for n in sizes:
        token_mask[start] = True
        nodes = torch.arange(start, start + n)
        ring = torch.stack([nodes, nodes.roll(1)])
        edges += [ring, ring.flip(0)]
        start += n
    return x, batch, torch.cat(edges, dim=1), token_mask


def test_expected_norms_are_registered():
    assert set(ALL_NORMS) >= EXPECTED_NORMS


@pytest.mark.parametrize("name", ALL_NORMS)
def test_class_is_exported_by_name_with_formula_and_reference(name):
    cls = norm_class(name)
    assert getattr(norms, cls.__name__) is cls
    assert cls.__name__ in norms.__all__
    assert cls.registry_name == name
    doc = cls.__doc__ or ""
    assert ":math:" in doc or "math::" in doc, f"{name}: docstring must give the formula"
    if name != "none":
        assert "https://" in doc, f"{name}: docstring must link the paper / reference"


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ALL_NORMS)
def test_builds_with_defaults_and_runs_with_every_argument(name, dtype, mode):
    x, batch, edge_index, token_mask = graph_batch(dtype=dtype)
    norm = build_norm(name, CHANNELS).to(dtype).train(mode == "train")
    out = norm(x, batch=batch, batch_size=3, edge_index=edge_index, token_mask=token_mask)
    assert out.shape == x.shape and out.dtype == dtype
    assert torch.isfinite(out).all()
    # Deterministic: the same input gives the same output (eval mode: no statistics change in between).
    if mode == "eval":
        torch.testing.assert_close(norm(x, batch=batch, edge_index=edge_index, token_mask=token_mask), out)


@pytest.mark.parametrize("name", ALL_NORMS)
def test_gradients_flow_to_input_and_parameters(name):
    x, batch, edge_index, token_mask = graph_batch(dtype=torch.float64)
    x.requires_grad_(True)
    norm = build_norm(name, CHANNELS).double().train()
    out = norm(x, batch=batch, edge_index=edge_index, token_mask=token_mask)
    (out * torch.randn_like(out)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for pname, p in norm.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"{name}: no gradient for {pname}"


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", ALL_NORMS)
def test_empty_batch_returns_empty_tensor(name, mode):
    x, batch, edge_index, token_mask = graph_batch()
    norm = build_norm(name, CHANNELS).train(mode == "train")
    out = norm(
        x[:0], batch=batch[:0], edge_index=edge_index[:, :0], token_mask=token_mask[:0]
    )  # zero nodes, zero graphs
    assert out.shape == (0, CHANNELS) and out.dtype == x.dtype


@pytest.mark.parametrize("name", ALL_NORMS)
def test_wrong_channel_count_is_a_clear_error(name):
    x, batch, edge_index, token_mask = graph_batch()
    norm = build_norm(name, CHANNELS + 1)
    with pytest.raises(ValueError, match="channels"):
        norm(x, batch=batch, edge_index=edge_index, token_mask=token_mask)


@pytest.mark.parametrize("name", ALL_NORMS)
def test_bad_inputs_are_clear_errors(name):
    x, batch, edge_index, token_mask = graph_batch()
    norm = build_norm(name, CHANNELS)
    with pytest.raises(ValueError, match="shape"):
        norm(x[0], batch=batch, edge_index=edge_index, token_mask=token_mask)  # 1-D features
    with pytest.raises(ValueError, match="batch"):
        norm(x, batch=batch[:-1], edge_index=edge_index, token_mask=token_mask)
    with pytest.raises(TypeError, match="floating"):
        norm(x.long(), batch=batch, edge_index=edge_index, token_mask=token_mask)


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="valid choices") as info:
        build_norm("pairnrom", CHANNELS)
    for name in EXPECTED_NORMS:
        assert name in str(info.value)


@pytest.mark.parametrize("name", ALL_NORMS)
def test_unknown_keyword_lists_the_valid_keywords(name):
    with pytest.raises(ValueError, match="valid keywords") as info:
        build_norm(name, CHANNELS, definitely_not_a_keyword=1)
    for keyword in norm_keywords(name):
        assert keyword in str(info.value)


@pytest.mark.parametrize(
    ("name", "kwargs", "keywords"),
    [
        ("pairnorm", {"mode": "PN-SI", "scale": 2.0}, {"mode", "scale", "eps"}),
        ("rmsnorm", {"p": 0.5, "eps": 1e-6, "bias": True}, {"p", "eps", "bias"}),
        ("adanorm", {"C": 1.5, "k": 0.2}, {"C", "k", "eps"}),
        ("layernorm", {"mode": "graph", "eps": 1e-6, "affine": False}, {"mode", "eps", "affine"}),
        ("diffgroupnorm", {"groups": 4, "lamda": 0.1}, {"groups", "lamda"}),
        ("learnable_scaler", {"init": "normal"}, {"init"}),
        ("nodenorm", {"p": 1.0}, {"p", "eps"}),
        ("instancenorm", {"affine": True}, {"affine", "eps"}),
        ("sepnorm", {"token_norm": "layernorm", "node_kwargs": {"mode": "graph"}}, {"token_norm", "node_kwargs"}),
    ],
)
def test_documented_keywords_are_accepted(name, kwargs, keywords):
    assert keywords <= set(norm_keywords(name))
    x, batch, edge_index, token_mask = graph_batch()
    out = build_norm(name, CHANNELS, **kwargs)(x, batch=batch, edge_index=edge_index, token_mask=token_mask)
    assert out.shape == x.shape


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("pairnorm", {"mode": "SI"}),
        ("pairnorm", {"scale": -1.0}),
        ("layernorm", {"mode": "batch"}),
        ("rmsnorm", {"p": 2.0}),
        ("adanorm", {"k": -0.1}),
        ("nodenorm", {"p": 0.0}),
        ("diffgroupnorm", {"groups": 0}),
        ("learnable_scaler", {"init": "zeros"}),
        ("batchnorm", {"eps": 0.0}),
        ("sepnorm", {"token_norm": "nonexistent"}),
        ("sepnorm", {"node_kwargs": {"nonexistent": 1}}),
    ],
)
def test_impossible_hyperparameters_are_value_errors(name, kwargs):
    with pytest.raises(ValueError):
        build_norm(name, CHANNELS, **kwargs)


def test_build_norm_copies_modules_and_passes_none_through():
    module = norms.BatchNorm(CHANNELS)
    with torch.no_grad():
        next(module.parameters()).fill_(2.0)  # copies keep the template's values
    first, second = build_norm(module, CHANNELS), build_norm(module, CHANNELS)
    assert first is not module and second is not first  # an instance is a template, copied per call
    for copied in (first, second):
        assert [p.data.tolist() for p in copied.parameters()] == [p.data.tolist() for p in module.parameters()]
        assert not {id(p) for p in copied.parameters()} & {id(p) for p in module.parameters()}
        assert not {id(b) for b in copied.buffers()} & {id(b) for b in module.buffers()}
    assert isinstance(build_norm(None, CHANNELS), norms.Identity)
    with pytest.raises(ValueError, match="positive integer"):
        build_norm("layernorm", 0)
