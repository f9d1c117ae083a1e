"""CollapseProbe on PyG's GCN (layers given) and on graphnorm's DeepGCN (collapse_layers / probe_context)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.nn.models import GCN

from graphnorm.analysis import CollapseProbe, collapse_metrics, evaluation_sample, probe_records
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
