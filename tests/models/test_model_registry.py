"""The model registry: models built by name for a task, keywords checked like build_norm's, one forward adapter."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from graphnorm.data.datasets import GraphTask
from graphnorm.models import DeepGCN, available_models, build_model, model_outputs, model_spec, register_model
from graphnorm.models.registry import _MODELS

CORA_LIKE = GraphTask(name="toy", level="node", task_type="multiclass", metric="acc", num_features=5, num_outputs=3)
ZINC_LIKE = GraphTask(
    name="toy", level="graph", task_type="regression", metric="mae", num_features=28, num_outputs=1,
    atom_encoder="zinc",
)  # fmt: skip


def graph(num_nodes: int = 4, features: int = 5) -> Data:
    ring = torch.arange(num_nodes)
    edge_index = torch.stack([torch.cat([ring, (ring + 1) % num_nodes]), torch.cat([(ring + 1) % num_nodes, ring])])
    return Data(x=torch.randn(num_nodes, features), edge_index=edge_index)


def test_builtin_models_are_registered() -> None:
    assert {"gcn", "gat", "gcnii", "graphormer"} <= set(available_models())
    assert model_spec("graphormer").levels == ("graph",) and model_spec("graphormer").inputs == "graphormer"
    assert model_spec("GCN").factory is DeepGCN


def test_build_model_takes_sizes_and_feature_kind_from_the_task() -> None:
    model = build_model("gcn", CORA_LIKE, hidden_channels=8, num_layers=2)
    assert isinstance(model, DeepGCN) and model.in_channels == 5 and model.out_channels == 3
    molecules = build_model("gcn", ZINC_LIKE, hidden_channels=8, num_layers=2, readout="mean")
    assert molecules.input_layer.atom_encoder == "zinc" and molecules.out_channels == 1


def test_unknown_name_or_keyword_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'sage'; valid choices: gat, gcn, gcnii, gin, graphormer"):
        build_model("sage", CORA_LIKE)
    with pytest.raises(ValueError, match=r"unknown keyword\(s\) \['hiden_channels'\] for model 'gcn'; valid keywords: "
                       r"hidden_channels, num_layers, norm"):  # fmt: skip
        build_model("gcn", CORA_LIKE, hiden_channels=8, num_layers=2)
    with pytest.raises(ValueError, match=r"\['in_channels'\] of model 'gcn' come from the task"):
        build_model("gcn", CORA_LIKE, in_channels=7, hidden_channels=8, num_layers=2)
    with pytest.raises(ValueError, match="predicts at the graph level; the task is node"):
        build_model("graphormer", CORA_LIKE, num_layers=1, hidden_channels=8, num_heads=2)


def test_register_model_from_user_code_and_its_checks() -> None:
    class Linear(nn.Module):
        def __init__(self, in_channels: int, out_channels: int, bias: bool = True) -> None:
            super().__init__()
            self.lin = nn.Linear(in_channels, out_channels, bias=bias)

        def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
            return self.lin(x)

    try:
        register_model("toy_linear", levels=("node",))(Linear)
        model = build_model("toy_linear", CORA_LIKE, bias=False)
        assert model.lin.in_features == 5 and model.lin.out_features == 3 and model.lin.bias is None
        with pytest.raises(ValueError, match="already registered"):
            register_model("toy_linear")(DeepGCN)
        with pytest.raises(ValueError, match="lower-case"):
            register_model("Toy")
        with pytest.raises(ValueError, match=r"^inputs must be one of 'pyg', 'graphormer'; got 'dense'$"):
            register_model("toy2", inputs="dense")
        # the one adapter: a forward without batch_size gets x, edge_index and batch only
        data = graph()
        torch.testing.assert_close(model_outputs(model, data), model.lin(data.x))
        batch = Batch.from_data_list([graph(), graph(3)])
        assert model_outputs(model, batch).shape == (7, 3)
    finally:
        _MODELS.pop("toy_linear", None)


def test_model_outputs_passes_batch_size_when_the_forward_takes_it() -> None:
    model = build_model("gcn", ZINC_LIKE, hidden_channels=8, num_layers=2, readout="sum").eval()
    graphs = [Data(x=torch.randint(0, 28, (n, 1)), edge_index=graph(n).edge_index) for n in (3, 5)]
    batch = Batch.from_data_list(graphs)
    expected = model(batch.x, batch.edge_index, batch=batch.batch, batch_size=2)
    assert torch.equal(model_outputs(model, batch), expected)
