"""GCNII: shapes, the layer formula against a dense float64 reference, probe rows, parameter groups, early stopping,
config registration, and a short real Cora training."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.utils import erdos_renyi_graph

from graphnorm.analysis.probe import probe_records
from graphnorm.config import RunConfig
from graphnorm.models import GCNII
from graphnorm.train.loop import run
from graphnorm.train.schedules import build_optimizer

# Many tiny tensor ops: on a shared 2-core machine one intra-op thread is faster (see conftest).
pytestmark = pytest.mark.usefixtures("one_thread")


def random_graph(num_nodes: int, channels: int = 5, p: float = 0.3, seed: int = 0) -> Data:
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    return Data(x=torch.randn(num_nodes, channels, generator=generator), edge_index=erdos_renyi_graph(num_nodes, p))


def dense_propagation(edge_index: Tensor, num_nodes: int) -> Tensor:
    """D^-1/2 (A + I) D^-1/2 as a dense float64 matrix, row i = target i."""
    adjacency = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    adjacency[edge_index[1], edge_index[0]] = 1.0
    adjacency.fill_diagonal_(1.0)
    inv_sqrt = adjacency.sum(dim=1).rsqrt()
    return inv_sqrt[:, None] * adjacency * inv_sqrt[None, :]


def reference_gcnii(model: GCNII, x: Tensor, edge_index: Tensor, alpha: float, theta: float) -> Tensor:
    """The paper's equations written out (eval mode, no norm), from the model's own weights."""
    x = x.double()
    propagation = dense_propagation(edge_index, x.size(0))
    lin_in, head = model.input_block.lin, model.head
    h0 = torch.relu(x @ lin_in.weight.double().T + lin_in.bias.double())
    h = h0
    for layer, block in enumerate(model.blocks, start=1):
        beta = math.log(theta / layer + 1.0)
        identity = torch.eye(h.size(1), dtype=torch.float64)
        mapping1 = (1.0 - beta) * identity + beta * block.conv.weight1.double()
        if block.conv.weight2 is None:  # GCNII
            h = torch.relu(((1.0 - alpha) * propagation @ h + alpha * h0) @ mapping1)
        else:  # GCNII*: separate weights for the propagated and the initial part
            mapping2 = (1.0 - beta) * identity + beta * block.conv.weight2.double()
            h = torch.relu((1.0 - alpha) * propagation @ h @ mapping1 + alpha * h0 @ mapping2)
    return h @ head.weight.double().T + head.bias.double()


@pytest.mark.parametrize("num_layers", [1, 2, 64])
def test_node_level_shapes_and_probe_layer_names(num_layers: int) -> None:
    graph = random_graph(12)
    model = GCNII(5, 16, 3, num_layers)
    out = model(graph.x, graph.edge_index)
    assert out.shape == (12, 3) and torch.isfinite(out).all()
    names = [name for name, _ in model.collapse_layers()]
    assert names == ["input"] + [f"layer{i}" for i in range(1, num_layers + 1)]


def test_graph_level_shapes_with_atom_encoder() -> None:
    graphs = [random_graph(n, seed=n) for n in (4, 6, 3)]
    for graph in graphs:
        graph.x = torch.randint(0, 28, (graph.num_nodes, 1))
    batch = Batch.from_data_list(graphs)
    for readout in ("mean", "sum"):
        model = GCNII(28, 16, 2, 8, readout=readout, atom_encoder="zinc", norm="batchnorm")
        out = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
        assert out.shape == (3, 2) and torch.isfinite(out).all()


@pytest.mark.parametrize("shared_weights", [True, False])
def test_layer_formula_matches_dense_float64_reference(shared_weights: bool) -> None:
    graph = random_graph(15)
    model = GCNII(5, 8, 3, 6, alpha=0.3, theta=1.5, shared_weights=shared_weights).double().eval()
    for parameter in model.parameters():  # nonzero, non-trivial weights everywhere
        torch.nn.init.normal_(parameter, std=0.5)
    out = model(graph.x.double(), graph.edge_index)
    expected = reference_gcnii(model, graph.x, graph.edge_index, alpha=0.3, theta=1.5)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_alpha_one_keeps_only_the_initial_residual() -> None:
    """alpha = 1: every layer sees h0 only, so the graph's edges cannot change the output."""
    graph = random_graph(15)
    model = GCNII(5, 8, 3, 4, alpha=1.0).eval()
    other_edges = random_graph(15, p=0.6, seed=1).edge_index
    torch.testing.assert_close(model(graph.x, graph.edge_index), model(graph.x, other_edges), rtol=0, atol=1e-6)
    mixing = GCNII(5, 8, 3, 4, alpha=0.1).eval()
    assert not torch.allclose(mixing(graph.x, graph.edge_index), mixing(graph.x, other_edges), atol=1e-3)


def test_sparse_features_give_the_dense_output() -> None:
    graph = random_graph(15)
    graph.x = torch.where(graph.x > 1.0, graph.x, 0.0)  # mostly zeros, as bag-of-words features
    model = GCNII(5, 8, 3, 3).eval()
    torch.testing.assert_close(model(graph.x.to_sparse(), graph.edge_index), model(graph.x, graph.edge_index))
    torch.manual_seed(1)
    dense_train = model.train()(graph.x, graph.edge_index)
    torch.manual_seed(1)
    sparse_train = model(graph.x.to_sparse(), graph.edge_index)
    assert torch.isfinite(sparse_train).all() and sparse_train.shape == dense_train.shape


def test_norm_is_applied_after_each_conv() -> None:
    graph = random_graph(15)
    torch.manual_seed(0)
    plain = GCNII(5, 8, 3, 3).eval()
    torch.manual_seed(0)
    normed = GCNII(5, 8, 3, 3, norm="pairnorm").eval()
    assert all(type(block.norm).__name__ == "PairNorm" for block in normed.blocks)
    assert not torch.allclose(plain(graph.x, graph.edge_index), normed(graph.x, graph.edge_index), atol=1e-3)


def test_probe_gives_one_row_set_per_layer() -> None:
    graph = random_graph(20)
    model = GCNII(5, 8, 3, 4).eval()
    records = probe_records(model, graph)
    layer_names = sorted({record["layer_name"] for record in records})
    assert layer_names == sorted(["input", "layer1", "layer2", "layer3", "layer4"])
    assert {record["rows"] for record in records} == {"node"}
    assert any(record["metric"] == "effective_rank" for record in records)


def test_parameter_groups_have_the_paper_decays() -> None:
    config = RunConfig.from_dict(
        dict(model="gcnii", num_layers=4, weight_decay=5e-4, model_kwargs={"conv_weight_decay": 0.01})
    )
    model = GCNII(5, 8, 3, 4, norm="batchnorm", conv_weight_decay=0.01)
    optimizer = build_optimizer(config, model)
    decays = {id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]}
    assert len(decays) == sum(1 for _ in model.parameters())  # each parameter in exactly one group
    for block in model.blocks:
        assert decays[id(block.conv.weight1)] == 0.01
        norm_parameters = list(block.norm.parameters())
        assert norm_parameters and all(decays[id(p)] == 5e-4 for p in norm_parameters)  # norms count as dense
    assert decays[id(model.input_block.lin.weight)] == decays[id(model.head.bias)] == 5e-4
    single = build_optimizer(config, GCNII(5, 8, 3, 4))  # conv_weight_decay None: one decay for all
    assert [group["weight_decay"] for group in single.param_groups] == [5e-4]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"model_kwargs": {"lambda": 0.5}}, "unknown model_kwargs"),
        ({"model_kwargs": {"alpha": 1.5}}, "alpha"),
        ({"model_kwargs": {"conv_weight_decay": -1.0}}, "conv_weight_decay"),
        ({"residual": True}, "residual"),
        ({"adjacency": "row"}, "adjacency"),
        ({"patience": 0}, "patience"),
    ],
)
def test_gcnii_config_errors_name_the_key(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict({"model": "gcnii", **values})


def cora_gcnii(data_root: Path, **overrides) -> RunConfig:
    values = dict(
        dataset="cora",
        data_root=str(data_root),
        model="gcnii",
        num_layers=4,
        hidden_channels=64,
        dropout=0.6,
        lr=0.01,
        weight_decay=5e-4,
        model_kwargs={"alpha": 0.1, "theta": 0.5, "conv_weight_decay": 0.01},
        feature_norm="row_l1",
        epochs=60,
        probe=False,
    )
    values.update(overrides)
    return RunConfig.from_dict(values)


def test_early_stopping_ends_the_run_patience_epochs_after_the_best(data_root: Path) -> None:
    record = run(cora_gcnii(data_root, num_layers=2, epochs=300, patience=5, lr=0.05))
    assert record["epochs_run"] == record["best_epoch"] + 6 < 300
    assert len(record["history"]) == record["epochs_run"]
    full = run(cora_gcnii(data_root, num_layers=2, epochs=30))
    assert full["epochs_run"] == 30  # patience None: every epoch runs


def test_short_cora_training_learns(data_root: Path) -> None:
    """4 layers, 60 epochs at lr 0.03, the paper's settings otherwise: 80.5% test accuracy (seed 0)."""
    record = run(cora_gcnii(data_root, probe=True, lr=0.03))
    assert record["test_acc"] >= 0.78, record["test_acc"]
    layer_names = {row["layer_name"] for row in record["layers"]}
    assert layer_names == {"input", "layer1", "layer2", "layer3", "layer4"}


def test_graph_level_gcnii_trains_on_zinc_and_stops_early(data_root: Path) -> None:
    """Graph level through the trainer (ZINC atom embedding, mean readout) and early stopping in the graph loop."""
    config = RunConfig.from_dict(
        dict(
            dataset="zinc",
            data_root=str(data_root),
            model="gcnii",
            limit_graphs=64,
            num_layers=4,
            hidden_channels=16,
            dropout=0.0,
            lr=0.01,
            epochs=100,
            patience=2,
            batch_size=32,
            norm="batchnorm",
            probe=False,
        )
    )
    record = run(config)
    assert record["epochs_run"] == record["best_epoch"] + 3 < 100
    assert len(record["history"]) == record["epochs_run"]
    assert record["train_loss"] < record["train_loss_first"]
