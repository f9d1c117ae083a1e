"""DeepGCN: shapes, every norm inside it, adjacency against a dense reference, virtual nodes, probe contract."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from graphnorm.analysis import CollapseProbe
from graphnorm.models import DeepGCN, GCNBlock
from graphnorm.models.inputs import dropout_nonzeros
from graphnorm.norms import available_norms

# Many tiny tensor ops: on a shared 2-core machine one intra-op thread is faster (see conftest).
pytestmark = pytest.mark.usefixtures("one_thread")


def random_graph(num_nodes: int, channels: int = 5, p: float = 0.4, seed: int = 0) -> Data:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, channels, generator=generator)
    torch.manual_seed(seed)
    edge_index = erdos_renyi_graph(num_nodes, p)
    return Data(x=x, edge_index=edge_index)


def molecule_batch(sizes: tuple[int, ...] = (4, 6, 3)) -> Batch:
    graphs = []
    for seed, n in enumerate(sizes):
        graph = random_graph(n, seed=seed)
        graph.x = torch.randint(0, 28, (n, 1), generator=torch.Generator().manual_seed(seed))
        graphs.append(graph)
    return Batch.from_data_list(graphs)


@pytest.mark.parametrize("num_layers", [1, 2, 64])
def test_node_level_shapes_and_depth(num_layers: int) -> None:
    graph = random_graph(12)
    model = DeepGCN(5, 16, 3, num_layers, norm="pairnorm" if "pairnorm" in available_norms() else "none")
    out = model(graph.x, graph.edge_index)
    assert out.shape == (12, 3)
    assert torch.isfinite(out).all()
    assert len(model.blocks) == num_layers  # num_layers counts convs
    assert [name for name, _ in model.collapse_layers()] == [f"layer{i}" for i in range(1, num_layers + 1)]


@pytest.mark.parametrize("num_layers", [1, 2, 64])
def test_graph_level_shapes_and_depth(num_layers: int) -> None:
    batch = molecule_batch()
    model = DeepGCN(28, 16, 1, num_layers, readout="mean", virtual_node=True, atom_encoder="zinc")
    out = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    assert out.shape == (3, 1)
    assert torch.isfinite(out).all()
    assert len(model.blocks) == num_layers


@pytest.mark.parametrize("norm", available_norms())
def test_every_norm_runs_node_level(norm: str) -> None:
    graph = random_graph(15)
    model = DeepGCN(5, 8, 3, 4, norm=norm, dropout=0.1)
    if norm == "sepnorm":
        # SepNorm separates graph-token rows; a node-level GCN has none, and says so.
        with pytest.raises(ValueError, match="token_mask"):
            model(graph.x, graph.edge_index)
        return
    out = model(graph.x, graph.edge_index)
    out.sum().backward()
    assert out.shape == (15, 3) and torch.isfinite(out).all()
    model.eval()
    assert torch.isfinite(model(graph.x, graph.edge_index)).all()


class RecordingNorm(nn.Module):
    """A real identity norm that remembers what DeepGCN hands it (the calls go to a list shared by the copies)."""

    def __init__(self, calls: list[dict]) -> None:
        super().__init__()
        self.calls = calls

    def __deepcopy__(self, memo: dict) -> RecordingNorm:
        return RecordingNorm(self.calls)  # every per-layer copy records into the same list

    def forward(self, x: Tensor, batch=None, batch_size=None, edge_index=None, token_mask=None) -> Tensor:
        self.calls.append({"rows": x.size(0), "batch": batch, "batch_size": batch_size, "edge_index": edge_index,
                           "token_mask": token_mask})  # fmt: skip
        return x


def test_norms_receive_one_virtual_token_per_graph() -> None:
    batch = molecule_batch((4, 6, 3))
    calls: list[dict] = []
    model = DeepGCN(28, 8, 1, 3, norm=RecordingNorm(calls), readout="mean", virtual_node=True, atom_encoder="zinc")
    model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    assert len(calls) == 3  # one call per hidden block
    for call in calls:
        assert call["rows"] == 13 + 3 and call["batch_size"] == 3
        mask = call["token_mask"]
        assert mask.dtype == torch.bool and int(mask.sum()) == 3
        # one token per graph, placed first among its graph's rows; batch stays sorted
        assert call["batch"][mask].tolist() == [0, 1, 2]
        assert mask.nonzero().view(-1).tolist() == [0, 5, 12]
        assert call["batch"].tolist() == [0] * 5 + [1] * 7 + [2] * 4
        edges = call["edge_index"]
        assert not (edges[0] == edges[1]).any()  # no self loops for the norms
        token_degree = torch.bincount(edges[0], minlength=16)[mask]
        assert token_degree.tolist() == [4, 6, 3]  # the token is linked to every node of its graph
    # the probe measures the rows with what a registered norm receives in the same model
    probed = DeepGCN(28, 8, 1, 3, norm="none", readout="mean", virtual_node=True, atom_encoder="zinc")
    probe = CollapseProbe(probed)
    probe.capture(batch)
    context = probe.last_contexts[0]
    assert torch.equal(context["token_mask"], calls[0]["token_mask"])
    assert torch.equal(context["edge_index"], calls[0]["edge_index"])
    assert torch.equal(context["batch"], calls[0]["batch"])


@pytest.mark.parametrize("norm", available_norms())
def test_every_norm_runs_graph_level_with_virtual_node(norm: str) -> None:
    batch = molecule_batch()
    model = DeepGCN(28, 8, 1, 3, norm=norm, dropout=0.1, readout="mean", virtual_node=True, atom_encoder="zinc")
    out = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    out.sum().backward()
    assert out.shape == (3, 1) and torch.isfinite(out).all()


def dense_adjacency(edge_index: Tensor, num_nodes: int, kind: str) -> Tensor:
    a_hat = torch.eye(num_nodes)
    a_hat[edge_index[1], edge_index[0]] = 1.0  # row i gathers from its neighbours j
    degree = a_hat.sum(dim=1)
    if kind == "sym":
        d = degree.pow(-0.5)
        return d[:, None] * a_hat * d[None, :]
    return a_hat / degree[:, None]


@pytest.mark.parametrize("adjacency", ["sym", "row"])
def test_adjacency_matches_dense_reference(adjacency: str) -> None:
    # a small star + path with different degrees, so sym and row normalization differ
    edge_index = to_undirected(torch.tensor([[0, 0, 0, 3], [1, 2, 3, 4]]))
    x = torch.randn(5, 4)
    model = DeepGCN(4, 8, 3, 1, dropout=0.0, adjacency=adjacency).eval()
    conv = model.blocks[0].conv
    expected = dense_adjacency(edge_index, 5, adjacency) @ (x @ conv.lin.weight.T) + conv.bias
    torch.testing.assert_close(model(x, edge_index), expected)
    other = "row" if adjacency == "sym" else "sym"
    unexpected = dense_adjacency(edge_index, 5, other) @ (x @ conv.lin.weight.T) + conv.bias
    assert not torch.allclose(model(x, edge_index), unexpected, atol=1e-4)


@pytest.mark.parametrize("norm", available_norms())
def test_graph_outputs_independent_of_batch_mates_in_eval(norm: str) -> None:
    """Per-graph norms (and batch statistics frozen in eval mode) make a graph's output independent of its batch."""
    graphs = [molecule_batch((5,)).get_example(0), molecule_batch((7,)).get_example(0)]
    model = DeepGCN(28, 8, 2, 3, norm=norm, readout="sum", virtual_node=True, atom_encoder="zinc").eval()
    together = Batch.from_data_list(graphs)
    out_together = model(together.x, together.edge_index, together.batch, 2)
    for index, graph in enumerate(graphs):
        alone = Batch.from_data_list([graph])
        out_alone = model(alone.x, alone.edge_index, alone.batch, 1)
        torch.testing.assert_close(out_together[index : index + 1], out_alone, atol=1e-5, rtol=1e-5)


def test_ogb_atom_encoder_and_readouts() -> None:
    batch = molecule_batch((4, 5))
    batch.x = torch.randint(0, 2, (batch.num_nodes, 9))
    for readout in ("mean", "sum", "virtual"):
        model = DeepGCN(9, 8, 1, 2, readout=readout, virtual_node=readout == "virtual", atom_encoder="ogb")
        assert model(batch.x, batch.edge_index, batch.batch, 2).shape == (2, 1)


def test_mean_readout_pools_node_rows_only() -> None:
    batch = molecule_batch((4, 6))
    model = DeepGCN(28, 8, 1, 2, readout="mean", virtual_node=True, atom_encoder="zinc").eval()
    captured = {}
    model.blocks[-1].register_forward_hook(lambda module, args, output: captured.update(h=output))
    out = model(batch.x, batch.edge_index, batch.batch, 2)
    probe = CollapseProbe(model)
    probe.capture(batch)
    token_mask = probe.last_contexts[-1]["token_mask"]
    node_rows = captured["h"][~token_mask]
    pooled = torch.stack([node_rows[:4].mean(0), node_rows[4:].mean(0)])
    torch.testing.assert_close(out, model.head(pooled))


def test_probe_contract_rows_agree() -> None:
    batch = molecule_batch()
    model = DeepGCN(28, 8, 1, 4, norm="none", readout="mean", virtual_node=True, atom_encoder="zinc").eval()
    layers = model.collapse_layers()
    assert [name for name, _ in layers] == ["input", "layer1", "layer2", "layer3", "layer4"]
    outputs = {}
    hooks = [module.register_forward_hook(lambda m, a, o, n=name: outputs.update({n: o})) for name, module in layers]
    model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    for hook in hooks:
        hook.remove()
    probe = CollapseProbe(model)
    probe.capture(batch)
    assert [name for name, _ in probe.layers] == [name for name, _ in layers]
    context = probe.last_contexts[0]
    assert all(_same_rows(other, context) for other in probe.last_contexts)
    rows = context["batch"].numel()
    assert rows == batch.num_nodes + batch.num_graphs
    assert all(output.shape == (rows, 8) for output in outputs.values())
    node_probe = CollapseProbe(DeepGCN(5, 8, 3, 2))
    node_probe.capture(random_graph(6))
    node_context = node_probe.last_contexts[0]
    assert node_context["token_mask"] is None and node_context["batch"] is None


def _same_rows(first: dict, second: dict) -> bool:
    return all(
        (first[key] is None and second[key] is None) or torch.equal(first[key], second[key])
        for key in ("batch", "token_mask", "edge_index")
    )


def test_norm_module_is_copied_per_layer_and_layernorm_is_shared() -> None:
    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.LayerNorm(8)

        def forward(self, x, **kwargs):
            return self.inner(x)

    model = DeepGCN(5, 8, 3, 4, norm=Wrapped(), shared_layernorm=True)
    hidden: list[GCNBlock] = list(model.blocks[:-1])
    assert len({id(block.norm) for block in hidden}) == 3
    assert all(block.shared_layernorm is model.shared_layernorm for block in hidden)
    assert model.blocks[-1].norm is None  # no norm after the classifier conv
    graph = random_graph(6)
    assert model(graph.x, graph.edge_index).shape == (6, 3)


def test_bad_inputs_raise_clear_errors() -> None:
    graph = random_graph(6)
    with pytest.raises(ValueError, match="adjacency"):
        DeepGCN(5, 8, 3, 2, adjacency="dense")
    with pytest.raises(ValueError, match="num_layers"):
        DeepGCN(5, 8, 3, 0)
    with pytest.raises(ValueError, match="virtual_node"):
        DeepGCN(5, 8, 3, 2, virtual_node=True)
    with pytest.raises(ValueError, match="unknown norm"):
        DeepGCN(5, 8, 3, 2, norm="nonorm")
    with pytest.raises(ValueError, match=r"x must be float \[num_nodes, 5\]"):
        DeepGCN(5, 8, 3, 2)(graph.x[:, :4], graph.edge_index)
    with pytest.raises(ValueError, match="outside"):
        DeepGCN(5, 8, 3, 2)(graph.x, graph.edge_index + 10)
    with pytest.raises(ValueError, match="init must be one of"):
        DeepGCN(5, 8, 3, 2, init="xavier")
    with pytest.raises(ValueError, match="integer atom types"):
        DeepGCN(28, 8, 1, 2, readout="mean", atom_encoder="zinc")(graph.x, graph.edge_index)


def test_kipf_init_bounds_and_glorot_default() -> None:
    torch.manual_seed(0)
    kipf = DeepGCN(300, 64, 7, 3, init="kipf")
    for block in kipf.blocks:
        bound = 1.0 / block.conv.out_channels**0.5
        for tensor in (block.conv.lin.weight.detach(), block.conv.bias.detach()):
            assert float(tensor.abs().max()) <= bound
            assert float(tensor.abs().max()) > 0.5 * bound  # spans the interval (the bias too: not zero)
    glorot = DeepGCN(300, 64, 7, 3)
    first = glorot.blocks[0].conv.requires_grad_(False)
    assert float(first.lin.weight.abs().max()) <= (6.0 / (300 + 64)) ** 0.5
    assert float(first.bias.abs().max()) == 0.0


def test_dropout_nonzeros_has_the_dropout_distribution() -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(400, 300, generator=generator) * (torch.rand(400, 300, generator=generator) < 0.05)
    x.requires_grad_(True)
    torch.manual_seed(1)
    out = dropout_nonzeros(x, 0.6, training=True)
    nonzero = x != 0
    assert bool((out[~nonzero] == 0).all())
    kept = out[nonzero] != 0
    assert abs(float(kept.float().mean()) - 0.4) < 0.02  # ~6000 draws: 4 standard deviations is 0.025
    torch.testing.assert_close(out[nonzero][kept], x[nonzero][kept] / 0.4)
    out.sum().backward()
    torch.testing.assert_close(x.grad, (out != 0).float() / 0.4)
    assert dropout_nonzeros(x, 0.6, training=False) is x
    assert dropout_nonzeros(x, 0.0, training=True) is x


def test_only_the_raw_feature_block_uses_sparse_dropout() -> None:
    model = DeepGCN(5, 8, 3, 4, layer_order="dropout-conv-norm-act")
    assert [block.input_dropout is dropout_nonzeros for block in model.blocks] == [True, False, False, False]
    encoded = DeepGCN(28, 8, 1, 3, readout="mean", atom_encoder="zinc")
    assert not any(block.input_dropout is dropout_nonzeros for block in encoded.blocks)


def test_sparse_features_give_the_dense_results_and_draws() -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(60, 40, generator=generator) * (torch.rand(60, 40, generator=generator) < 0.1)
    edge_index = to_undirected(erdos_renyi_graph(60, 0.1))
    model = DeepGCN(40, 8, 3, 3, layer_order="dropout-conv-norm-act", norm="layernorm")
    outputs, grads = [], []
    for features in (x, x.to_sparse()):
        torch.manual_seed(5)  # same dropout draws: the sparse values come in nonzero() order
        out = model(features, edge_index)
        grads.append(torch.autograd.grad(out.square().sum(), model.blocks[0].conv.lin.weight)[0])
        outputs.append(out)
    torch.testing.assert_close(outputs[1], outputs[0])
    torch.testing.assert_close(grads[1], grads[0])
    with pytest.raises(ValueError, match="sparse x is for raw float features"):
        DeepGCN(40, 8, 1, 2, readout="mean", virtual_node=True)(x.to_sparse(), edge_index)
