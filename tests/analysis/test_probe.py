"""CollapseProbe on PyG's GCN (layers given) and on graphnorm's DeepGCN (collapse_layers; its rows described by the
keywords its norms receive)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from record_tolerance import assert_close_records
from torch_geometric.data import Batch, Data
from torch_geometric.nn.models import GCN

from graphnorm.analysis import (
    CollapseProbe,
    collapse_metrics,
    collapse_records,
    collapse_records_layers,
    cone_angle,
    dirichlet_energy,
    effective_rank,
    evaluation_sample,
    mad,
    mean_cosine_similarity,
    probe_records,
    singular_values,
    stable_rank,
)
from graphnorm.analysis.collapse import LayerStream
from graphnorm.analysis.collapse.stream import _QUEUED_CHUNKS, _ROWS_KEY
from graphnorm.analysis.probe import TABLE_COLUMNS
from graphnorm.models import DeepGCN


def _random_graph(num_nodes: int, num_features: int = 8, num_edges: int = 60) -> Data:
    edge_index = torch.randint(0, num_nodes, (2, num_edges))
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    return Data(x=torch.randn(num_nodes, num_features), edge_index=edge_index, num_nodes=num_nodes)


def test_probe_pyg_gcn_matches_direct_metrics_and_restores_mode():
    data = _random_graph(40)
    model = GCN(8, 16, num_layers=4, out_channels=5)
    model.train()
    probe = CollapseProbe(model, layers=model.convs, num_singular_values=4)
    table = probe.probe(data)
    assert model.training  # train mode restored
    assert list(table.columns) == TABLE_COLUMNS
    assert sorted(table.layer.unique()) == [1, 2, 3, 4]
    assert set(table.rows) == {"node"} and set(table.stat) == {"value"}
    assert {"sv_000", "sv_003", "cone_angle", "dirichlet_energy"} <= set(table.metric)
    # The recorded value for a layer equals the metric of that layer's output, computed independently.
    with torch.no_grad():
        model.eval()
        hidden = model.convs[0](data.x, data.edge_index)
    expected = collapse_metrics(hidden, data.edge_index)
    first = table[table.layer == 1].set_index("metric").value
    for name in ("effective_rank", "mean_cosine", "cone_angle", "dirichlet_energy", "mad_neighbors"):
        assert first[name] == pytest.approx(expected[name], abs=1e-3 if name == "cone_angle" else 1e-9)
    assert probe.last_timing["forward_s"] >= 0 and probe.last_timing["metrics_s"] >= 0


def test_probe_requires_layers_for_plain_modules():
    with pytest.raises(ValueError, match="collapse_layers"):
        CollapseProbe(torch.nn.Linear(3, 3))


def test_probe_deep_gcn_node_level_shows_collapse_with_depth():
    data = _random_graph(60, num_edges=200)
    model = DeepGCN(8, 16, 3, num_layers=16, norm="none")
    records = probe_records(model, data, split="eval")
    json.dumps(records)  # the sweep stores them as JSON
    assert all(set(record) == set(TABLE_COLUMNS) | {"split"} for record in records)
    table = pd.DataFrame(records)
    assert table.layer_name.iloc[0] == "layer1" and table.layer.max() == 16
    cosine = table[table.metric == "mean_cosine"].set_index("layer").value
    # A plain deep GCN oversmooths: rows align with depth.
    assert cosine[15] > cosine[1]
    assert cosine[15] > 0.9


def test_probe_deep_gcn_graph_level_with_virtual_node():
    graphs = [_random_graph(n, num_edges=2 * n) for n in (6, 9, 11, 7)]
    batch = Batch.from_data_list(graphs)
    model = DeepGCN(8, 16, 1, num_layers=3, readout="mean", virtual_node=True)
    table = CollapseProbe(model, num_singular_values=0).probe(batch)
    assert set(table.rows) == {"node", "token"}
    assert {"mean", "std", "pooled"} <= set(table.stat)
    tokens = table[(table.rows == "token") & (table.metric == "effective_rank")]
    assert len(tokens) == 3  # one token set per layer
    # Per-graph means do not depend on which other graphs share the batch: probe graph 0 alone.
    alone = CollapseProbe(model, num_singular_values=0).probe(Batch.from_data_list(graphs[:1]))
    first_alone = alone[(alone.layer == 2) & (alone.rows == "node") & (alone.stat == "mean")].set_index("metric")
    first_all = table[(table.layer == 2) & (table.rows == "node") & (table.stat == "mean")].set_index("metric")
    assert not math.isclose(first_all.value["effective_rank"], first_alone.value["effective_rank"])
    # ... but a batch made of copies of graph 0 gives graph 0's values as the mean and std 0.
    copies = CollapseProbe(model, num_singular_values=0).probe(Batch.from_data_list([graphs[0]] * 3))
    first_copies = copies[(copies.layer == 2) & (copies.rows == "node")].set_index(["metric", "stat"]).value
    assert first_copies["effective_rank", "mean"] == pytest.approx(first_alone.value["effective_rank"], rel=1e-9)
    assert first_copies["effective_rank", "std"] == pytest.approx(0.0, abs=1e-9)


def test_evaluation_sample_is_fixed():
    dataset = [_random_graph(5 + i % 4, num_edges=8) for i in range(20)]
    first = evaluation_sample(dataset, num_graphs=6, seed=1)
    again = evaluation_sample(dataset, num_graphs=6, seed=1)
    assert first.num_graphs == 6 and torch.equal(first.x, again.x)
    with pytest.raises(ValueError, match="num_graphs"):
        evaluation_sample(dataset, num_graphs=0)


@pytest.mark.slow
def test_probe_64_layer_gcn_on_cora_timing(data_root):
    from graphnorm.data.datasets import load_dataset

    task = load_dataset("cora", root=data_root)
    model = DeepGCN(task.num_features, 64, task.num_outputs, num_layers=64)
    probe = CollapseProbe(model)
    table = probe.probe(task.data)
    assert table.layer.max() == 64
    # Report, do not assert, the time (shared CI machines vary too much).
    print(f"\nprobe of 64-layer GCN on Cora: {probe.last_timing}")


def _reference_values(x: torch.Tensor, edge_index: torch.Tensor, cone_tol_deg: float) -> dict[str, float]:
    """The per-layer reference functions of graphnorm.analysis.metrics / cone on one layer's output."""
    return {
        "effective_rank": effective_rank(x),
        "stable_rank": stable_rank(x),
        "mean_cosine": mean_cosine_similarity(x),
        "cone_angle": cone_angle(x, tol_deg=cone_tol_deg),
        "mad": mad(x),
        "mad_neighbors": mad(x, edge_index),
        "dirichlet_energy": dirichlet_energy(x, edge_index),
        "dirichlet_energy_normalized": dirichlet_energy(x, edge_index, normalized=True),
    }


@pytest.mark.parametrize("norm", ["none", "pairnorm"])
def test_stacked_fast_path_equals_reference_functions_on_every_layer(norm):
    """collapse_records_layers (the probe's stacked path) against the one-layer reference functions, float64.
    Layers of a 24-layer GCN go from spread to collapsed; pairnorm centres rows (cone angle 90 by certificate);
    one layer has zero rows; the output layer has another width (its own stack)."""
    data = _random_graph(300, num_features=8, num_edges=900)
    model = DeepGCN(8, 16, 3, num_layers=24, norm=norm).double()
    probe = CollapseProbe(model)
    outputs = probe.capture(Data(x=data.x.double(), edge_index=data.edge_index, num_nodes=300))
    context = probe.last_contexts[0]
    assert context["batch"] is None and context["token_mask"] is None  # one graph
    outputs[5] = outputs[5].clone()
    outputs[5][::7] = 0.0
    tol = 1e-3
    edge_index = context["edge_index"]
    per_layer = collapse_records_layers(outputs, edge_index=edge_index, num_singular_values=4, cone_tol_deg=tol)
    assert len(per_layer) == len(outputs)
    for position, (x, records) in enumerate(zip(outputs, per_layer)):
        values = {record["metric"]: record["value"] for record in records}
        assert {record["stat"] for record in records} == {"value"}
        for name, expected in _reference_values(x, context["edge_index"], tol).items():
            if name == "cone_angle":
                # Same algorithm on the same unit rows: equal up to round-off, and both certified within tol.
                assert values[name] == pytest.approx(expected, abs=1e-8), (position, name)
            else:
                assert values[name] == pytest.approx(expected, rel=1e-8, abs=1e-12), (position, name)
        sigma = singular_values(x, normalize="max")
        for index in range(min(4, x.size(1))):
            assert values[f"sv_{index:03d}"] == pytest.approx(float(sigma[index]), rel=1e-8, abs=1e-12)
        zero_fraction = float((x.norm(dim=1) == 0).double().mean())
        assert values["zero_row_fraction"] == pytest.approx(zero_fraction)
        # And the single-layer entry point agrees with the stacked one.
        single_records = collapse_records(x, edge_index, num_singular_values=4, cone_tol_deg=tol)
        single = {(r["metric"], r["stat"]): r["value"] for r in single_records}
        stacked = {(r["metric"], r["stat"]): r["value"] for r in records}
        assert single.keys() == stacked.keys()
        for key, value in single.items():
            assert stacked[key] == pytest.approx(value, rel=1e-10, abs=1e-12, nan_ok=True), key


def test_stacked_fast_path_graph_level_equals_per_graph_reference():
    """Batched probe of a virtual-node DeepGCN: per-graph mean / std equal the reference functions run on each
    graph's node rows alone; token rows equal the reference on the token set; directed edges handled too."""
    graphs = [_random_graph(n, num_edges=2 * n) for n in (6, 9, 11, 7, 14)]
    graphs[2].edge_index = graphs[2].edge_index[:, : graphs[2].edge_index.size(1) // 2]  # one directed graph
    model = DeepGCN(8, 16, 1, num_layers=6, readout="mean", virtual_node=True, norm="layernorm").double()
    model.eval()
    data = Batch.from_data_list([Data(x=g.x.double(), edge_index=g.edge_index, num_nodes=g.num_nodes) for g in graphs])
    probe = CollapseProbe(model)
    outputs = probe.capture(data)
    context = probe.last_contexts[0]
    assert all(other is context for other in probe.last_contexts)  # every layer over the same rows
    tol = 1e-3
    per_layer = collapse_records_layers(outputs, cone_tol_deg=tol, num_singular_values=0, **context)
    token_mask, row_batch, edge_index = context["token_mask"], context["batch"], context["edge_index"]
    for x, records in zip(outputs, per_layer):
        table = {(r["rows"], r["metric"], r["stat"]): r["value"] for r in records}
        per_graph: dict[str, list[float]] = {}
        for graph in range(len(graphs)):
            keep = (row_batch == graph) & ~token_mask
            index = torch.full((x.size(0),), -1, dtype=torch.long)
            index[keep] = torch.arange(int(keep.sum()))
            edges = index[edge_index[:, keep[edge_index[0]] & keep[edge_index[1]]]]
            for name, value in _reference_values(x[keep], edges, tol).items():
                per_graph.setdefault(name, []).append(value)
        for name, values in per_graph.items():
            array = np.array(values)
            assert table["node", name, "mean"] == pytest.approx(array.mean(), rel=1e-8, abs=1e-10), name
            assert table["node", name, "std"] == pytest.approx(array.std(), rel=1e-6, abs=1e-8), name
        tokens = x[token_mask]
        assert table["token", "effective_rank", "value"] == pytest.approx(effective_rank(tokens), rel=1e-8)
        assert table["token", "cone_angle", "value"] == pytest.approx(cone_angle(tokens, tol_deg=tol), abs=1e-8)
        assert table["node", "effective_rank", "pooled"] == pytest.approx(effective_rank(x[~token_mask]), rel=1e-8)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_background_probe_gives_the_same_records_and_follows_the_thread_count(precision, monkeypatch):
    """background=True (metrics on a second thread beside the forward) and False give the same records up to
    round-off, in either precision and for a float64 model; the default follows torch's thread count, read before the
    probe's forward sets one thread."""
    torch.manual_seed(0)
    data = _random_graph(300, num_edges=900)
    model = DeepGCN(8, 16, 3, num_layers=24, norm="pairnorm")
    monkeypatch.setattr("graphnorm.analysis.collapse.staging._CHUNK_BYTES", 2 * 8 * 7 * 300 * 16)  # chunks of 2 layers
    for dtype in (torch.float32, torch.float64):
        model, data.x = model.to(dtype), data.x.to(dtype)
        here = CollapseProbe(model, background=False, precision=precision).probe_records(data)
        beside = CollapseProbe(model, background=True, precision=precision).probe_records(data)
        # The same kernels on another thread, which may run under another thread count: round-off apart.
        assert_close_records(beside, here, (precision, dtype))
    seen = []
    monkeypatch.setattr(
        "graphnorm.analysis.probe.LayerStream",
        lambda *args, background, **kwargs: seen.append(background) or LayerStream(*args, **kwargs),
    )
    previous = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            CollapseProbe(model).probe_records(data)
    finally:
        torch.set_num_threads(previous)
    assert seen == [False, True]
    with pytest.raises(TypeError, match="background must be True, False or None"):
        CollapseProbe(model, background="yes")


def test_background_probe_stops_its_thread_when_the_forward_fails():
    import threading

    model = DeepGCN(8, 16, 3, num_layers=6, norm="pairnorm")
    data = _random_graph(50)
    data.x[3, 2] = math.nan
    before = {thread.name for thread in threading.enumerate()}
    with pytest.raises(ValueError, match="NaN or Inf"):
        CollapseProbe(model, background=True).probe_records(data)
    assert not [t for t in threading.enumerate() if t.name.startswith("graphnorm-probe") and t.name not in before]


@pytest.mark.parametrize("background", [False, True])
def test_probe_reuses_its_row_buffers_between_calls(background: bool):
    """A later probe takes the earlier ones' row buffers from the probe's pool, same records. On one thread it needs
    no others; with the second thread, how many chunks wait for it at once (each in its own buffers) depends on timing,
    so a later call may add buffers, but never drops one and never holds more than a stream can use at once (the
    chunk being filled and _QUEUED_CHUNKS waiting)."""
    torch.manual_seed(0)
    data = _random_graph(200, num_edges=500)
    probe = CollapseProbe(DeepGCN(8, 16, 3, num_layers=12, norm="pairnorm"), background=background)
    first = probe.probe_records(data)

    def buffer_ids() -> dict[tuple, set[int]]:
        return {key: {id(b) for b in values} for key, values in probe._pool.items() if key != _ROWS_KEY}

    pooled = buffer_ids()
    assert pooled and all(pooled.values())
    for _ in range(3):
        assert probe.probe_records(data) == first
        now = buffer_ids()
        assert now.keys() == pooled.keys()
        for key, ids in pooled.items():
            assert ids <= now[key] if background else ids == now[key]
            assert len(now[key]) <= 1 + _QUEUED_CHUNKS
        pooled = now


def test_probe_keeps_the_edge_structure_of_the_same_graph_between_calls():
    """A second probe of the same graph reuses the first one's edge structure; a graph with other edges (here the
    same tensor changed in place) gets its own, with the records of a fresh probe."""
    torch.manual_seed(0)
    data = _random_graph(200, num_edges=500)
    model = DeepGCN(8, 16, 3, num_layers=6, norm="pairnorm")
    probe = CollapseProbe(model, background=True)
    first = probe.probe_records(data)
    rows = probe._pool[_ROWS_KEY][1]
    assert probe.probe_records(data) == first
    assert probe._pool[_ROWS_KEY][1] is rows
    data.edge_index[1] = data.edge_index[1].roll(1)  # other edges, same tensor
    changed = probe.probe_records(data)
    assert probe._pool[_ROWS_KEY][1] is not rows
    assert changed == CollapseProbe(model, background=True).probe_records(data)
    assert changed != first


def test_probe_leaves_a_model_in_eval_mode_unwalked():
    """A model in eval mode throughout is probed as it is (no eval()/train() walk over its modules on every call);
    a model in train mode is put in eval mode for the probe and back after."""
    model = DeepGCN(8, 16, 3, num_layers=3, norm="pairnorm")
    calls = []
    original_train = model.train
    model.train = lambda mode=True: calls.append(mode) or original_train(mode)
    data = _random_graph(40)
    model.eval()
    calls.clear()
    CollapseProbe(model).probe(data)
    assert calls == [] and not model.training
    original_train(True)
    CollapseProbe(model).probe(data)
    assert calls == [False, True] and model.training
