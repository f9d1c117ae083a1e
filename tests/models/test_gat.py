"""DeepGAT: shapes at node and graph level, equality with PyG's GAT and GATConv, batch independence, the probe
contract, a real Cora run, and one-line errors for bad models and configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GATConv
from torch_geometric.nn.models import GAT
from torch_geometric.utils import erdos_renyi_graph

from graphnorm.config import RunConfig
from graphnorm.models import DeepGAT, DeepGCN
from graphnorm.train import run

# Many tiny tensor ops: on a shared 2-core machine one intra-op thread is faster (see conftest).
pytestmark = pytest.mark.usefixtures("one_thread")


def random_graph(num_nodes: int, channels: int = 5, p: float = 0.4, seed: int = 0) -> Data:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, channels, generator=generator)
    torch.manual_seed(seed)
    return Data(x=x, edge_index=erdos_renyi_graph(num_nodes, p))


def molecule_batch(sizes: tuple[int, ...] = (4, 6, 3)) -> Batch:
    """Graphs with ZINC-like integer atom types (28 of them)."""
    graphs = []
    for seed, n in enumerate(sizes):
        graph = random_graph(n, seed=seed)
        graph.x = torch.randint(0, 28, (n, 1), generator=torch.Generator().manual_seed(seed))
        graphs.append(graph)
    return Batch.from_data_list(graphs)


@pytest.mark.parametrize("num_layers", [1, 2, 16])
def test_node_level_shapes_and_heads(num_layers: int) -> None:
    graph = random_graph(9)
    model = DeepGAT(5, 16, 3, num_layers, norm="contranorm", num_heads=4)
    assert model(graph.x, graph.edge_index).shape == (9, 3)
    hidden = [block.conv for block in model.blocks[:-1]]
    assert all(conv.heads == 4 and conv.out_channels == 4 and conv.concat for conv in hidden)
    classifier = model.blocks[-1].conv
    assert (classifier.heads, classifier.out_channels, classifier.concat) == (1, 3, False)
    averaged = DeepGAT(5, 16, 3, 2, num_heads=3, concat=False, output_heads=2)
    assert (averaged.blocks[0].conv.heads, averaged.blocks[0].conv.out_channels) == (3, 16)
    assert averaged(graph.x, graph.edge_index).shape == (9, 3)


@pytest.mark.parametrize(("norm", "readout"), [("sepnorm", "virtual"), ("contranorm", "mean"), ("batchnorm", "sum")])
def test_graph_level_shapes_with_virtual_node(norm: str, readout: str) -> None:
    batch = molecule_batch()
    model = DeepGAT(28, 8, 2, 3, norm=norm, readout=readout, virtual_node=True, atom_encoder="zinc", num_heads=2)
    out = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    assert out.shape == (3, 2) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(p.grad is not None for p in model.blocks[0].conv.parameters())


def test_self_loops_added_once_match_gatconv_defaults() -> None:
    """A one-layer DeepGAT is a GATConv that adds its own self loops, on a graph with self loops and duplicates."""
    graph = random_graph(7)
    edge_index = torch.cat([graph.edge_index, torch.tensor([[0, 3, 3], [0, 3, 5]])], dim=1)
    model = DeepGAT(5, 8, 3, 1, num_heads=2, output_heads=2).eval()
    reference = GATConv(5, 3, heads=2, concat=False).eval()  # add_self_loops=True: remove, then add one per node
    reference.load_state_dict(model.blocks[0].conv.state_dict())
    torch.testing.assert_close(model(graph.x, edge_index), reference(graph.x, edge_index))
    rows = model.graph_rows(edge_index, 7, None, None)
    loops = rows.propagation_index[:, rows.propagation_index[0] == rows.propagation_index[1]]
    assert sorted(loops[0].tolist()) == list(range(7)) and rows.propagation_weight is None


@pytest.mark.parametrize("activation", ["relu", "elu"])
def test_equals_pyg_gat_with_the_same_weights(activation: str) -> None:
    """norm='none', conv-norm-act-dropout order, heads averaged at the output: PyG's GAT, layer for layer (ReLU, and
    the GAT paper's ELU)."""
    graph = random_graph(12, channels=6)
    ours = DeepGAT(6, 16, 4, 3, num_heads=4, output_heads=4, dropout=0.5, activation=activation).eval()
    pyg = GAT(6, 16, 3, 4, heads=4, dropout=0.5, act=activation).eval()
    for block, conv in zip(ours.blocks, pyg.convs):
        conv.load_state_dict(block.conv.state_dict())
    torch.testing.assert_close(ours(graph.x, graph.edge_index), pyg(graph.x, graph.edge_index))


@pytest.mark.parametrize("norm", ["none", "contranorm"])
def test_zero_attention_kipf_init_starts_as_the_row_adjacency_gcn(norm: str) -> None:
    """attention_init='zeros': uniform attention over each node and its neighbours, so with the same weights the GAT
    is DeepGCN(adjacency='row') layer for layer; init='kipf' draws weights and bias in +-1/sqrt(output width)."""
    graph = random_graph(11, channels=6)
    kwargs = dict(norm=norm, dropout=0.6, layer_order="dropout-conv-norm-act", shared_layernorm=norm == "contranorm")
    torch.manual_seed(0)
    gat = DeepGAT(6, 16, 3, 4, num_heads=4, init="kipf", attention_init="zeros", **kwargs).eval()
    gcn = DeepGCN(6, 16, 3, 4, adjacency="row", **kwargs).eval()
    for block, gcn_block in zip(gat.blocks, gcn.blocks):
        conv = block.conv
        assert conv.att_src.abs().sum() == 0 and conv.att_dst.abs().sum() == 0
        bound = 1 / conv.lin.weight.size(0) ** 0.5  # 16 for the hidden layers, 3 for the classifier
        assert conv.lin.weight.abs().max() <= bound and 0 < conv.bias.abs().max() <= bound
        gcn_block.conv.lin.weight.data.copy_(conv.lin.weight)
        gcn_block.conv.bias.data.copy_(conv.bias)
    torch.testing.assert_close(gat(graph.x, graph.edge_index), gcn(graph.x, graph.edge_index))
    torch.manual_seed(0)
    glorot = DeepGAT(6, 16, 3, 4, num_heads=4, **kwargs)
    assert glorot.blocks[1].conv.att_src.abs().sum() > 0 and glorot.blocks[1].conv.bias.abs().sum() == 0
    with pytest.raises(ValueError, match="attention_init"):
        DeepGAT(6, 16, 3, 2, attention_init="uniform")


@pytest.mark.parametrize("norm", ["contranorm", "sepnorm", "graphnorm", "batchnorm"])
def test_graph_outputs_independent_of_batch_mates_in_eval(norm: str) -> None:
    graphs = [molecule_batch((5,)).get_example(0), molecule_batch((7,)).get_example(0)]
    model = DeepGAT(28, 8, 2, 3, norm=norm, readout="sum", virtual_node=True, atom_encoder="zinc", num_heads=2).eval()
    together = Batch.from_data_list(graphs)
    out_together = model(together.x, together.edge_index, together.batch, 2)
    for index, graph in enumerate(graphs):
        alone = Batch.from_data_list([graph])
        out_alone = model(alone.x, alone.edge_index, alone.batch, 1)
        torch.testing.assert_close(out_together[index : index + 1], out_alone, atol=1e-5, rtol=1e-5)


def test_probe_rows_per_layer_graph_level() -> None:
    from graphnorm.analysis.probe import probe_records

    batch = molecule_batch()
    model = DeepGAT(28, 8, 1, 3, norm="layernorm", readout="mean", virtual_node=True, atom_encoder="zinc").eval()
    records = probe_records(model, batch, num_singular_values=0)
    names = sorted({record["layer_name"] for record in records})
    assert names == ["input", "layer1", "layer2", "layer3"]
    assert {record["rows"] for record in records} == {"node", "token"}


def test_cora_run_learns_and_probes_every_layer(data_root: Path) -> None:
    """A 2-layer GAT on Cora, 20 epochs: well above the 30% of the majority class, probed after each layer."""
    config = RunConfig.from_dict(
        dict(
            dataset="cora",
            data_root=str(data_root),
            model="gat",
            num_layers=2,
            hidden_channels=32,
            num_heads=4,
            dropout=0.6,
            lr=0.005,
            epochs=20,
            feature_norm="row_l1",
            layer_order="dropout-conv-norm-act",
            seed=0,
        )
    )
    record = run(config)
    assert record["test_acc"] >= 0.75, record["test_acc"]
    assert record["train_loss"] < record["train_loss_first"]
    assert sorted({row["layer_name"] for row in record["layers"]}) == ["layer1", "layer2"]
    # 1433*8*4 + 2*4*8 + 32 (layer 1) + 32*7 + 2*7 + 7 (classifier)
    assert record["num_params"] == 1433 * 32 + 64 + 32 + 32 * 7 + 14 + 7


def test_bad_models_raise_clear_errors() -> None:
    graph = random_graph(6)
    with pytest.raises(ValueError, match="hidden_channels=30 must be divisible by num_heads=4"):
        DeepGAT(5, 30, 3, 2, num_heads=4)
    with pytest.raises(ValueError, match="heads"):
        DeepGAT(5, 32, 3, 2, num_heads=0)
    with pytest.raises(ValueError, match="output_heads"):
        DeepGAT(5, 32, 3, 2, output_heads=0)
    with pytest.raises(ValueError, match="attention_dropout"):
        DeepGAT(5, 32, 3, 2, attention_dropout=1.0)
    with pytest.raises(TypeError, match="adjacency"):
        DeepGAT(5, 32, 3, 2, adjacency="row")
    with pytest.raises(ValueError, match=r"x must be float \[num_nodes, 5\]"):
        DeepGAT(5, 32, 3, 2)(graph.x[:, :4], graph.edge_index)
    with pytest.raises(ValueError, match="outside"):
        DeepGAT(5, 32, 3, 2)(graph.x, graph.edge_index + 10)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"adjacency": "row"}, "adjacency='row' is a DeepGCN option: model='gat'"),
        ({"hidden_channels": 30}, "num_heads=4 must divide hidden_channels=30"),
        ({"model_kwargs": {"adjacency": "row"}}, r"unknown model_kwargs \['adjacency'\] for gat"),
        ({"model_kwargs": {"init": "he"}}, "init must be one of"),
        ({"model_kwargs": {"output_heads": 0}}, "output_heads must be a positive integer"),
        ({"model_kwargs": {"concat": "yes"}}, "model_kwargs.concat must be true or false"),
        ({"model_kwargs": {"attention_dropout": 1.5}}, "attention_dropout must be in"),
        ({"model_kwargs": {"activation": "tanh"}}, "activation must be one of 'relu', 'elu'; got 'tanh'"),
    ],
)
def test_bad_gat_configs_name_the_key(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict({"model": "gat", **values})


def test_gat_config_accepts_averaged_heads_and_the_preset() -> None:
    from graphnorm.files import load_yaml_file

    RunConfig.from_dict({"model": "gat", "hidden_channels": 30, "model_kwargs": {"concat": False}})
    preset = load_yaml_file(
        Path(__file__).resolve().parents[2] / "experiments" / "sweeps" / "cora_gat_contranorm_protocol.yaml"
    )
    for norm, settings in preset["norm_settings"].items():
        RunConfig.from_dict({**preset["base"], "norm": norm, "num_layers": 32, **settings})
