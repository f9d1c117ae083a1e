"""A model that keeps something built from its inputs between forwards (DeepGCN's sparse adjacency) rebuilds it
when an input is edited in place by any route: torch's version counter misses an edit through a NumPy view
(``torch.from_numpy``) or through ``.data``, so the cache is checked against the values.

Each case edits one cached input of a model that has already run on it, then compares the model's output with a fresh
model of the same weights run on a copy of the edited input. The models with a cache of their inputs are DeepGCN with
``propagation="sparse"`` (node level, graph level with a batch vector, with a virtual node). DeepGCN's default
propagation, DeepGAT, GCNII, GIN, Graphormer and the norms recompute what they derive from the graph on every call
(:func:`test_the_other_models_and_the_norms_keep_no_graph_between_calls` checks that on the same edits); the
collapse probe keeps a graph's edge structure between passes, checked against a copy of the edges
(:func:`test_the_probe_measures_an_edited_graph_afresh`).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from graphnorm.analysis import CollapseProbe
from graphnorm.models import GCNII, GIN, DeepGAT, DeepGCN

pytestmark = pytest.mark.usefixtures("one_thread")

SIZES = (5, 1, 6)  # the middle graph is one isolated node: its batch entry can change without a cross-graph edge


def graph(numpy_backed: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features [12, 4], ``edge_index`` (a ring per graph of more than one node) and the sorted batch vector; the
    integer tensors share memory with NumPy arrays when ``numpy_backed``."""
    edges, start = [], 0
    for n in SIZES:
        if n > 1:
            nodes = torch.arange(start, start + n)
            edges += [torch.stack([nodes, nodes.roll(1)]), torch.stack([nodes.roll(1), nodes])]
        start += n
    edge_index = torch.cat(edges, dim=1)
    batch = torch.cat([torch.full((n,), g) for g, n in enumerate(SIZES)])
    if numpy_backed:
        edge_index, batch = torch.from_numpy(edge_index.numpy().copy()), torch.from_numpy(batch.numpy().copy())
    x = torch.randn(sum(SIZES), 4, generator=torch.Generator().manual_seed(0))
    return x, edge_index, batch


def edit(tensor: torch.Tensor, route: str, position: tuple[int, ...], value: int) -> None:
    """Write ``value`` at ``position`` of ``tensor`` in place by ``route``."""
    if route == "numpy":
        tensor.numpy()[position] = value  # torch's version counter does not see it
    elif route == "data":
        tensor.data[position] = value  # .data has a version counter of its own
    else:
        with torch.no_grad():
            tensor[position] = value


ROUTES = ("numpy", "data", "index")
# (model keywords, forward takes the batch vector)
SPARSE_MODELS = {
    "node": (dict(readout=None), False),
    "graph-mean": (dict(readout="mean"), True),
    "virtual-node": (dict(readout="mean", virtual_node=True), True),
    "contranorm": (dict(readout=None, norm="contranorm"), False),  # the norm reads the cached rows' edge_index
}
# (input, position, new value): a ring edge 0 -> 4 of the first graph becomes 0 -> 2; node 5 (graph 1, alone) moves
# to graph 2 (the batch stays sorted)
EDITS = {"edge_index": ((1, 0), 2), "batch": ((5,), 2)}


def sparse_cases() -> list[tuple[str, str, str]]:
    cases = []
    for name, (_, takes_batch) in SPARSE_MODELS.items():
        for tensor in EDITS:
            if tensor == "batch" and not takes_batch:
                continue
            cases += [(name, tensor, route) for route in ROUTES]
    return cases


@pytest.mark.parametrize(("name", "tensor", "route"), sparse_cases())
def test_sparse_deepgcn_sees_an_input_edited_in_place(name: str, tensor: str, route: str) -> None:
    keywords, takes_batch = SPARSE_MODELS[name]
    keywords = dict(keywords)
    norm = keywords.pop("norm", "pairnorm")
    torch.manual_seed(0)
    model = DeepGCN(4, 8, 3, 3, norm=norm, dropout=0.0, propagation="sparse", **keywords).eval()
    x, edge_index, batch = graph(numpy_backed=route == "numpy")
    inputs = {"edge_index": edge_index, "batch": batch}

    def run(m: DeepGCN, edges: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
        return m(x, edges, vector) if takes_batch else m(x, edges)

    before = run(model, edge_index, batch)  # fills the cache
    position, value = EDITS[tensor]
    edit(inputs[tensor], route, position, value)
    after = run(model, edge_index, batch)
    fresh = copy.deepcopy(model)  # a deep copy drops the cached graph
    expected = run(fresh, edge_index.clone(), batch.clone())
    assert not torch.allclose(before, expected, atol=1e-3), "the edit should change the output"
    torch.testing.assert_close(after, expected, rtol=1e-4, atol=1e-5)


OTHER_MODELS = {
    "gcn-pyg": lambda: DeepGCN(4, 8, 3, 2, norm="contranorm", dropout=0.0),
    "gat": lambda: DeepGAT(4, 8, 3, 2, norm="contranorm", dropout=0.0, num_heads=2),
    "gcnii": lambda: GCNII(4, 8, 3, 2, norm="contranorm", dropout=0.0),
    "gin": lambda: GIN(4, 8, 3, 2, norm="contranorm", dropout=0.0),
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", OTHER_MODELS)
def test_the_other_models_and_the_norms_keep_no_graph_between_calls(name: str, route: str) -> None:
    torch.manual_seed(0)
    model = OTHER_MODELS[name]().eval()
    x, edge_index, _ = graph(numpy_backed=route == "numpy")
    before = model(x, edge_index)
    edit(edge_index, route, (1, 0), 2)
    expected = copy.deepcopy(model)(x, edge_index.clone())
    assert not torch.allclose(before, expected, atol=1e-3)
    torch.testing.assert_close(model(x, edge_index), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("route", ROUTES)
def test_the_probe_measures_an_edited_graph_afresh(route: str) -> None:
    """The collapse probe keeps the last graph's edge structure between passes (compared by value with its copy):
    edge metrics after an edit are those of a new probe."""
    torch.manual_seed(0)
    model = DeepGCN(4, 8, 3, 3, norm="pairnorm", dropout=0.0).eval()
    x, edge_index, _ = graph(numpy_backed=route == "numpy")
    probe = CollapseProbe(model)
    before = probe.probe(Data(x=x, edge_index=edge_index))
    edit(edge_index, route, (1, 0), 2)
    after = probe.probe(Data(x=x, edge_index=edge_index))
    expected = CollapseProbe(model).probe(Data(x=x, edge_index=edge_index.clone()))
    edge_metrics = expected["metric"].str.contains("dirichlet|neighbors")
    assert edge_metrics.any()
    assert not np.allclose(before["value"][edge_metrics], expected["value"][edge_metrics], equal_nan=True)
    np.testing.assert_allclose(after["value"], expected["value"], rtol=1e-4, atol=1e-6)
