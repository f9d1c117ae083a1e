"""CollapseProbe on models that only contain graphnorm norms (no collapse_layers, no probe_context): the norms are
found and hooked, the rows they see are described by the keywords they receive, and the records equal
collapse_records called by hand on the same tensors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GINConv, SAGEConv
from torch_geometric.nn.models import GCN

from graphnorm.analysis import CollapseProbe, collapse_records
from graphnorm.analysis.probe import graphnorm_norms
from graphnorm.norms import ContraNorm, PairNorm, SepNorm, build_norm

pytestmark = pytest.mark.usefixtures("one_thread")

NUM_SV = 4


def _graph(num_nodes: int, num_edges: int, num_features: int = 6) -> Data:
    edge_index = torch.randint(0, num_nodes, (2, num_edges))
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    return Data(x=torch.randn(num_nodes, num_features, dtype=torch.float64), edge_index=edge_index)


class Gin(nn.Module):
    """A PyG-style GIN stack with a graphnorm norm after every conv, called positionally as norm(h, batch)."""

    def __init__(self, in_channels: int, hidden: int, num_layers: int, norm: str = "pairnorm") -> None:
        super().__init__()
        widths = [in_channels] + [hidden] * num_layers
        self.convs = nn.ModuleList(
            GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))) for a, b in zip(widths, widths[1:])
        )
        self.norms = nn.ModuleList(build_norm(norm, hidden) for _ in range(num_layers))
        self.head = nn.Linear(hidden, 2)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        for conv, norm in zip(self.convs, self.norms):
            x = F.relu(norm(conv(x, edge_index), batch))
        return self.head(x)


class TokenModel(nn.Module):
    """One learned token row per graph placed first, linked to nothing; SepNorm gets token_mask, batch and edges."""

    def __init__(self, in_channels: int, hidden: int, num_layers: int) -> None:
        super().__init__()
        self.embed = nn.Linear(in_channels, hidden)
        self.token = nn.Parameter(torch.randn(hidden))
        self.convs = nn.ModuleList(SAGEConv(hidden, hidden) for _ in range(num_layers))
        self.norms = nn.ModuleList(SepNorm(hidden, token_norm="layernorm", node_norm="pairnorm") for _ in self.convs)

    def rows(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(rows, row_batch, token_mask, row_edge_index): graph g's token, then graph g's nodes."""
        num_graphs = int(batch.max()) + 1
        row_batch = torch.cat([torch.arange(num_graphs), batch]).sort(stable=True).values
        token_mask = torch.ones_like(row_batch, dtype=torch.bool)
        token_mask[1:] = row_batch[1:] != row_batch[:-1]
        node_rows = (~token_mask).nonzero().squeeze(1)
        rows = self.token.expand(row_batch.numel(), -1).index_copy(0, node_rows, self.embed(x))
        return rows, row_batch, token_mask, node_rows[edge_index]

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        batch = batch if batch is not None else edge_index.new_zeros(x.size(0))
        h, row_batch, token_mask, row_edges = self.rows(x, edge_index, batch)
        for conv, norm in zip(self.convs, self.norms):
            h = F.relu(norm(conv(h, row_edges), batch=row_batch, edge_index=row_edges, token_mask=token_mask))
        return h[token_mask]


def _norm_rows(model: nn.Module, run: callable, entering: bool = False) -> list[Tensor]:
    """The rows leaving (or entering) every norm of ``model.norms`` in one eval forward, captured by hand."""
    rows: list[Tensor] = []
    handles = [
        norm.register_forward_pre_hook(lambda _m, args: rows.append(args[0].clone()))
        if entering
        else norm.register_forward_hook(lambda _m, _args, out: rows.append(out.clone()))
        for norm in model.norms
    ]
    model.eval()
    with torch.no_grad():
        run()
    for handle in handles:
        handle.remove()
    return rows


def _assert_equal_records(table, expected_per_layer: list[list[dict]], names: list[str]) -> None:
    assert sorted(table.layer.unique()) == list(range(1, len(expected_per_layer) + 1))
    for layer, (name, expected) in enumerate(zip(names, expected_per_layer), start=1):
        got = table[table.layer == layer]
        assert set(got.layer_name) == {name}
        assert [(r.rows, r.metric, r.stat) for r in got.itertuples()] == [
            (e["rows"], e["metric"], e["stat"]) for e in expected
        ]
        for value, record in zip(got.value, expected):
            tolerance = 1e-8 if record["metric"].startswith("cone_angle") else 1e-12
            assert value == pytest.approx(record["value"], rel=1e-9, abs=tolerance, nan_ok=True), (layer, record)


def test_plain_pyg_model_is_probed_at_its_norms_without_any_attribute() -> None:
    data = _graph(50, 120)
    model = Gin(6, 12, num_layers=3).double()
    model.train()
    probe = CollapseProbe(model, num_singular_values=NUM_SV)
    assert [name for name, _ in probe.layers] == ["norms.0", "norms.1", "norms.2"]
    table = probe.probe(data)
    assert model.training  # mode restored
    rows = _norm_rows(model, lambda: model(data.x, data.edge_index))
    expected = [collapse_records(x, data.edge_index, num_singular_values=NUM_SV) for x in rows]
    _assert_equal_records(table, expected, ["norms.0", "norms.1", "norms.2"])
    assert set(table.stat) == {"value"} and table[table.metric == "dirichlet_energy"].value.notna().all()


def test_entering_rows_are_the_norm_inputs() -> None:
    data = _graph(40, 100)
    model = Gin(6, 12, num_layers=2).double()
    entering = CollapseProbe(model, at="input", num_singular_values=NUM_SV).probe(data)
    leaving = CollapseProbe(model, num_singular_values=NUM_SV).probe(data)
    rows = _norm_rows(model, lambda: model(data.x, data.edge_index), entering=True)
    expected = [collapse_records(x, data.edge_index, num_singular_values=NUM_SV) for x in rows]
    _assert_equal_records(entering, expected, ["norms.0", "norms.1"])
    # PairNorm centres its rows: the mean row vanishes after it, not before, so the tables differ.
    cosine = "mean_cosine"
    assert (
        not entering[entering.metric == cosine]
        .value.reset_index(drop=True)
        .equals(leaving[leaving.metric == cosine].value.reset_index(drop=True))
    )
    with pytest.raises(ValueError, match="at must be one of"):
        CollapseProbe(model, at="before")


def test_per_graph_statistics_from_the_batch_the_norms_receive() -> None:
    graphs = [_graph(n, 2 * n) for n in (7, 10, 5, 12)]
    batch = Batch.from_data_list(graphs)
    model = Gin(6, 8, num_layers=2).double()
    # A data object PyG does not know (no num_nodes, no batch): the graph ids reach the probe only through the norms.
    data = SimpleNamespace(x=batch.x, edges=batch.edge_index, graph=batch.batch)
    probe = CollapseProbe(model, forward=lambda m, d: m(d.x, d.edges, d.graph), num_singular_values=NUM_SV)
    table = probe.probe(data)
    assert {"mean", "std", "pooled"} <= set(table.stat) and set(table.rows) == {"node"}
    assert all(context["batch"] is batch.batch for context in probe.last_contexts)
    rows = _norm_rows(model, lambda: model(batch.x, batch.edge_index, batch.batch))
    expected = [collapse_records(x, batch=batch.batch, num_singular_values=NUM_SV) for x in rows]
    _assert_equal_records(table, expected, ["norms.0", "norms.1"])  # no edges given to the norms: none measured
    # The PyG Batch itself with the default forward: the same graphs, and the edges taken from data.
    full = CollapseProbe(model, num_singular_values=NUM_SV).probe(batch)
    expected = [collapse_records(x, batch.edge_index, batch.batch, num_singular_values=NUM_SV) for x in rows]
    _assert_equal_records(full, expected, ["norms.0", "norms.1"])


def test_token_rows_are_recognised_from_the_token_mask_given_to_sepnorm() -> None:
    graphs = [_graph(n, 2 * n) for n in (6, 9, 8)]
    batch = Batch.from_data_list(graphs)
    model = TokenModel(6, 8, num_layers=3).double()
    table = CollapseProbe(model, num_singular_values=NUM_SV).probe(batch)
    assert set(table.rows) == {"node", "token"}
    tokens = table[(table.rows == "token") & (table.metric == "effective_rank")]
    assert list(tokens.layer) == [1, 2, 3] and set(tokens.stat) == {"value"}
    model.eval()
    with torch.no_grad():
        _, row_batch, token_mask, row_edges = model.rows(batch.x, batch.edge_index, batch.batch)
    rows = _norm_rows(model, lambda: model(batch.x, batch.edge_index, batch.batch))
    expected = [collapse_records(x, row_edges, row_batch, token_mask, num_singular_values=NUM_SV) for x in rows]
    _assert_equal_records(table, expected, ["norms.0", "norms.1", "norms.2"])


class Nested(nn.Module):
    """Norms inside norms (SepNorm's token and node norms, ContraNorm's LayerNorm), and one norm never called."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.first = ContraNorm(channels, layer_norm=True)
        self.conv = SAGEConv(channels, channels)
        self.second = SepNorm(channels, token_norm="batchnorm", node_norm=PairNorm(channels))
        self.unused = build_norm("layernorm", channels)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        token_mask = torch.zeros(x.size(0), dtype=torch.bool)
        token_mask[0] = True  # one graph, its first row a token
        x = self.first(x, edge_index=edge_index)
        return self.second(self.conv(x, edge_index), edge_index=edge_index, token_mask=token_mask)


def test_nested_norms_are_counted_once_and_uncalled_ones_left_out() -> None:
    model = Nested(6).double()
    assert [name for name, _ in graphnorm_norms(model)] == ["first", "second", "unused"]
    data = _graph(20, 40)
    table = CollapseProbe(model, num_singular_values=0).probe(data)
    assert list(table.drop_duplicates("layer").layer_name) == ["first", "second"]
    assert set(table[table.layer == 2].rows) == {"node", "token"} and set(table[table.layer == 1].rows) == {"node"}


def test_pyg_gcn_with_named_layers_takes_the_graphs_from_the_data() -> None:
    graphs = [_graph(n, 2 * n) for n in (8, 11, 6)]
    batch = Batch.from_data_list(graphs)
    model = GCN(6, 10, num_layers=3, out_channels=4).double()
    table = CollapseProbe(model, layers=model.convs, num_singular_values=NUM_SV).probe(batch)
    outputs: list[Tensor] = []
    handles = [conv.register_forward_hook(lambda _m, _a, out: outputs.append(out)) for conv in model.convs]
    model.eval()
    with torch.no_grad():
        model(batch.x, batch.edge_index)
    for handle in handles:
        handle.remove()
    expected = [collapse_records(x, batch.edge_index, batch.batch, num_singular_values=NUM_SV) for x in outputs]
    _assert_equal_records(table, expected, ["gcnconv1", "gcnconv2", "gcnconv3"])


def test_errors_say_what_to_pass() -> None:
    with pytest.raises(ValueError, match=r"no graphnorm norm.*collapse_layers.*layers=\[\.\.\.\]"):
        CollapseProbe(nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3)))

    class WholeBatch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = build_norm("pairnorm", 4)

        def forward(self, data: Data) -> Tensor:
            return self.norm(data.x)

    class TwoInputs(WholeBatch):
        def forward(self, data: Data, *, mask: Tensor) -> Tensor:
            return self.norm(data.x[mask])

    # a forward taking one batch object is called model(data); one the probe cannot call names forward=
    with pytest.raises(TypeError, match=r"TwoInputs\.forward\(data\b.*does not follow PyG's.*forward="):
        CollapseProbe(TwoInputs())
    data = Data(x=torch.randn(5, 4), edge_index=torch.tensor([[0, 1], [1, 0]]))
    expected = CollapseProbe(WholeBatch(), forward=lambda model, d: model(d)).probe(data)
    table = CollapseProbe(WholeBatch()).probe(data)
    assert list(table.drop_duplicates("layer").layer_name) == ["norm"]
    assert table.equals(expected)
    mask = torch.tensor([True, True, False, True, True])
    table = CollapseProbe(TwoInputs(), forward=lambda model, d: model(d, mask=mask)).probe(data)
    assert list(table.drop_duplicates("layer").layer_name) == ["norm"]
    with pytest.raises(TypeError, match="no x or edge_index.*forward="):
        CollapseProbe(Gin(6, 4, 1)).probe(SimpleNamespace(x=torch.randn(3, 6)))
    # A named layer on rows no norm saw and that are not data's nodes: the graphs of its rows are unknown.
    pool = nn.Linear(4, 4)
    probe = CollapseProbe(pool, layers=[("pool", pool)], forward=lambda model, d: model(d.x[:1]))
    with pytest.raises(ValueError, match="'pool' outputs 1 rows, but data has 5 nodes"):
        probe.probe(data)
