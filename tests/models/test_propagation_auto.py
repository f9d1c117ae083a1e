"""DeepGCN's default ``propagation="auto"``: which path each input gets (the rule of
graphnorm.models.propagation.auto_propagation), that small graphs keep PyG's numbers exactly, that above the node
threshold (lowered here, it is a module constant) the sparse path it takes gives PyG's outputs and gradients up to
float32 round-off, and that the path taken is visible on the model."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from graphnorm.config import RunConfig
from graphnorm.models import DeepGCN
from graphnorm.models import propagation as propagation_module
from graphnorm.models.propagation import AUTO_SPARSE_MIN_NODES, auto_propagation

pytestmark = pytest.mark.usefixtures("one_thread")

THRESHOLD = 50  # the lowered threshold of the equivalence tests: graphs of 60 nodes take the sparse path


@pytest.fixture
def low_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(propagation_module, "AUTO_SPARSE_MIN_NODES", THRESHOLD)


def undirected_graph(num_nodes: int, num_edges: int, seed: int = 0) -> Tensor:
    """A random undirected edge list over ``num_nodes`` nodes (duplicates and self loops left in)."""
    edges = torch.randint(0, num_nodes, (2, num_edges), generator=torch.Generator().manual_seed(seed))
    return torch.cat([edges, edges.flip(0)], dim=1)


def outputs_and_gradients(model: nn.Module, *args: object) -> tuple[Tensor, list[Tensor]]:
    out = model(*args)
    gradients = torch.autograd.grad(out.float().square().sum(), list(model.parameters()), allow_unused=True)
    return out.detach(), [torch.zeros(()) if g is None else g for g in gradients]


def pyg_twin(model: DeepGCN) -> DeepGCN:
    twin = copy.deepcopy(model)
    twin.propagation = "pyg"
    return twin


def test_the_rule_picks_sparse_only_for_large_cpu_float_graphs() -> None:
    large, small = torch.empty(AUTO_SPARSE_MIN_NODES, 1), torch.empty(AUTO_SPARSE_MIN_NODES - 1, 1)
    assert auto_propagation(large, torch.float32) == "sparse"
    assert auto_propagation(large.double(), torch.float64) == "sparse"
    assert auto_propagation(small, torch.float32) == "pyg"  # Cora, CiteSeer, Actor, every default batch
    for half in (torch.float16, torch.bfloat16):  # the product would round otherwise than PyG's messages
        assert auto_propagation(large.to(half), half) == "pyg"
    assert auto_propagation(torch.empty(AUTO_SPARSE_MIN_NODES, 1, device="meta"), torch.float32) == "pyg"
    if torch.cuda.is_available():
        assert auto_propagation(large.cuda(), torch.float32) == "pyg"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert auto_propagation(large, torch.float32) == "pyg"
    assert auto_propagation(large.to_sparse(), torch.float32) == "sparse"  # sparse features: the linear map first


def test_explicit_paths_are_kept_whatever_the_input() -> None:
    large = torch.empty(AUTO_SPARSE_MIN_NODES, 4)
    assert DeepGCN(4, 8, 2, 2).propagation == "auto"  # the default
    assert DeepGCN(4, 8, 2, 2).propagation_for(large) == "sparse"
    assert DeepGCN(4, 8, 2, 2).propagation_for(large[:10]) == "pyg"
    assert DeepGCN(4, 8, 2, 2, propagation="pyg").propagation_for(large) == "pyg"
    assert DeepGCN(4, 8, 2, 2, propagation="sparse").propagation_for(large[:10]) == "sparse"
    assert DeepGCN(4, 8, 2, 2).half().propagation_for(large.half()) == "pyg"


def test_small_graphs_keep_pyg_numbers_exactly() -> None:
    x, edge_index = torch.randn(40, 12), undirected_graph(40, 80)
    torch.manual_seed(0)
    model = DeepGCN(12, 16, 3, 4, norm="pairnorm", dropout=0.5)
    reference = pyg_twin(model)
    torch.manual_seed(1)
    out, grads = outputs_and_gradients(model, x, edge_index)
    torch.manual_seed(1)
    out_ref, grads_ref = outputs_and_gradients(reference, x, edge_index)
    assert model.last_propagation == "pyg" and model._sparse_cache is None
    assert torch.equal(out, out_ref)  # the same calls: bit for bit
    assert all(torch.equal(g, g_ref) for g, g_ref in zip(grads, grads_ref, strict=True))


@pytest.mark.usefixtures("low_threshold")
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_above_the_threshold_auto_equals_pyg(dropout: float) -> None:
    """8-layer PairNorm, as the million-node benchmark; with dropout the same seed gives the same masks."""
    x, edge_index = torch.randn(60, 12), undirected_graph(60, 150)
    torch.manual_seed(0)
    model = DeepGCN(12, 16, 3, 8, norm="pairnorm", dropout=dropout)
    reference = pyg_twin(model)
    for train in (True, False):
        model.train(train), reference.train(train)
        torch.manual_seed(2)
        out, grads = outputs_and_gradients(model, x, edge_index)
        torch.manual_seed(2)
        out_ref, grads_ref = outputs_and_gradients(reference, x, edge_index)
        assert model.last_propagation == "sparse" and reference.last_propagation == "pyg"
        scale = out_ref.abs().max().clamp_min(1.0)
        torch.testing.assert_close(out, out_ref, atol=1e-4 * scale, rtol=1e-4)
        scale = max(g.abs().max() for g in grads_ref).clamp_min(1.0)
        for grad, grad_ref in zip(grads, grads_ref, strict=True):
            torch.testing.assert_close(grad, grad_ref, atol=1e-4 * scale, rtol=1e-4)
    assert "last forward: 'sparse'" in repr(model)


@pytest.mark.usefixtures("low_threshold")
def test_above_the_threshold_batches_and_half_models() -> None:
    graphs = [Data(x=torch.randn(n, 6), edge_index=undirected_graph(n, 2 * n, seed=n)) for n in (20, 25, 30)]
    batch = Batch.from_data_list(graphs)  # 75 nodes together: over the threshold
    torch.manual_seed(0)
    model = DeepGCN(6, 8, 2, 3, norm="graphnorm", readout="mean", virtual_node=True, dropout=0.0)
    out, grads = outputs_and_gradients(model, batch.x, batch.edge_index, batch.batch, 3)
    out_ref, grads_ref = outputs_and_gradients(pyg_twin(model), batch.x, batch.edge_index, batch.batch, 3)
    assert model.last_propagation == "sparse"
    torch.testing.assert_close(out, out_ref, atol=1e-4, rtol=1e-4)
    for grad, grad_ref in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(grad, grad_ref, atol=1e-4, rtol=1e-4)
    half = copy.deepcopy(model).bfloat16()  # half precision: PyG's path, the same numbers as asking for it
    assert torch.equal(half(batch.x.bfloat16(), batch.edge_index, batch.batch, 3),
                       pyg_twin(half)(batch.x.bfloat16(), batch.edge_index, batch.batch, 3))  # fmt: skip
    assert half.last_propagation == "pyg"


@pytest.mark.usefixtures("low_threshold")
def test_attention_models_keep_pyg_above_the_threshold() -> None:
    """DeepGAT inherits the default but has no fixed adjacency to multiply by: its edges are weighed per forward."""
    from graphnorm.models import DeepGAT

    x, edge_index = torch.randn(60, 12), undirected_graph(60, 150)
    model = DeepGAT(12, 8, 3, 3, norm="pairnorm", dropout=0.0)
    assert torch.equal(model(x, edge_index), pyg_twin(model)(x, edge_index))
    assert model.last_propagation == "pyg" and model._sparse_cache is None


def test_run_configs_and_their_ids_are_unchanged_by_the_default() -> None:
    """The run config passes no propagation unless asked (model_kwargs), so default runs get the model default
    and their ids hash nothing new; an explicit choice is still a valid model keyword."""
    assert "propagation" not in RunConfig().to_dict() and RunConfig().model_kwargs == {}
    for choice in ("auto", "pyg", "sparse"):
        RunConfig.from_dict({"model_kwargs": {"propagation": choice}})
    with pytest.raises(ValueError, match="propagation"):
        RunConfig.from_dict({"model_kwargs": {"propagation": "dense"}})
