"""Every registered norm in PyG's own models (GCN, GAT, GraphSAGE, GIN through BasicGNN's ``norm=`` slot; GPSConv),
as a user writes them: the table (builds, trains 5 epochs, the probe runs with defaults; else the one-line reason),
graphs of a mini-batch kept apart, and graphnorm.norms.pass_edge_index (the hand-off of edge_index to the norms, and
the untying of GPSConv's norm1/norm2/norm3)."""

from __future__ import annotations

import copy
import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, GPSConv, global_add_pool
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

from graphnorm.analysis import CollapseProbe
from graphnorm.data import load_dataset
from graphnorm.norms import (
    ContraNorm,
    GranolaNoEdgesWarning,
    NeighborsNotExcludedWarning,
    SharedNormWarning,
    available_norms,
    build_norm,
    pass_edge_index,
    untie_norms,
)

pytestmark = pytest.mark.usefixtures("one_thread")

HIDDEN = 16
EPOCHS = 5
BASIC_GNNS = {"GCN": GCN, "GAT": GAT, "GraphSAGE": GraphSAGE, "GIN": GIN}
HOSTS = [*BASIC_GNNS, "GPSConv"]
# The cells that cannot work, and the one line each says (a regex of the whole message).
EXPECTED_FAILURES = {
    "sepnorm": r"sepnorm: token_mask is required: .*hosts with token rows are graphnorm's models 'graphormer', and "
    r"'gcn' or 'gat' with virtual_node=True .*build_norm\('layernorm', channels\)",
}
CORE_METRICS = ("effective_rank", "mean_cosine", "dirichlet_energy")


def expected_warnings(host: str, norm: str) -> set[type[Warning]]:
    """What a cell warns, as written (no pass_edge_index): ContraNorm gets no edge_index from any PyG host, and
    GPSConv makes one norm instance its norm1, norm2 and norm3 (a warning when it has parameters or statistics to
    share)."""
    expected: set[type[Warning]] = set()
    if norm == "contranorm":
        expected.add(NeighborsNotExcludedWarning)
    if norm == "granola":
        expected.add(GranolaNoEdgesWarning)
    built = build_norm(norm, HIDDEN)
    if host == "GPSConv" and (list(built.parameters()) or list(built.buffers())):
        expected.add(SharedNormWarning)
    return expected


class GPS(nn.Module):
    """Two GPSConv layers (GIN as the local conv) over ZINC's atoms, sum-pooled to one regression output; the norm
    module is built once per layer and handed to GPSConv, as PyG's ``norm=`` slot takes it; called as model(batch).
    ``in_features`` embeds float features instead of atom types; ``readout=False`` returns the node states."""

    def __init__(self, norm: str | None, in_features: int | None = None, readout: bool = True, **norm_kwargs) -> None:
        super().__init__()
        self.embed = nn.Embedding(28, HIDDEN) if in_features is None else nn.Linear(in_features, HIDDEN)
        self.layers = nn.ModuleList(
            GPSConv(
                HIDDEN,
                GINConv(nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))),
                heads=2,
                norm=None if norm is None else build_norm(norm, HIDDEN, **norm_kwargs),
            )
            for _ in range(2)
        )
        self.head = nn.Linear(HIDDEN, 1) if readout else None

    def forward(self, data: Data) -> Tensor:
        h = self.embed(data.x.squeeze(-1) if isinstance(self.embed, nn.Embedding) else data.x)
        for layer in self.layers:
            h = layer(h, data.edge_index, data.batch)
        if self.head is None:
            return h
        return self.head(global_add_pool(h, data.batch)).squeeze(-1)


def basic_gnn(host: str, norm: str | None, num_layers: int = 3, **kwargs) -> nn.Module:
    norm_module = None if norm is None else build_norm(norm, HIDDEN)
    return BASIC_GNNS[host](1433, HIDDEN, num_layers=num_layers, out_channels=7, norm=norm_module, **kwargs)


@pytest.fixture(scope="module")
def cora(data_root) -> Data:
    return load_dataset("cora", root=data_root).data


@pytest.fixture(scope="module")
def zinc(data_root) -> list[Data]:
    train = load_dataset("zinc", root=data_root).train
    return [train[i] for i in range(96)]


def train_basic_gnn(model: nn.Module, cora: Data) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    model.train()
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        out = model(cora.x, cora.edge_index)
        loss = F.cross_entropy(out[cora.train_mask], cora.y[cora.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def train_gps(model: nn.Module, graphs: list[Data]) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    loader = DataLoader(graphs, batch_size=48, shuffle=True, generator=torch.Generator().manual_seed(0))
    losses = []
    model.train()
    for _ in range(EPOCHS):
        for batch in loader:
            optimizer.zero_grad()
            loss = F.l1_loss(model(batch), batch.y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def run_cell(host: str, norm: str, cora: Data, zinc: list[Data]):
    """Build, train 5 epochs, probe with defaults: (parameters before, model, losses, probe table)."""
    model = GPS(norm) if host == "GPSConv" else basic_gnn(host, norm)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    if host == "GPSConv":
        losses = train_gps(model, zinc)
        table = CollapseProbe(model).probe(Batch.from_data_list(zinc[:32]))
    else:
        losses = train_basic_gnn(model, cora)
        table = CollapseProbe(model).probe(cora)
    return before, model, losses, table


@pytest.mark.slow
@pytest.mark.parametrize("norm", available_norms())
@pytest.mark.parametrize("host", HOSTS)
def test_every_norm_in_every_pyg_host_trains_and_is_probed_or_says_why(host, norm, cora, zinc) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if norm in EXPECTED_FAILURES:
            with pytest.raises(ValueError) as error:
                run_cell(host, norm, cora, zinc)
            message = str(error.value)
            assert "\n" not in message and re.fullmatch(EXPECTED_FAILURES[norm], message), message
            return
        before, model, losses, table = run_cell(host, norm, cora, zinc)
    assert {type(w.message) for w in caught} == expected_warnings(host, norm), [str(w.message) for w in caught]
    assert all(math.isfinite(loss) for loss in losses)
    changed = {name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])}
    norm_parameters = {name for name, _ in model.named_parameters() if re.search(r"norms?\d*\.", name)}
    if norm == "granola":  # no edges reach it as written (GranolaNoEdgesWarning): its neighbour weights get no gradient
        norm_parameters = {name for name in norm_parameters if ".neighbor." not in name}
    assert norm_parameters <= changed, norm_parameters - changed  # the norms' own parameters train too
    assert len(changed) > len(norm_parameters)
    # the probe's defaults watch the norms graphnorm finds (one per position of the host; GPSConv: one per layer)
    expected_layers = 2
    assert table.layer.nunique() == expected_layers
    core = table[table.metric.isin(CORE_METRICS) & (table.stat.isin(["value", "mean"]))]
    assert set(core.metric) == set(CORE_METRICS) and core.value.map(math.isfinite).all(), core


def test_probe_defaults_in_pyg_hosts_without_graphnorm_norms(cora, zinc) -> None:
    """No graphnorm norm: the probe watches the hosts' message-passing layers (GPSConv whole), calls model(batch)
    for a forward taking the batch object, and measures finite metrics."""
    model = basic_gnn("GCN", None)
    table = CollapseProbe(model).probe(cora)
    assert list(table.drop_duplicates("layer").layer_name) == ["convs.0", "convs.1", "convs.2"]
    gps = GPS(None)
    table = CollapseProbe(gps).probe(Batch.from_data_list(zinc[:16]))
    assert list(table.drop_duplicates("layer").layer_name) == ["layers.0", "layers.1"]
    assert table[table.metric.isin(CORE_METRICS)].value.map(math.isfinite).all()


# --- graphs of a mini-batch stay apart --------------------------------------------------------------------------------


def _two_graph_batches(num_features: int) -> tuple[Batch, Batch]:
    """Batches [A, B] and [A, B'] with B' another graph of B's size."""
    torch.manual_seed(3)

    def graph(n: int) -> Data:
        edges = torch.randint(0, n, (2, 2 * n))
        edges = edges[:, edges[0] != edges[1]]
        return Data(x=torch.randn(n, num_features), edge_index=torch.cat([edges, edges.flip(0)], dim=1))

    a, b, b_other = graph(7), graph(9), graph(9)
    return Batch.from_data_list([a, b]), Batch.from_data_list([a, b_other])


@pytest.mark.parametrize("handed", [False, True], ids=["as_written", "pass_edge_index"])
@pytest.mark.parametrize("norm", ["contranorm", "pairnorm", "graphnorm"])
def test_a_graph_does_not_depend_on_the_other_graphs_of_its_batch(norm, handed) -> None:
    first, second = _two_graph_batches(12)
    a_rows = first.batch == 0
    kwargs = _all_nodes(norm, handed)
    gcn = GCN(12, HIDDEN, num_layers=3, out_channels=3, norm=build_norm(norm, HIDDEN, **kwargs))
    gps = GPS(norm, in_features=12, readout=False, **kwargs)
    if handed:
        pass_edge_index(gcn), pass_edge_index(gps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedNormWarning)  # untied by pass_edge_index; as written, shared
        for model, run in ((gcn, _gcn_states), (gps, lambda model, data: model(data))):
            model.eval()
            with torch.no_grad():
                out_first, out_second = run(model, first), run(model, second)
            torch.testing.assert_close(out_first[a_rows], out_second[a_rows], rtol=0, atol=1e-6)
            assert not torch.allclose(out_first[~a_rows], out_second[~a_rows])


def _all_nodes(norm: str, handed: bool) -> dict:
    """ContraNorm without the hand-off is built in the all-nodes form (the form it falls back to), so it is quiet."""
    return {"exclude_neighbors": False} if norm == "contranorm" and not handed else {}


def _gcn_states(model: nn.Module, data: Batch) -> Tensor:
    return model(data.x, data.edge_index, batch=data.batch, batch_size=data.num_graphs)


# --- pass_edge_index ----------------------------------------------------------------------------------------------


def _norm_calls(model: nn.Module, run) -> list[tuple[nn.Module, Tensor, Tensor | None, Tensor]]:
    """(norm, input rows, batch, output) of every graphnorm ContraNorm call in one eval forward."""
    calls = []
    handles = [
        m.register_forward_hook(
            lambda module, args, kwargs, out: calls.append((module, args[0], _batch_of(args, kwargs), out)),
            with_kwargs=True,
        )
        for m in model.modules()
        if isinstance(m, ContraNorm)
    ]
    model.eval()
    with torch.no_grad():
        run()
    for handle in handles:
        handle.remove()
    return calls


def _batch_of(args: tuple, kwargs: dict) -> Tensor | None:
    return kwargs.get("batch", args[1] if len(args) > 1 else None)


def test_pass_edge_index_makes_contranorm_in_gcn_exclude_neighbours_per_graph() -> None:
    first, _ = _two_graph_batches(12)
    model = GCN(12, HIDDEN, num_layers=4, out_channels=3, norm=build_norm("contranorm", HIDDEN))
    assert model.supports_norm_batch  # the wrapped forward still shows its signature: BasicGNN passes batch
    handoff = pass_edge_index(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NeighborsNotExcludedWarning, no SharedNormWarning
        calls = _norm_calls(model, lambda: _gcn_states(model, first))
    assert len(calls) == 3 and handoff.untied == []
    for norm, x, batch, out in calls:
        assert batch is first.batch
        with torch.no_grad():
            torch.testing.assert_close(out, norm(x, batch, edge_index=first.edge_index), rtol=0, atol=0)
            assert not torch.allclose(out, norm(x, batch, edge_index=torch.empty(2, 0, dtype=torch.long)))
    # undone: the hooks are off the model and the norms no longer receive edges (a fresh instance warns again)
    handoff.remove()
    assert not model._forward_pre_hooks and not model._forward_hooks
    model.norms[0].__dict__.pop("_warned_all_nodes", None)
    with pytest.warns(NeighborsNotExcludedWarning):
        _gcn_states(model, first)


def test_pass_edge_index_reads_data_objects_keywords_and_sparse_adjacency() -> None:
    first, _ = _two_graph_batches(12)

    class TakesData(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(12, HIDDEN)
            self.norm = build_norm("contranorm", HIDDEN)

        def forward(self, data: Batch) -> Tensor:
            return self.norm(self.lin(data.x), data.batch)

    class TakesKeywords(TakesData):
        def forward(self, x: Tensor, edge_index: Tensor | None = None, adj_t: Tensor | None = None) -> Tensor:
            return self.norm(self.lin(x))

    by_data = TakesData()
    pass_edge_index(by_data)
    expected = by_data.norm(by_data.lin(first.x), first.batch, edge_index=first.edge_index)
    torch.testing.assert_close(by_data(first), expected, rtol=0, atol=0)

    by_keyword = TakesKeywords()
    by_keyword.load_state_dict(by_data.state_dict())
    pass_edge_index(by_keyword)
    expected = by_keyword.norm(by_keyword.lin(first.x), edge_index=first.edge_index)
    torch.testing.assert_close(by_keyword(x=first.x, edge_index=first.edge_index), expected, rtol=0, atol=0)
    # PyG's sparse adjacency adj_t[target, source] is handed over as its (source, target) pairs
    n = first.num_nodes
    adj_t = torch.sparse_coo_tensor(
        first.edge_index.flip(0), torch.ones(first.edge_index.size(1)), (n, n), check_invariants=True
    )
    torch.testing.assert_close(by_keyword(first.x, adj_t=adj_t.coalesce()), expected, rtol=0, atol=1e-6)


def test_pass_edge_index_errors_and_cleanup_on_exception() -> None:
    first, _ = _two_graph_batches(12)

    class Subset(nn.Module):
        """Calls its norm on a subset of the nodes: the handed edges are not for those rows."""

        def __init__(self) -> None:
            super().__init__()
            self.norm = build_norm("contranorm", 12)
            self.pair = build_norm("pairnorm", 12)

        def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
            return self.norm(self.pair(x[:5]))

    model = Subset()
    handoff = pass_edge_index(model)
    with pytest.raises(ValueError, match=r"handed the edges of 16 nodes, but this norm got 5 rows"):
        model(first.x, first.edge_index)
    state = model.norm.__dict__["_graphnorm_edge_handoff"]
    assert state.stack == []  # popped although forward raised
    with pytest.raises(ValueError, match="already receive edge_index"):
        pass_edge_index(model)
    with pytest.raises(ValueError, match=r"Subset\.forward got no edge_index"):
        model(first.x, None)
    assert state.stack == []
    with pytest.raises(ValueError, match=r"Subset\.forward got edge_index of shape \(16,\).*expected \[2, num_edges\]"):
        model(first.x, first.batch)
    handoff.remove()
    with pytest.raises(ValueError, match="contains no graphnorm norm"):
        pass_edge_index(nn.Linear(3, 3))
    with pytest.raises(TypeError, match="must be a torch.nn.Module"):
        pass_edge_index("model")


def test_a_copied_model_hands_its_own_edges() -> None:
    first, second = _two_graph_batches(12)
    model = GCN(12, HIDDEN, num_layers=3, out_channels=3, norm=build_norm("contranorm", HIDDEN))
    pass_edge_index(model)
    clone = copy.deepcopy(model)
    clone_state = clone.norms[0].__dict__["_graphnorm_edge_handoff"]
    assert clone_state is not model.norms[0].__dict__["_graphnorm_edge_handoff"]
    assert clone_state is clone.norms[1].__dict__["_graphnorm_edge_handoff"]
    model.eval(), clone.eval()
    with torch.no_grad():
        torch.testing.assert_close(_gcn_states(clone, second), _gcn_states(model, second), rtol=0, atol=0)


# --- one norm instance at several positions ---------------------------------------------------------------------------


def test_gpsconv_shared_norm_warns_once_naming_its_positions_and_pass_edge_index_unties_it(zinc) -> None:
    batch = Batch.from_data_list(zinc[:8])
    model = GPS("layernorm")
    assert model.layers[0].norm1 is model.layers[0].norm2 is model.layers[0].norm3
    with pytest.warns(SharedNormWarning) as caught:
        model(batch)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2, messages
    assert messages[0].startswith(
        "one LayerNorm instance is at 3 positions of GPSConv at 'layers.0': layers.0.norm1, layers.0.norm2, "
        "layers.0.norm3; they share one set of parameters"
    )
    assert "pass_edge_index(model) before building the optimizer" in messages[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(batch)  # once per instance

    untied = GPS("layernorm")
    shared = untied.layers[0].norm1
    handoff = pass_edge_index(untied)
    assert handoff.untied == [f"layers.{i}.norm{j}" for i in (0, 1) for j in (2, 3)]
    layer = untied.layers[0]
    assert layer.norm1 is shared and layer.norm2 is not shared and layer.norm3 is not layer.norm2
    torch.testing.assert_close(layer.norm2.state_dict(), shared.state_dict(), rtol=0, atol=0)
    optimizer = torch.optim.Adam(untied.parameters(), lr=0.01)
    assert sum(p.numel() for group in optimizer.param_groups for p in group["params"]) == sum(
        p.numel() for p in untied.parameters()
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = untied(batch).abs().mean()
    loss.backward()
    optimizer.step()
    assert not torch.equal(layer.norm2.weight, layer.norm3.weight)  # three positions, three parameter sets
    gps_reset = GPS("pairnorm")
    gps_reset.layers[0].reset_parameters()  # PyG resets its norms: every registered norm has reset_parameters


def test_sharing_across_modules_is_named_and_untied() -> None:
    norm = build_norm("rmsnorm", 4)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = norm

        def forward(self, x: Tensor) -> Tensor:
            return self.norm(x)

    model = nn.Sequential(Block(), nn.ReLU(), Block())
    with pytest.warns(SharedNormWarning, match=r"one RMSNorm instance is at 2 positions of Sequential: 0\.norm, 2\."):
        model(torch.randn(5, 4))
    assert untie_norms(model) == ["2.norm"] and model[0].norm is norm and model[2].norm is not norm
    stateless = build_norm("pairnorm", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no parameters or statistics: sharing it changes nothing
        nn.Sequential(stateless, nn.ReLU(), stateless)(torch.randn(5, 4))
    lone = build_norm("pairnorm", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lone(torch.randn(5, 4))  # called directly: no host, nothing to warn
        GCN(4, 4, num_layers=3, norm=build_norm("pairnorm", 4))(torch.randn(5, 4), torch.empty(2, 0, dtype=torch.long))
