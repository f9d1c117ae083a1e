"""NormBase: the forward every norm shares (checks, empty input, half precision, the host's edges) around the
subclass's ``_normalize``, and a registry that registers without replacing anything."""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.nn.models import GCN

import graphnorm.norms
from graphnorm.norms import (
    DetachNorm,
    LayerNormSimple,
    SharedNormWarning,
    available_norms,
    build_norm,
    norm_class,
    pass_edge_index,
)
from graphnorm.norms.base import NormBase
from graphnorm.norms.registry import _NORMS, register_norm


class Recorder(NormBase):
    """Doubles ``x`` and records what ``_normalize`` received."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels
        self.weight = nn.Parameter(torch.ones(channels))
        self.calls: list[dict] = []

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        self.calls.append({"dtype": x.dtype, "batch": batch, "batch_size": batch_size})
        return 2 * x * self.weight.to(x.dtype)


class EdgeRecorder(Recorder):
    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None, edge_index: Tensor | None) -> Tensor:
        self.calls.append({"edge_index": edge_index})
        return x


class MaskRecorder(Recorder):
    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None, token_mask: Tensor | None) -> Tensor:
        self.calls.append({"token_mask": token_mask})
        return x


@pytest.fixture
def registered() -> Iterator[None]:
    """Registers the recorders for one test, then takes them out of the registry."""
    names = {"test_base_recorder": Recorder, "test_base_edges": EdgeRecorder, "test_base_mask": MaskRecorder}
    for name, cls in names.items():
        register_norm(name)(cls)
    try:
        yield
    finally:
        for name in names:
            _NORMS.pop(name, None)


def test_registration_only_registers() -> None:
    class Plain(NormBase):
        def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
            return x

    before = dict(vars(Plain))
    try:
        assert register_norm("test_base_plain")(Plain) is Plain
        assert norm_class("test_base_plain") is Plain
        added = {key for key in vars(Plain) if key not in before}
        assert added == {"registry_name"} and all(vars(Plain)[key] is before[key] for key in before)
    finally:
        _NORMS.pop("test_base_plain", None)


@pytest.mark.parametrize("name", available_norms())
def test_every_registered_norm_runs_the_shared_forward(name: str) -> None:
    cls = norm_class(name)
    assert issubclass(cls, NormBase) and cls.forward is NormBase.forward
    assert "_normalize" in vars(cls), f"{cls.__name__} inherits its math instead of defining it"


def test_checks_name_the_registered_norm_and_empty_input_skips_the_math(registered) -> None:
    norm = build_norm("test_base_recorder", 4)
    with pytest.raises(ValueError, match="^test_base_recorder: built for 4 channels but x has 3"):
        norm(torch.randn(5, 3))
    with pytest.raises(TypeError, match="^test_base_recorder: x must be a floating-point tensor"):
        norm(torch.ones(5, 4, dtype=torch.long))
    empty = torch.empty(0, 4)
    out = norm(empty)
    assert out.shape == (0, 4) and out is not empty and norm.calls == []


def test_batch_and_batch_size_reach_normalize_unchanged(registered) -> None:
    norm = build_norm("test_base_recorder", 4)
    batch = torch.tensor([0, 0, 1])
    norm(torch.randn(3, 4), batch, 2)
    assert norm.calls[0]["batch"] is batch and norm.calls[0]["batch_size"] == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32_and_returned_in_its_own_dtype(registered, dtype) -> None:
    norm = build_norm("test_base_recorder", 4)
    x = torch.randn(3, 4).to(dtype)
    out = norm(x)
    assert norm.calls[0]["dtype"] == torch.float32 and out.dtype == dtype
    torch.testing.assert_close(out, 2 * x)


def test_a_norm_that_hands_x_on_sees_its_own_dtype() -> None:
    x = torch.randn(3, 4, dtype=torch.float16)
    assert build_norm("none", 4)(x) is x  # Identity: x itself


def test_edge_index_and_token_mask_reach_only_the_norms_that_name_them(registered) -> None:
    x, edges, mask = torch.randn(3, 4), torch.tensor([[0, 1], [1, 2]]), torch.tensor([True, False, False])
    names = ("test_base_recorder", "test_base_edges", "test_base_mask")
    plain, with_edges, with_mask = (build_norm(name, 4) for name in names)
    plain(x, edge_index=edges, token_mask=mask)  # Recorder's _normalize takes neither: no TypeError
    with_edges(x, edge_index=edges, token_mask=mask)
    with_mask(x, edge_index=edges, token_mask=mask)
    assert with_edges.calls == [{"edge_index": edges}] and with_mask.calls == [{"token_mask": mask}]


def test_the_host_edges_reach_a_norm_that_takes_edge_index(registered) -> None:
    model = GCN(4, 4, num_layers=2, norm=build_norm("test_base_edges", 4))
    pass_edge_index(model)
    x, edge_index = torch.randn(5, 4), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    model(x, edge_index)
    assert model.norms[0].calls and torch.equal(model.norms[0].calls[0]["edge_index"], edge_index)


def test_an_instance_at_two_positions_warns_once(registered) -> None:
    norm = build_norm("test_base_recorder", 4)
    model = nn.Sequential(norm, norm)
    with pytest.warns(SharedNormWarning, match="2 positions"):
        model(torch.randn(3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(torch.randn(3, 4))


def test_default_reset_parameters_resets_the_children() -> None:
    norm = build_norm("sepnorm", 4)
    with torch.no_grad():
        norm.node_norm.weight.fill_(3.0)
    norm.reset_parameters()
    assert torch.equal(norm.node_norm.weight, torch.ones(4))


def test_detachnorm_shares_layernorm_simple_and_keeps_its_name() -> None:
    assert issubclass(DetachNorm, LayerNormSimple)
    assert norm_class("detachnorm") is DetachNorm and norm_class("layernorm_simple") is LayerNormSimple
    with pytest.raises(ValueError, match="^detachnorm: eps"):
        build_norm("detachnorm", 4, eps=0.0)
    x = torch.randn(6, 4, requires_grad=True)
    build_norm("detachnorm", 4)(x).sum().backward()  # detached statistics: d out / d x = 1 / sigma, no mean term
    assert (x.grad > 0).all()


def test_the_norms_package_holds_norms_and_their_framework_only() -> None:
    """Each module at the top of graphnorm.norms registers a norm, or is the registry, the base, or the hand-off."""
    framework = {"base", "registry", "other_models", "precision", "ops"}  # precision: the models' import path
    registered_modules = {norm_class(name).__module__.rsplit(".", 1)[1] for name in available_norms()}
    modules = {info.name for info in pkgutil.iter_modules(graphnorm.norms.__path__)}
    assert modules - framework == registered_modules
    for name in modules - framework:
        importlib.import_module(f"graphnorm.norms.{name}")
