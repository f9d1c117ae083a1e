"""The one forward adapter (:func:`graphnorm.models.forward_adapter`): the trainer, ``predict`` and the probe call a
model on a batch the same way, passing ``batch`` / ``batch_size`` only to a forward that takes them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GCNConv, global_mean_pool

from graphnorm.analysis import CollapseProbe
from graphnorm.config import RunConfig
from graphnorm.data import register_dataset
from graphnorm.data.graphormer_preprocess import GraphormerPreprocess, collate_graphormer
from graphnorm.data.registry import _DATASETS
from graphnorm.models import Graphormer, forward_adapter, model_outputs, register_model
from graphnorm.models.registry import _MODELS
from graphnorm.norms import build_norm
from graphnorm.train import train

pytestmark = pytest.mark.usefixtures("one_thread")


class TwoConvs(nn.Module):
    """A node-level model with PyG's plainest forward, ``forward(x, edge_index)``: no ``batch`` at all."""

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int = 8, norm: str = "none") -> None:
        super().__init__()
        self.first = GCNConv(in_channels, hidden_channels)
        self.norm = build_norm(norm, hidden_channels)
        self.second = GCNConv(hidden_channels, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = F.relu(self.norm(self.first(x, edge_index), edge_index=edge_index))
        return self.second(h, edge_index)


def ring(num_nodes: int, seed: int, channels: int = 3) -> Data:
    nodes = torch.arange(num_nodes)
    edge_index = torch.stack([torch.cat([nodes, (nodes + 1) % num_nodes]), torch.cat([(nodes + 1) % num_nodes, nodes])])
    part = nodes % 5
    x = torch.randn(num_nodes, channels, generator=torch.Generator().manual_seed(seed))
    return Data(x=x, edge_index=edge_index, y=nodes % 2, train_mask=part < 3, val_mask=part == 3, test_mask=part == 4)


def test_trainer_runs_a_node_level_forward_without_batch_on_a_graph_of_several_parts(tmp_path: Path) -> None:
    """A node-level dataset whose graph is a PyG ``Batch`` of several graphs (as PPI-like data comes) has a batch
    vector; the trainer used to pass ``batch=`` to ``forward(x, edge_index)`` (TypeError), the probe did not."""
    try:
        register_model("two_convs_fwd", levels=("node",))(TwoConvs)

        @register_dataset("two_rings_fwd", level="node", task_type="multiclass", metric="acc")
        def load_two_rings(spec, root):
            return spec.task(num_features=3, num_outputs=2, data=Batch.from_data_list([ring(10, 0), ring(12, 1)]))

        config = RunConfig(
            dataset="two_rings_fwd", model="two_convs_fwd", epochs=3, hidden_channels=8, data_root=str(tmp_path)
        )
        model, task, record = train(config)
    finally:
        _MODELS.pop("two_convs_fwd", None)
        _DATASETS.pop("two_rings_fwd", None)
    assert len(record["history"]) == 3 and 0.0 <= record["test_acc"] <= 1.0
    model.eval()
    data = task.data
    torch.testing.assert_close(model_outputs(model, data), model(data.x, data.edge_index))
    # the probe calls it the same way and measures its one norm over the data's two graphs
    probe = CollapseProbe(model)
    table = probe.probe(data)
    assert list(table.drop_duplicates("layer").layer_name) == ["norm"]
    assert torch.equal(probe.last_contexts[0]["batch"], data.batch)


class PooledGcn(nn.Module):
    """Graph level, PyG's usual ``forward(x, edge_index, batch)`` with ``batch`` required."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = GCNConv(3, 4)
        self.norm = build_norm("pairnorm", 4)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        return global_mean_pool(self.norm(self.conv(x, edge_index), batch=batch), batch)


def test_batch_goes_to_a_forward_that_takes_it_and_a_required_batch_may_be_none() -> None:
    model = PooledGcn().eval()
    batch = Batch.from_data_list([ring(4, 0), ring(6, 1), ring(5, 2)])
    expected = model(batch.x, batch.edge_index, batch.batch)
    assert torch.equal(model_outputs(model, batch), expected) and expected.shape == (3, 4)
    one = ring(6, 1)  # no batch vector: one graph, batch=None as PyG's pooling takes it
    torch.testing.assert_close(model_outputs(model, one), expected[1:2])
    table = CollapseProbe(model).probe(batch)  # the probe's default forward is the same adapter
    assert set(table.layer_name) == {"norm"} and set(table.stat) == {"mean", "std", "pooled"}


def test_a_forward_outside_the_convention_is_named_in_the_error() -> None:
    class WholeData(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, data: Data) -> Tensor:
            return self.lin(data.x)

    class ExtraInput(nn.Module):
        def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor) -> Tensor:
            return x

    with pytest.raises(TypeError, match=r"WholeData\.forward\(data: 'Data'\) -> 'Tensor' does not follow"):
        model_outputs(WholeData(), ring(4, 0))
    with pytest.raises(TypeError, match=r"ExtraInput\.forward\(x: 'Tensor', edge_index: 'Tensor', edge_weight"):
        forward_adapter(ExtraInput())
    with pytest.raises(TypeError, match=r"ExtraInput\.forward.*forward=callable\(model, data\)"):
        CollapseProbe(ExtraInput(), layers=[nn.Linear(3, 3)])


def test_graphormer_is_called_on_its_whole_batch_by_the_trainer_and_the_probe() -> None:
    """Graphormer is registered with ``inputs="graphormer"``: the adapter hands it the ``GraphormerBatch``."""
    preprocess = GraphormerPreprocess(multi_hop_max_dist=2)
    graphs = []
    for seed, num_nodes in enumerate((4, 6)):
        x = torch.randint(0, 6, (num_nodes, 1), generator=torch.Generator().manual_seed(seed))
        graphs.append(preprocess(Data(x=x, edge_index=ring(num_nodes, seed).edge_index, num_nodes=num_nodes)))
    batch = collate_graphormer(graphs)
    torch.manual_seed(0)
    model = Graphormer(2, 16, 2, atom_feature_dims=[6], max_degree=4, max_distance=4, multi_hop_max_dist=2).eval()
    assert torch.equal(model_outputs(model, batch), model(batch))
    probe = CollapseProbe(model)
    probe.capture(batch)
    assert torch.equal(probe.last_contexts[0]["token_mask"], batch.token_mask)
