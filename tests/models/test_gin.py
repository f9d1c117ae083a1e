"""GIN with OGB's bond encoders and virtual node: the forward equals OGB's formulas written out by hand, graphs are
independent in eval mode, every norm runs, gradients reach every parameter, the virtual node matters, one-line
errors, the probe contract, and short real training runs (ZINC, Cora) through graphnorm.train."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader

from graphnorm.analysis import CollapseProbe
from graphnorm.config import RunConfig
from graphnorm.data import load_dataset
from graphnorm.models import GIN, ConstantReadoutWarning, build_model
from graphnorm.norms import available_norms, norm_class
from graphnorm.train import run

# Many tiny tensor ops: on a shared 2-core machine one intra-op thread is faster (see conftest).
pytestmark = pytest.mark.usefixtures("one_thread")

ATOM_DIMS, BOND_DIMS = get_atom_feature_dims(), get_bond_feature_dims()


def ogb_molecule(num_nodes: int, seed: int) -> Data:
    """A random connected molecule in OGB's featurization: 9 atom and 3 bond columns, both edge directions."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.stack([torch.randint(0, d, (num_nodes,), generator=generator) for d in ATOM_DIMS], dim=1)
    chain = [(i, i + 1) for i in range(num_nodes - 1)]
    extra = [(0, num_nodes - 1)] if num_nodes > 3 else []  # a ring
    pairs = torch.tensor(chain + extra).t()
    bonds = torch.stack([torch.randint(0, d, (pairs.size(1),), generator=generator) for d in BOND_DIMS], dim=1)
    return Data(x=x, edge_index=torch.cat([pairs, pairs.flip(0)], 1), edge_attr=torch.cat([bonds, bonds]))


def ogb_batch(sizes: tuple[int, ...] = (5, 3, 7)) -> Batch:
    return Batch.from_data_list([ogb_molecule(n, seed) for seed, n in enumerate(sizes)])


def call(model: GIN, data: Batch) -> Tensor:
    return model(data.x, data.edge_index, data.batch, data.num_graphs, edge_attr=data.edge_attr)


def ogb_gin(num_layers: int = 3, hidden: int = 8, **kwargs) -> GIN:
    return GIN(9, hidden, 2, num_layers, readout="mean", atom_encoder="ogb", bond_feature_dims=BOND_DIMS, **kwargs)


# --- OGB's formulas, written out with index_add_ and explicit BatchNorm arithmetic ---------------------------------
def batch_norm(x: Tensor, bn: torch.nn.BatchNorm1d, training: bool) -> Tensor:
    if training:  # batch statistics, biased variance
        mean, var = x.mean(0), x.var(0, unbiased=False)
    else:
        mean, var = bn.running_mean, bn.running_var
    return (x - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias


def mlp(x: Tensor, layers, training: bool) -> Tensor:
    """Linear -> BN -> ReLU -> Linear [-> BN -> ReLU], read from the model's Sequential."""
    linear1, bn1, _, linear2, *rest = layers
    x = linear2(F.relu(batch_norm(linear1(x), bn1.module, training)))
    return F.relu(batch_norm(x, rest[0].module, training)) if rest else x


def embedding_sum(features: Tensor, tables) -> Tensor:
    return sum(table.weight[features[:, k]] for k, table in enumerate(tables))


def ogb_reference(model: GIN, data: Batch, training: bool, last_norm: bool = True) -> Tensor:
    """OGB's GNN(gnn_type='gin', virtual_node, JK='last', graph_pooling='mean') with dropout 0; without
    ``last_norm``, the last layer's BatchNorm left out."""
    source, target = data.edge_index
    num_graphs = data.num_graphs
    h = embedding_sum(data.x, model.input_layer.encoder.atom_embedding_list)
    v = model.virtual_node.start.expand(num_graphs, -1) if model.virtual_node is not None else None
    for layer, block in enumerate(model.blocks):
        if v is not None:
            h = h + v[data.batch]
        bonds = embedding_sum(data.edge_attr, block.bond_encoder.bond_embedding_list)
        messages = F.relu(h[source] + bonds)
        aggregated = torch.zeros_like(h).index_add_(0, target, messages)
        out = mlp((1 + block.conv.eps) * h + aggregated, block.conv.nn, training)
        if last_norm or layer < len(model.blocks) - 1:
            out = batch_norm(out, block.norm.module.module, training)
        if layer < len(model.blocks) - 1:
            out = F.relu(out)
            if v is not None:
                pooled = torch.zeros_like(v).index_add_(0, data.batch, h) + v
                v = mlp(pooled, model.virtual_node.mlps[layer], training)
        h = out
    counts = torch.bincount(data.batch, minlength=num_graphs).to(h.dtype).unsqueeze(1)
    return model.head(torch.zeros(num_graphs, h.size(1), dtype=h.dtype).index_add_(0, data.batch, h) / counts)


def randomize_statistics(model: GIN) -> None:
    """Random BatchNorm affine parameters and running statistics, eps, and virtual-node start, so that nothing in
    the comparison is an identity."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                for tensor in (module.weight, module.bias, module.running_mean):
                    tensor.copy_(torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype))
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=generator) + 0.5)
        for block in model.blocks:
            block.conv.eps.fill_(0.3)
        if model.virtual_node is not None:
            model.virtual_node.start.normal_(generator=generator)


@pytest.mark.parametrize("virtual_node", [True, False])
@pytest.mark.parametrize("training", [False, True])
def test_forward_equals_ogb_formulas(virtual_node: bool, training: bool) -> None:
    model = ogb_gin(num_layers=3, hidden=6, dropout=0.0, virtual_node=virtual_node).double()
    randomize_statistics(model)
    model.train(training)
    data = ogb_batch()
    expected = ogb_reference(model, data, training)
    torch.testing.assert_close(call(model, data), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("training", [False, True])
def test_without_last_norm_the_last_layer_ends_at_its_convolution(training: bool) -> None:
    model = ogb_gin(num_layers=3, hidden=6, dropout=0.0, virtual_node=True, last_norm=False).double()
    randomize_statistics(model)
    model.train(training)
    data = ogb_batch()
    expected = ogb_reference(model, data, training, last_norm=False)
    torch.testing.assert_close(call(model, data), expected, rtol=1e-10, atol=1e-10)
    assert [type(block.norm).__name__ for block in model.blocks] == ["BatchNorm", "BatchNorm", "Identity"]


@pytest.mark.parametrize("norm", ["pairnorm", "meansubtraction", "instancenorm"])
def test_a_centering_last_norm_zeroes_the_mean_readout_unless_left_out(norm: str) -> None:
    """Why ``last_norm=False`` exists: a norm that centers each graph after the last layer (no ReLU follows it)
    leaves the mean readout zero, so every graph gets the head's bias."""
    torch.manual_seed(0)
    data = ogb_batch()
    with pytest.warns(ConstantReadoutWarning, match=f"ends in {norm}, which centers each graph"):
        with_last = ogb_gin(norm=norm, virtual_node=True).eval()
    outputs = call(with_last, data)
    torch.testing.assert_close(outputs, with_last.head.bias.expand_as(outputs), rtol=0, atol=1e-5)
    without_last = ogb_gin(norm=norm, virtual_node=True, last_norm=False).eval()
    outputs = call(without_last, data)
    assert (outputs - without_last.head.bias).abs().min() > 1e-4
    assert (outputs[0] - outputs[1]).abs().max() > 1e-4


@pytest.mark.parametrize(
    ("norm", "norm_kwargs", "options", "warns"),
    [
        ("pairnorm", {}, {"readout": "sum"}, True),
        ("pairnorm", {"mode": "PN-SI"}, {"readout": "mean"}, False),  # rows scaled after centering
        ("instancenorm", {"affine": True}, {"readout": "mean"}, True),  # the mean is the learned shift
        ("pairnorm", {}, {"readout": "mean", "last_norm": False}, False),
        ("pairnorm", {}, {"readout": "mean", "residual": True}, False),
        ("pairnorm", {}, {"readout": None}, False),  # node level: no readout
        ("batchnorm", {}, {"readout": "mean"}, False),  # OGB's: statistics across the batch
        ("graphnorm", {}, {"readout": "mean"}, False),  # its learned alpha keeps part of the mean
    ],
)
def test_a_readout_that_sees_nothing_of_the_graph_is_warned_about(norm, norm_kwargs, options, warns) -> None:
    if not warns:  # the suite turns warnings into errors: building is enough
        GIN(4, 8, 1, 2, norm=norm, norm_kwargs=norm_kwargs, **options)
        return
    with pytest.warns(ConstantReadoutWarning, match="pass last_norm=False .* or residual=True"):
        GIN(4, 8, 1, 2, norm=norm, norm_kwargs=norm_kwargs, **options)


def test_zinc_bond_types_and_float_features_use_the_right_convolutions() -> None:
    """ZINC: an nn.Embedding of the bond types in each message; float features (no encoder): PyG's GINConv."""
    zinc = GIN(28, 8, 1, 2, readout="sum", atom_encoder="zinc", bond_feature_dims=[4], virtual_node=True).eval()
    data = ogb_batch()
    data.x, data.edge_attr = data.x[:, :1] % 28, data.edge_attr[:, 0] % 4
    assert type(zinc.blocks[0].conv).__name__ == "GINEConv" and zinc.blocks[0].bond_encoder.num_embeddings == 4
    out = call(zinc, data)
    data.edge_attr = (data.edge_attr + 1) % 4  # other bond types change the prediction
    assert not torch.allclose(out, call(zinc, data))
    plain = GIN(5, 8, 3, 2)
    assert type(plain.blocks[0].conv).__name__ == "GINConv" and plain.blocks[0].conv.nn[0].in_features == 5
    assert plain(torch.randn(4, 5), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape == (4, 3)


def test_graph_outputs_independent_of_batch_mates_in_eval() -> None:
    model = ogb_gin(num_layers=4, virtual_node=True).double()
    randomize_statistics(model)
    model.eval()
    graphs = [ogb_molecule(n, seed) for seed, n in enumerate((6, 2, 9))]
    together = call(model, Batch.from_data_list(graphs))
    for index, graph in enumerate(graphs):
        alone = call(model, Batch.from_data_list([graph]))
        torch.testing.assert_close(together[index : index + 1], alone, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm", [name for name in available_norms() if name != "sepnorm"])
def test_every_norm_runs_by_name(norm: str) -> None:
    with warnings.catch_warnings():  # a norm that centers each graph runs too (its readout is warned about above)
        warnings.simplefilter("ignore", ConstantReadoutWarning)
        model = ogb_gin(norm=norm, virtual_node=True)
    out = call(model, ogb_batch())
    out.sum().backward()
    assert out.shape == (3, 2) and torch.isfinite(out).all()
    assert all(type(block.norm) is norm_class(norm) for block in model.blocks)
    assert torch.isfinite(call(model.eval(), ogb_batch())).all()


def test_gradients_reach_every_parameter() -> None:
    model = ogb_gin(num_layers=3, dropout=0.0, virtual_node=True, residual=True)
    randomize_statistics(model)
    call(model, ogb_batch()).pow(2).sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    assert missing == []


def test_virtual_node_changes_the_output() -> None:
    """From its zero start, the virtual node becomes MLP_v(sum of the graph's rows) after layer 1 and so changes
    layers 2 and 3; the same weights without it give another output."""
    model = ogb_gin(num_layers=3, virtual_node=True).eval()
    assert torch.equal(model.virtual_node.start, torch.zeros(1, 8))
    without = copy.deepcopy(model)
    without.virtual_node = None
    data = ogb_batch()
    difference = (call(model, data) - call(without, data)).abs().max()
    assert difference > 1e-3
    one_layer = ogb_gin(num_layers=1, virtual_node=True).eval()  # no update: a zero start adds nothing
    bare = copy.deepcopy(one_layer)
    bare.virtual_node = None
    torch.testing.assert_close(call(one_layer, data), call(bare, data))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: GIN(9, 0, 2, 3), "hidden_channels must be a positive integer, got 0"),
        (lambda: GIN(9, 8, 2, 0), "num_layers (number of convs) must be >= 1, got 0"),
        (lambda: GIN(9, 8, 2, 2, dropout=1.0), "dropout must be in [0, 1), got 1.0"),
        (lambda: GIN(9, 8, 2, 2, readout="virtual"), "readout must be one of None, 'mean', 'sum'; got 'virtual'"),
        (lambda: GIN(9, 8, 2, 2, virtual_node=True), "virtual_node=True is for graph-level models: also set readout"),
        (lambda: GIN(5, 8, 2, 2, atom_encoder="ogb"), "atom_encoder='ogb' expects the 9 OGB atom columns"),
        (lambda: GIN(9, 8, 2, 2, norm="nosuchnorm"), "nosuchnorm"),
    ],
)
def test_constructor_errors_are_one_line(build, message: str) -> None:
    with pytest.raises(ValueError) as error:
        build()
    assert message in str(error.value) and "\n" not in str(error.value)


def test_input_errors_are_one_line() -> None:
    model, data = ogb_gin(), ogb_batch()
    for edge_attr, message in [(None, "pass edge_attr"), (data.edge_attr[:-1], "one row per edge")]:
        with pytest.raises(ValueError, match=message) as error:
            model(data.x, data.edge_index, data.batch, edge_attr=edge_attr)
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="needs integer features"):
        model(data.x.float(), data.edge_index, data.batch, edge_attr=data.edge_attr)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (dict(model_kwargs={"jk": "sum"}), "unknown model_kwargs ['jk'] for gin; valid: bond_encoder"),
        (dict(readout="virtual", virtual_node=True), "model='gin' reads out with readout=mean or sum"),
        (dict(norm="sepnorm", virtual_node=True), "model='gin' has none (its virtual node is OGB's"),
        (dict(adjacency="row"), "adjacency='row' is not an option of model 'gin'"),
        (dict(hidden_channels=0), "hidden_channels must be >= 1"),
    ],
)
def test_config_errors_are_one_line(values: dict, message: str) -> None:
    with pytest.raises(ValueError) as error:
        RunConfig.from_dict(dict(dataset="zinc", model="gin", **values))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_probe_reports_every_layer() -> None:
    model = ogb_gin(num_layers=4, virtual_node=True)
    table = CollapseProbe(model, forward=call).probe(ogb_batch())
    assert list(dict.fromkeys(table["layer_name"])) == ["input", "layer1", "layer2", "layer3", "layer4"]
    assert set(table["rows"]) == {"node"}


def zinc_config(data_root: Path, **values) -> RunConfig:
    return RunConfig.from_dict(
        dict(
            dataset="zinc",
            data_root=str(data_root),
            model="gin",
            limit_graphs=500,
            num_layers=3,
            hidden_channels=32,
            norm="batchnorm",
            dropout=0.0,
            readout="sum",
            virtual_node=True,
            lr=3e-3,
            weight_decay=0.0,
            batch_size=64,
            epochs=20,
            probe=True,
            **values,
        )
    )


def mean_predictor_test_mae(data_root: Path, limit_graphs: int) -> float:
    from graphnorm.train.loaders import prepare_task

    task = prepare_task(RunConfig(dataset="zinc", data_root=str(data_root), limit_graphs=limit_graphs))
    train_y = torch.cat([graph.y for graph in DataLoader(task.train, batch_size=len(task.train))])
    test_y = torch.cat([graph.y for graph in DataLoader(task.test, batch_size=len(task.test))])
    return float((test_y - train_y.mean()).abs().mean())


@pytest.mark.parametrize("bond_encoder", [False, True])
def test_zinc_training_through_graphnorm_train_beats_the_mean(data_root: Path, bond_encoder: bool) -> None:
    """500 ZINC graphs per split, 20 epochs: test MAE well below the mean predictor's (for seed 0 about half of
    it)."""
    record = run(zinc_config(data_root, model_kwargs={"bond_encoder": bond_encoder}))
    baseline = mean_predictor_test_mae(data_root, 500)
    assert record["test_mae"] < 0.6 * baseline, (record["test_mae"], baseline)
    assert {row["layer_name"] for row in record["layers"]} == {"input", "layer1", "layer2", "layer3"}


def test_cora_node_level_run_learns(data_root: Path) -> None:
    """GINConv at node level (no edge features): a 2-layer GIN on Cora, 25 epochs, well above the majority class
    (seed 0: about 0.67 against 0.32)."""
    config = RunConfig.from_dict(
        dict(
            dataset="cora",
            data_root=str(data_root),
            model="gin",
            num_layers=2,
            hidden_channels=32,
            norm="none",
            dropout=0.6,
            lr=0.01,
            epochs=25,
            probe=True,
        )
    )
    record = run(config)
    assert record["test_acc"] > 0.6 > record["majority_acc"] + 0.25, (record["test_acc"], record["majority_acc"])
    assert {row["layer_name"] for row in record["layers"]} == {"layer1", "layer2"}


def test_build_model_takes_the_molhiv_task(data_root: Path) -> None:
    """From the task: the 9 OGB atom columns, the AtomEncoder and one BondEncoder per layer; a real molhiv batch."""
    task = load_dataset("molhiv", root=str(data_root))
    model = build_model("gin", task, hidden_channels=16, num_layers=2, readout="mean", virtual_node=True).eval()
    assert type(model.input_layer.encoder).__name__ == "AtomEncoder"
    assert all(type(block.bond_encoder).__name__ == "BondEncoder" for block in model.blocks)
    batch = next(iter(DataLoader(task.val, batch_size=16)))
    assert call(model, batch).shape == (16, 1)


def test_norm_all_sweep_leaves_out_sepnorm_for_the_gin_virtual_node() -> None:
    """OGB's virtual node is a vector added to the node rows, not a row: a GIN run with virtual_node=true hands its
    norms no graph-token rows, so a `norm: all` sweep leaves sepnorm out (and keeps every other norm) instead of
    failing; the default GCN's virtual node is a row, so there sepnorm stays."""
    from graphnorm.models import model_spec
    from graphnorm.sweep import expand_grid

    base = {"dataset": "zinc", "model": "gin", "virtual_node": True, "epochs": 1}
    gin_config = RunConfig(**base)
    assert not model_spec("gin").has_token_rows(gin_config)
    assert model_spec("gcn").has_token_rows(RunConfig(**{**base, "model": "gcn"}))
    runs = expand_grid({"name": "t", "base": base, "grid": {"norm": "all"}}, log=None)
    norms = {run.norm for run in runs}
    assert "sepnorm" not in norms and {"batchnorm", "layernorm", "contranorm", "pairnorm"} <= norms
