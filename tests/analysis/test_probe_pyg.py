"""CollapseProbe's defaults on PyG models without graphnorm norms: it watches every top-level message-passing layer
(PyG MessagePassing modules, GPSConv as a whole) and calls a forward that takes the batch object as model(batch);
the records equal the explicit layers= call's."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GATConv, GCNConv, GINConv, GPSConv, MessagePassing
from torch_geometric.nn.models import GCN, GIN

from graphnorm.analysis import CollapseProbe
from graphnorm.analysis.probe import default_forward, message_passing_layers
from graphnorm.norms import build_norm

pytestmark = pytest.mark.usefixtures("one_thread")

NUM_SV = 4


def _graphs(sizes: tuple[int, ...], num_features: int = 6) -> Batch:
    graphs = []
    for n in sizes:
        edges = torch.randint(0, n, (2, 2 * n))
        edges = torch.cat([edges, edges.flip(0)], dim=1)
        graphs.append(Data(x=torch.randn(n, num_features, dtype=torch.float64), edge_index=edges))
    return Batch.from_data_list(graphs)


def _same_values(found, explicit) -> None:
    """The default probe's table equals the explicit one's, layer names aside."""
    assert len(found) == len(explicit) > 0
    columns = ["layer", "rows", "metric", "stat"]
    assert found[columns].equals(explicit[columns])
    torch.testing.assert_close(
        torch.tensor(found.value.to_numpy()), torch.tensor(explicit.value.to_numpy()), rtol=0, atol=0, equal_nan=True
    )


class GPSModel(nn.Module):
    """Two GPSConv layers with a GCN inside each, called as model(batch)."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(6, hidden)
        self.layers = nn.ModuleList(GPSConv(hidden, GCNConv(hidden, hidden), heads=2) for _ in range(2))

    def forward(self, data: Batch) -> Tensor:
        h = self.embed(data.x)
        for layer in self.layers:
            h = layer(h, data.edge_index, data.batch)
        return h


def test_pyg_gcn_watches_its_convs_by_default() -> None:
    batch = _graphs((8, 11, 6))
    model = GCN(6, 10, num_layers=3, out_channels=4).double()
    assert message_passing_layers(model) == [(f"convs.{i}", conv) for i, conv in enumerate(model.convs)]
    found = CollapseProbe(model, num_singular_values=NUM_SV).probe(batch)
    assert list(found.drop_duplicates("layer").layer_name) == ["convs.0", "convs.1", "convs.2"]
    _same_values(found, CollapseProbe(model, layers=model.convs, num_singular_values=NUM_SV).probe(batch))
    # per-graph statistics from data.batch: 3 graphs
    assert set(found[(found.metric == "effective_rank") & (found.stat == "mean")].layer) == {1, 2, 3}


def test_gin_lists_the_gin_convs_not_their_mlps() -> None:
    model = GIN(6, 8, num_layers=2, out_channels=2)
    assert [name for name, _ in message_passing_layers(model)] == ["convs.0", "convs.1"]
    assert all(isinstance(conv, GINConv) for _, conv in message_passing_layers(model))


def test_gpsconv_is_watched_whole_and_a_batch_forward_is_called_with_the_batch() -> None:
    batch = _graphs((7, 9, 5, 6))
    model = GPSModel().double()
    assert [name for name, _ in message_passing_layers(model)] == ["layers.0", "layers.1"]  # not layers.0.conv
    found = CollapseProbe(model, num_singular_values=NUM_SV).probe(batch)
    assert list(found.drop_duplicates("layer").layer_name) == ["layers.0", "layers.1"]
    explicit = CollapseProbe(
        model,
        layers=list(model.layers),
        forward=lambda m, data: m(data),
        num_singular_values=NUM_SV,
    ).probe(batch)
    _same_values(found, explicit)


def test_nested_message_passing_layers_are_found_once_at_the_top() -> None:
    class Outer(MessagePassing):
        """A message-passing layer that holds another one: watched whole."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = GCNConv(4, 4)

        def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
            return self.inner(x, edge_index)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = GATConv(4, 4)
            self.lin = nn.Linear(4, 4)

    shared = GCNConv(4, 4)
    model = nn.Module()
    model.blocks = nn.ModuleList([Block(), Block()])
    model.outer = Outer()
    model.first = shared
    model.again = shared  # one module at two names: listed once
    names = [name for name, _ in message_passing_layers(model)]
    assert names == ["blocks.0.conv", "blocks.1.conv", "outer", "first"]
    assert message_passing_layers(nn.Sequential(nn.Linear(2, 2))) == []
    assert message_passing_layers(shared) == [("gcnconv", shared)]


def test_graphnorm_norms_take_precedence_over_the_convs() -> None:
    model = GCN(6, 8, num_layers=3, out_channels=2, norm=build_norm("pairnorm", 8)).double()
    table = CollapseProbe(model, num_singular_values=0).probe(_graphs((9,)))
    assert list(table.drop_duplicates("layer").layer_name) == ["norms.0", "norms.1"]


def test_default_forward_and_its_errors() -> None:
    class TakesBatch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = GCNConv(6, 4)

        def forward(self, data: Batch, scale: float = 1.0) -> Tensor:
            return scale * self.conv(data.x, data.edge_index)

    class TwoRequired(TakesBatch):
        def forward(self, data: Batch, *, scale: float) -> Tensor:
            return scale * self.conv(data.x, data.edge_index)

    batch = _graphs((5, 6), num_features=6)
    model = TakesBatch().double()
    torch.testing.assert_close(default_forward(model)(model, batch), model(batch))
    pyg = GCN(6, 4, num_layers=2).double()
    torch.testing.assert_close(default_forward(pyg)(pyg, batch), pyg(batch.x, batch.edge_index))
    with pytest.raises(TypeError, match=r"TwoRequired\.forward\(data.*CollapseProbe also takes forward="):
        CollapseProbe(TwoRequired())
    with pytest.raises(ValueError, match=r"no graphnorm norm.*no PyG message-passing layer.*layers=\[\.\.\.\]"):
        CollapseProbe(nn.Sequential(nn.Linear(3, 3)))

    class FeaturesOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = build_norm("pairnorm", 6)

        def forward(self, x: Tensor) -> Tensor:
            return self.norm(x)

    with pytest.raises(TypeError, match=r"called FeaturesOnly\(data\) with the DataBatch .* pass forward=callable"):
        CollapseProbe(FeaturesOnly()).probe(batch)
    table = CollapseProbe(FeaturesOnly(), forward=lambda m, data: m(data.x)).probe(batch)
    assert list(table.drop_duplicates("layer").layer_name) == ["norm"]
