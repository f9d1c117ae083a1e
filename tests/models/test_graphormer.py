"""Graphormer: shapes, padding and batch-composition invariance for every norm, the attention bias, probes, training."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from graphnorm.analysis import CollapseProbe
from graphnorm.data.graphormer_preprocess import GraphormerPreprocess, collate_graphormer, preprocess_dataset
from graphnorm.models.gcn import DeepGCN
from graphnorm.models.graphormer import Graphormer, graphormer_slim
from graphnorm.norms import available_norms, build_norm
from graphnorm.train.schedules import polynomial_optimizer

HOPS = 3
TRANSFORM = GraphormerPreprocess(multi_hop_max_dist=HOPS)


# Many tiny tensor ops: on a shared 2-core machine one intra-op thread is faster (see conftest).
pytestmark = pytest.mark.usefixtures("one_thread")


def molecule_like(num_nodes: int, seed: int, edge_prob: float = 0.3) -> Data:
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    edge_index = to_undirected(erdos_renyi_graph(num_nodes, edge_prob), num_nodes=num_nodes)
    return TRANSFORM(
        Data(
            x=torch.randint(0, 6, (num_nodes, 2), generator=generator),
            edge_index=edge_index,
            edge_attr=torch.randint(0, 4, (edge_index.size(1), 1), generator=generator),
            y=torch.randn(1, generator=generator),
            num_nodes=num_nodes,
        )
    )


def small_model(norm: str = "layernorm", norm_kwargs: dict | None = None, **overrides) -> Graphormer:
    arguments = dict(
        num_layers=2,
        hidden_channels=16,
        num_heads=4,
        ffn_channels=24,
        out_channels=3,
        atom_feature_dims=[6, 6],
        bond_feature_dims=[4],
        max_degree=8,
        max_distance=6,
        multi_hop_max_dist=HOPS,
        norm=norm,
        norm_kwargs=norm_kwargs,
    )
    arguments.update(overrides)
    return Graphormer(**arguments)


def norm_kwargs_for(name: str) -> dict:
    # ContraNorm in its transformer form: contrast against all rows of the graph, not only non-neighbours.
    return {"exclude_neighbors": False} if name == "contranorm" else {}


def test_shapes_and_probe_contract() -> None:
    graphs = [molecule_like(n, seed) for seed, n in enumerate([4, 9, 1, 6])]
    batch = collate_graphormer(graphs)
    model = small_model()
    seen: dict[str, torch.Tensor] = {}
    layers = model.collapse_layers()
    assert [name for name, _ in layers] == ["embedding", "layer_1", "layer_2"]
    for name, module in layers:
        module.register_forward_hook(lambda _m, _i, out, name=name: seen.__setitem__(name, out))
    out = model(batch)
    assert out.shape == (4, 3) and torch.isfinite(out).all()
    rows = 4 + sum([4, 9, 1, 6])
    assert all(value.shape == (rows, 16) for value in seen.values()) and len(seen) == 3
    probe = CollapseProbe(model)
    probe.capture(batch)
    assert len(probe.last_contexts) == 3
    context = probe.last_contexts[0]
    assert set(context) == {"batch", "token_mask", "edge_index"}
    assert context["batch"].shape == (rows,) and int(context["token_mask"].sum()) == 4
    assert int(context["edge_index"].max()) < rows and not context["token_mask"][context["edge_index"]].any()
    assert torch.equal(context["batch"][context["token_mask"]], torch.arange(4))  # one token per graph, in order
    # the rows every norm of the encoder receives: the batch's row layout
    for layer_context in probe.last_contexts:
        assert torch.equal(layer_context["batch"], batch.row_batch)
        assert torch.equal(layer_context["token_mask"], batch.token_mask)
        assert torch.equal(layer_context["edge_index"], batch.row_edge_index)


@pytest.mark.parametrize("norm", available_norms())
def test_padding_and_batch_composition_invariance(norm: str) -> None:
    """Eval mode: a graph's output is the same alone, padded among bigger graphs, and in any batch order."""
    small = molecule_like(3, 0)
    others = [molecule_like(n, seed) for seed, n in enumerate([11, 7, 14], start=1)]
    model = small_model(norm, norm_kwargs_for(norm)).eval()
    with torch.no_grad():
        alone = model(collate_graphormer([small]))
        mixed = model(collate_graphormer([others[0], small, others[1], others[2]]))
        reordered = model(collate_graphormer([others[2], others[1], small, others[0]]))
        others_alone = model(collate_graphormer([others[1]]))
    torch.testing.assert_close(mixed[1:2], alone, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(reordered[2:3], alone, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(reordered[[3, 1, 0]], mixed[[0, 2, 3]], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[2:3], others_alone, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("norm", available_norms())
def test_every_norm_trains_one_step_on_degenerate_graphs(norm: str) -> None:
    """Single-atom and edgeless graphs (token + 1 node) go forward and backward in train mode with every norm."""
    atom = TRANSFORM(Data(x=torch.tensor([[2, 3]]), edge_index=torch.empty(2, 0, dtype=torch.long), y=torch.randn(1)))
    edgeless = TRANSFORM(Data(x=torch.zeros(3, 2, dtype=torch.long), edge_index=torch.empty(2, 0, dtype=torch.long)))
    edgeless.y = torch.randn(1)
    model = small_model(norm, norm_kwargs_for(norm)).train()
    for graphs in ([atom], [atom, edgeless], [atom, edgeless, molecule_like(5, 3)]):
        out = model(collate_graphormer(graphs))
        assert out.shape == (len(graphs), 3) and torch.isfinite(out).all()
        out.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_attention_bias_matches_a_hand_computation() -> None:
    # path graph 0 - 1 - 2 (edge ids: 0->1 is 0, 1->0 is 1, 1->2 is 2, 2->1 is 3), padded next to a 4-node graph
    path = TRANSFORM(
        Data(
            x=torch.zeros(3, 2, dtype=torch.long),
            edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
            edge_attr=torch.tensor([[1], [1], [3], [3]]),
            y=torch.zeros(1),
        )
    )
    batch = collate_graphormer([path, molecule_like(4, 5)])
    model = small_model()
    bias_module = model.attention_bias
    bias = bias_module(batch)  # [B, heads, T, T]
    assert bias.shape == (2, 4, 5, 5)
    virtual = bias_module.virtual_distance
    torch.testing.assert_close(bias[0, :, 0, :4], virtual[:, None].expand(4, 4))  # token row, real keys
    torch.testing.assert_close(bias[0, :, 1:4, 0], virtual[:, None].expand(4, 3))  # token column
    assert torch.isinf(bias[0, :, :, 4]).all() and (bias[0, :, :, 4] < 0).all()  # padded key
    assert torch.isfinite(bias[1]).all()
    spatial = bias_module.spatial_embedding.weight  # [max_distance + 2, heads]
    edge_table = bias_module.edge_embedding.embedding.weight  # [4, heads] (one bond column)
    hop_weight = bias_module.hop_weight  # [hops, heads, heads]
    # node 0 -> node 2: distance 2, edges (bond 1) then (bond 3); bias = spatial[2] + mean_k(edge_k @ W_k)
    expected_02 = spatial[2] + (edge_table[1] @ hop_weight[0] + edge_table[3] @ hop_weight[1]) / 2
    torch.testing.assert_close(bias[0, :, 1, 3], expected_02)
    expected_21 = spatial[1] + edge_table[3] @ hop_weight[0]  # node 2 -> node 1: one edge
    torch.testing.assert_close(bias[0, :, 3, 2], expected_21)
    torch.testing.assert_close(bias[0, :, 2, 2], spatial[0])  # self: distance 0, no edges


def test_virtual_distance_and_spatial_bias_change_the_output_and_get_gradients() -> None:
    batch = collate_graphormer([molecule_like(n, seed) for seed, n in enumerate([5, 8])])
    model = small_model(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0).eval()
    out = model(batch)
    out.square().sum().backward()
    attention_bias = model.attention_bias
    for name, parameter in [
        ("virtual_distance", attention_bias.virtual_distance),
        ("spatial_embedding", attention_bias.spatial_embedding.weight),
        ("hop_weight", attention_bias.hop_weight),
        ("edge_embedding", attention_bias.edge_embedding.embedding.weight),
        ("in_degree_embedding", model.in_degree_embedding.weight),
    ]:
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    with torch.no_grad():
        attention_bias.virtual_distance.add_(torch.tensor([3.0, -3.0, 1.0, 0.5]))
        after_virtual = model(batch)
        attention_bias.spatial_embedding.weight[1].add_(2.0)  # distance-1 pairs
        after_spatial = model(batch)
    assert not torch.allclose(after_virtual, out, atol=1e-5)
    assert not torch.allclose(after_spatial, after_virtual, atol=1e-5)


def test_post_ln_and_sepnorm_with_a_batch_of_one_graph() -> None:
    graph = molecule_like(6, 2)
    post_ln = small_model(pre_ln=False)
    assert torch.isfinite(post_ln(collate_graphormer([graph]))).all()
    model = small_model("sepnorm")
    for mode in (True, False):
        model.train(mode)
        out = model(collate_graphormer([graph]))
        assert out.shape == (1, 3) and torch.isfinite(out).all()
    out.sum().backward()


def test_bad_arguments_and_inputs_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="divisible"):
        small_model(hidden_channels=18)
    with pytest.raises(ValueError, match="max_distance"):
        small_model(max_distance=0)
    with pytest.raises(ValueError, match="unknown norm"):
        small_model("no_such_norm")
    with pytest.raises(ValueError, match="dropout"):
        small_model(dropout=1.0)
    model = small_model()
    bad_atom = molecule_like(4, 0)
    bad_atom.x[1, 1] = 6  # column 1 has 6 values: 0..5
    with pytest.raises(ValueError, match="column 1 holds value 6"):
        model(collate_graphormer([bad_atom]))
    one_column = molecule_like(4, 0)
    one_column.x = one_column.x[:, :1]
    with pytest.raises(ValueError, match=r"shape \[rows, 2\]"):
        model(collate_graphormer([one_column]))
    no_bonds = molecule_like(4, 0)
    no_bonds.edge_attr = None
    with pytest.raises(ValueError, match="without edge_attr"):
        model(collate_graphormer([no_bonds]))
    with pytest.raises(TypeError, match="GraphormerBatch"):
        model(molecule_like(4, 0))


def test_optimizer_recipe_warmup_and_polynomial_decay() -> None:
    model = small_model()
    optimizer, scheduler = polynomial_optimizer(
        model, lr=1e-3, weight_decay=0.01, warmup_steps=4, total_steps=12, end_lr=1e-5
    )
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.param_groups[0]["weight_decay"] == 0.01
    rates = []
    for _ in range(14):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[:4] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert rates[8] == pytest.approx(1e-5 + (1e-3 - 1e-5) * 0.5)  # halfway through the decay
    assert rates[12] == pytest.approx(1e-5) and rates[13] == pytest.approx(1e-5)
    with pytest.raises(ValueError, match="warmup_steps"):
        polynomial_optimizer(model, warmup_steps=10, total_steps=10)


def test_attention_bias_lr_scale_groups_the_bias_tables() -> None:
    model = small_model()
    bias_parameters = {id(p) for p in model.attention_bias.parameters()}
    optimizer, scheduler = polynomial_optimizer(
        model, lr=1e-3, weight_decay=0.01, warmup_steps=2, total_steps=10, end_lr=0.0, attention_bias_lr_scale=10.0
    )
    rest, tables = optimizer.param_groups
    assert {id(p) for p in tables["params"]} == bias_parameters and len(bias_parameters) == 4
    assert not bias_parameters & {id(p) for p in rest["params"]}
    assert len(rest["params"]) + len(tables["params"]) == len(list(model.parameters()))
    for _ in range(6):  # the one schedule drives both groups, in proportion
        assert tables["lr"] == pytest.approx(10 * rest["lr"])
        optimizer.step()
        scheduler.step()
    # decoupled decay per step (lr * weight_decay) is the same for both groups
    assert tables["lr"] * tables["weight_decay"] == pytest.approx(rest["lr"] * rest["weight_decay"])
    # scale 1: one group with every parameter, the paper's optimizer (and older optimizer checkpoints load)
    plain, _ = polynomial_optimizer(model, warmup_steps=2, total_steps=10)
    assert len(plain.param_groups) == 1 and len(plain.param_groups[0]["params"]) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="attention_bias_lr_scale must be > 0"):
        polynomial_optimizer(model, warmup_steps=2, total_steps=10, attention_bias_lr_scale=0.0)
    with pytest.raises(ValueError, match="needs a model with attention-bias parameters"):
        polynomial_optimizer(torch.nn.Linear(2, 2), warmup_steps=2, total_steps=10, attention_bias_lr_scale=5.0)


def test_graphormer_slim_size() -> None:
    model = graphormer_slim()
    parameters = sum(p.numel() for p in model.parameters())
    assert 450_000 < parameters < 520_000  # the paper's Graphormer-slim has ~489k


def test_tiny_training_on_real_zinc_lowers_the_loss(data_root) -> None:
    from torch_geometric.datasets import ZINC

    from graphnorm.data.root import seed_from_mirror

    seed_from_mirror(data_root, "ZINC", ["raw/val.pickle"])
    graphs = preprocess_dataset(ZINC(str(data_root / "ZINC"), subset=True, split="val")[:200], multi_hop_max_dist=5)
    batches = [collate_graphormer(graphs[i : i + 50]) for i in range(0, 200, 50)]
    model = graphormer_slim(
        num_layers=2, hidden_channels=32, num_heads=4, ffn_channels=32,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    )  # fmt: skip
    optimizer, scheduler = polynomial_optimizer(model, lr=2e-3, weight_decay=0.0, warmup_steps=4, total_steps=32)

    def mean_abs_error() -> float:
        model.eval()
        with torch.no_grad():
            return float(torch.cat([(model(b).squeeze(-1) - b.y).abs() for b in batches]).mean())

    targets = torch.cat([b.y for b in batches])
    best_constant = float((targets - targets.median()).abs().mean())  # MAE of the best constant prediction
    before = mean_abs_error()
    model.train()
    for _ in range(8):
        for batch in batches:
            loss = (model(batch).squeeze(-1) - batch.y).abs().mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
    after = mean_abs_error()
    assert after < 0.85 * before and after < 0.85 * best_constant, (before, after, best_constant)


def test_ogb_molecule_features_as_in_molhiv() -> None:
    """OGB's 9 atom and 3 bond feature columns (ogbg-molhiv), from real molecules through ogb's smiles2graph."""
    from ogb.utils import smiles2graph
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    graphs = []
    for smiles in ["CC(=O)Oc1ccccc1C(=O)O", "[Na+].[Cl-]", "C", "c1ccc2ccccc2c1"]:
        graph = smiles2graph(smiles)
        graphs.append(
            TRANSFORM(
                Data(
                    x=torch.from_numpy(graph["node_feat"]),
                    edge_index=torch.from_numpy(graph["edge_index"]),
                    edge_attr=torch.from_numpy(graph["edge_feat"]),
                    y=torch.tensor([[1]]),
                )
            )
        )
    batch = collate_graphormer(graphs)
    assert batch.x.shape[1] == 9 and batch.edge_attr.shape[1] == 3 and batch.y.shape == (4, 1)
    model = small_model(
        out_channels=1, atom_feature_dims=get_atom_feature_dims(), bond_feature_dims=get_bond_feature_dims()
    )
    out = model(batch)
    assert out.shape == (4, 1) and torch.isfinite(out).all()
    # the disconnected salt: Na+ and Cl- are unreachable from each other
    assert int(batch.spatial_pos[1, 0, 1]) == -1


def test_build_model_for_zinc_and_ogb_tasks() -> None:
    """The registry builds Graphormer from the task's description (feature kinds, output size), not a run config."""
    from graphnorm.data.datasets import GraphTask
    from graphnorm.models import build_model

    keywords = dict(
        num_layers=3, hidden_channels=24, num_heads=4, norm="sepnorm", dropout=0.1, ffn_channels=40,
        multi_hop_max_dist=2, pre_ln=False,
    )  # fmt: skip
    zinc = GraphTask(
        name="zinc", level="graph", task_type="regression", metric="mae", num_features=28, num_outputs=1,
        atom_encoder="zinc",
    )  # fmt: skip
    model = build_model("graphormer", zinc, **keywords)
    assert len(model.layers) == 3 and model.layers[0].fc1.out_features == 40 and not model.pre_ln
    assert model.atom_embedding.feature_dims == [28] and model.attention_bias.hop_weight.shape == (2, 4, 4)
    ogb = GraphTask(
        name="molhiv", level="graph", task_type="binary", metric="rocauc", num_features=9, num_outputs=1,
        atom_encoder="ogb",
    )  # fmt: skip
    assert len(build_model("graphormer", ogb, **keywords).atom_embedding.feature_dims) == 9
    cora = GraphTask(name="cora", level="node", task_type="multiclass", metric="acc", num_features=5, num_outputs=7)
    with pytest.raises(ValueError, match="graph level; the task is node"):
        build_model("graphormer", cora, **keywords)
    with pytest.raises(ValueError, match="come from the task"):
        build_model("graphormer", zinc, out_channels=2, **keywords)


def test_attention_equals_scaled_dot_product_attention() -> None:
    # The layer writes softmax(q k^T / sqrt(d) + bias) v out by hand (faster on CPU); it must equal torch's SDPA.
    torch.manual_seed(0)
    batch = collate_graphormer([molecule_like(n, seed) for seed, n in enumerate([3, 7, 5])])
    model = small_model(attention_dropout=0.0).double()
    layer = model.layers[0]
    rows = torch.randn(batch.row_batch.numel(), 16, dtype=torch.float64, requires_grad=True)
    bias = model.attention_bias(batch).detach().requires_grad_()
    ours = layer.attention(rows, bias, batch)

    positions = bias.size(-1)
    qkv = layer.qkv(rows)
    dense = qkv.new_zeros(batch.num_graphs * positions, qkv.size(1)).index_copy(0, batch.dense_index, qkv)
    query, key, value = dense.view(batch.num_graphs, positions, 3, 4, 4).permute(2, 0, 3, 1, 4).unbind(0)
    attended = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=bias)
    reference = layer.out_proj(attended.transpose(1, 2).reshape(batch.num_graphs * positions, -1)[batch.dense_index])
    torch.testing.assert_close(ours, reference)
    grads = torch.autograd.grad(ours.square().sum(), (rows, bias))
    reference_grads = torch.autograd.grad(reference.square().sum(), (rows, bias))
    for got, want in zip(grads, reference_grads):
        torch.testing.assert_close(got, want)


def test_edge_encoding_equals_the_gather_formula_with_gradients() -> None:
    # bias_ij += mean over the path's first hops k of (edge embedding of hop k) @ W_k, written as a direct gather of
    # [B, N, N, hops, heads] values; the model computes it through a [hops * edges, heads] table instead.
    # stored paths have HOPS = 3 edges, the model uses the first 2 (and distances clipped at 3)
    batch = collate_graphormer([molecule_like(n, seed, edge_prob=0.25) for seed, n in enumerate([9, 4, 12, 1])])
    model = small_model(multi_hop_max_dist=2, max_distance=3).double()
    bias_module = model.attention_bias
    torch.nn.init.normal_(bias_module.hop_weight)  # N(0, 0.02) would hide errors in this term
    ours = bias_module(batch)

    spatial_pos = batch.spatial_pos
    max_distance = bias_module.max_distance
    assert int(spatial_pos.max()) > max_distance  # the clipping is exercised
    spatial_index = torch.where(spatial_pos < 0, max_distance + 1, spatial_pos.clamp(max=max_distance))
    edge_path = batch.edge_path[..., :2]
    on_path = edge_path >= 0
    edge_values = bias_module.edge_embedding(batch.edge_attr)  # [E, heads]
    path_values = edge_values[edge_path.clamp(min=0)] * on_path.unsqueeze(-1)  # [B, N, N, hops, heads]
    path_bias = torch.einsum("bijkh,khg->bijg", path_values, bias_module.hop_weight[:2])
    node_bias = bias_module.spatial_embedding(spatial_index) + path_bias / on_path.sum(-1).clamp(min=1).unsqueeze(-1)
    inner = ours[:, :, 1:, 1:].permute(0, 2, 3, 1)  # [B, N, N, heads]
    real_pair = batch.position_mask[:, 1:, None] & batch.position_mask[:, None, 1:]  # [B, N, N]
    torch.testing.assert_close(inner[real_pair], node_bias[real_pair])

    parameters = [bias_module.hop_weight, bias_module.edge_embedding.embedding.weight]
    weights = torch.randn_like(node_bias)
    grads = torch.autograd.grad((inner[real_pair] * weights[real_pair]).sum(), parameters)
    reference_grads = torch.autograd.grad((node_bias[real_pair] * weights[real_pair]).sum(), parameters)
    for got, want in zip(grads, reference_grads):
        torch.testing.assert_close(got, want)


def test_attention_bias_without_path_hops_is_the_spatial_bias() -> None:
    # paths collated with 0 hops (collate_graphormer(multi_hop_max_dist=0)): no edge term, only the spatial encoding
    graphs = [molecule_like(n, seed) for seed, n in enumerate([5, 3])]
    batch = collate_graphormer(graphs, multi_hop_max_dist=0)
    bias_module = small_model().attention_bias
    bias = bias_module(batch)[:, :, 1:, 1:].permute(0, 2, 3, 1)  # [B, N, N, heads]
    spatial = batch.spatial_pos
    spatial_index = torch.where(spatial < 0, bias_module.max_distance + 1, spatial.clamp(max=bias_module.max_distance))
    real_pair = batch.position_mask[:, 1:, None] & batch.position_mask[:, None, 1:]
    torch.testing.assert_close(bias[real_pair], bias_module.spatial_embedding(spatial_index)[real_pair])


# model -> norm positions: Graphormer 2 layers x 2 norms + final norm; DeepGCN/DeepGAT 3 hidden layers; GCNII 4 layers
NORM_POSITIONS = {"graphormer": 2 * 2 + 1, "gcn": 3, "gat": 3, "gcnii": 4}


@pytest.mark.parametrize("model_kind", list(NORM_POSITIONS))
def test_norm_instance_is_copied_for_every_position(model_kind):
    """A norm given as an instance fills each position with its own copy: no parameters or statistics shared."""
    from graphnorm.models import GCNII, DeepGAT

    template = build_norm("batchnorm", 16)
    model = {
        "graphormer": lambda: small_model(template),
        "gcn": lambda: DeepGCN(5, 16, 3, 4, norm=template),
        "gat": lambda: DeepGAT(5, 16, 3, 4, norm=template, num_heads=2),
        "gcnii": lambda: GCNII(5, 16, 3, 4, norm=template),
    }[model_kind]()
    positions = [m for m in model.modules() if isinstance(m, type(template))]
    expected = NORM_POSITIONS[model_kind]
    assert len(positions) == expected
    assert template not in positions
    parameter_ids = [id(p) for m in positions for p in m.parameters()]
    buffer_ids = [id(b) for m in positions for b in m.buffers()]
    assert len(set(parameter_ids)) == len(parameter_ids)
    assert len(set(buffer_ids)) == len(buffer_ids)


def test_pytorch_init_option_sets_default_scales_and_keeps_the_original_default() -> None:
    torch.manual_seed(0)
    original = small_model(hidden_channels=64, num_heads=4).requires_grad_(False)
    torch.manual_seed(0)
    pytorch = small_model(hidden_channels=64, num_heads=4, init="pytorch").requires_grad_(False)
    assert original.init == "graphormer"
    # The original: N(0, 0.02) everywhere; PyTorch's: N(0, 1) embeddings and graph token, Kaiming-uniform linears.
    assert float(original.graph_token.std()) < 0.05 and 0.6 < float(pytorch.graph_token.std()) < 1.4
    for module in (original.in_degree_embedding, original.attention_bias.spatial_embedding):
        assert float(module.weight.std()) < 0.05
    for module in (pytorch.in_degree_embedding, pytorch.attention_bias.spatial_embedding):
        assert 0.6 < float(module.weight.std()) < 1.4
    linear = pytorch.head_transform
    bound = 1.0 / linear.in_features**0.5  # kaiming_uniform_(a=sqrt(5)) bound
    assert float(linear.weight.abs().max()) <= bound and float(linear.weight.std()) > 0.5 * bound / 3**0.5
    assert float(linear.bias.abs().max()) > 0  # PyTorch's uniform bias, not Graphormer's zeros
    # The attention-bias scalars and the norms keep their initialization.
    assert float(pytorch.attention_bias.virtual_distance.std()) < 0.05
    assert torch.equal(pytorch.final_norm.state_dict()["weight"], original.final_norm.state_dict()["weight"])
    with pytest.raises(ValueError, match="init must be one of 'graphormer', 'pytorch', got 'xavier'"):
        small_model(init="xavier")
