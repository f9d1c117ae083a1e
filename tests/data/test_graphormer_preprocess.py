"""Graphormer preprocessing: shortest and edge paths against networkx, degenerate graphs, collate layout, cache."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from graphnorm.data.graphormer_preprocess import (
    GraphormerPreprocess,
    collate_graphormer,
    filter_max_nodes,
    preprocess_dataset,
    shortest_paths,
)

# Many tiny tensor ops: on a shared 2-core machine one intra-op thread is faster (see conftest).
pytestmark = pytest.mark.usefixtures("one_thread")


def random_graph(num_nodes: int, edge_prob: float, directed: bool, seed: int) -> Data:
    torch.manual_seed(seed)
    edge_index = erdos_renyi_graph(num_nodes, edge_prob, directed=directed)
    if not directed:
        edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    edge_index = edge_index[:, torch.randperm(edge_index.size(1))]  # edge ids in no particular order
    return Data(
        x=torch.randint(0, 5, (num_nodes, 1)),
        edge_index=edge_index,
        edge_attr=torch.randint(0, 3, (edge_index.size(1),)),
        y=torch.randn(1),
        num_nodes=num_nodes,
    )


def assert_valid_paths(graph: Data, hops: int) -> None:
    """spatial_pos equals networkx's hop distances; every edge path is the start of a shortest path i -> j."""
    n = graph.num_nodes
    spatial_pos = graph.spatial_pos.view(n, n)
    edge_path = graph.edge_path.view(n, n, hops)
    reference = nx.DiGraph()
    reference.add_nodes_from(range(n))
    reference.add_edges_from(graph.edge_index.t().tolist())
    lengths = dict(nx.all_pairs_shortest_path_length(reference))
    expected = torch.tensor([[lengths[i].get(j, -1) for j in range(n)] for i in range(n)])
    assert torch.equal(spatial_pos, expected)

    src, dst = graph.edge_index
    for i in range(n):
        for j in range(n):
            distance = int(expected[i, j])
            path = edge_path[i, j]
            kept = min(max(distance, 0), hops)
            assert (path[:kept] >= 0).all() and (path[kept:] == -1).all(), (i, j, distance, path)
            node = i
            for edge in path[:kept].tolist():
                assert int(src[edge]) == node, "hops must chain from i"
                nxt = int(dst[edge])
                assert int(expected[nxt, j]) == int(expected[node, j]) - 1, "each hop must get one closer to j"
                node = nxt
            if 0 < distance <= hops:
                assert node == j


@pytest.mark.parametrize("directed", [False, True])
def test_shortest_paths_match_networkx_on_random_graphs(directed: bool) -> None:
    hops = 3
    transform = GraphormerPreprocess(multi_hop_max_dist=hops)
    for seed, (num_nodes, edge_prob) in enumerate([(12, 0.15), (20, 0.1), (9, 0.4), (15, 0.05)]):
        graph = transform(random_graph(num_nodes, edge_prob, directed, seed))
        assert graph.spatial_pos.shape == (num_nodes * num_nodes,)
        assert graph.edge_path.shape == (num_nodes * num_nodes, hops)
        assert_valid_paths(graph, hops)
        assert torch.equal(graph.out_degree, torch.bincount(graph.edge_index[0], minlength=num_nodes))
        assert torch.equal(graph.in_degree, torch.bincount(graph.edge_index[1], minlength=num_nodes))


def test_long_paths_are_truncated_to_multi_hop_max_dist() -> None:
    # a path graph 0 - 1 - ... - 7: the pair (0, 7) is 7 hops apart, only the first 2 edges are kept
    chain = torch.arange(8)
    edge_index = to_undirected(torch.stack([chain[:-1], chain[1:]]))
    spatial_pos, edge_path = shortest_paths(edge_index, 8, multi_hop_max_dist=2)
    assert int(spatial_pos[0, 7]) == 7 and int(spatial_pos[7, 0]) == 7
    first, second = edge_path[0, 7].tolist()
    assert edge_index[:, first].tolist() == [0, 1] and edge_index[:, second].tolist() == [1, 2]
    assert edge_index[:, edge_path[7, 0, 0]].tolist() == [7, 6]


def test_batched_preprocessing_equals_one_graph_at_a_time() -> None:
    graphs = [random_graph(n, 0.2, False, seed) for seed, n in enumerate([3, 17, 1, 9, 25, 9, 4])]
    transform = GraphormerPreprocess(multi_hop_max_dist=4)
    batched = transform.process_many(graphs, pairs_per_chunk=300)  # small chunks: several sizes per run
    assert all(getattr(g, "spatial_pos", None) is None for g in graphs), "inputs must not be modified"
    for graph, result in zip(graphs, batched):
        single = transform(graph.clone())
        for key in ("spatial_pos", "edge_path", "in_degree", "out_degree"):
            assert torch.equal(result[key], single[key]), key


def test_single_atom_and_edgeless_graphs() -> None:
    transform = GraphormerPreprocess(multi_hop_max_dist=3)
    atom = transform(
        Data(x=torch.tensor([[4]]), edge_index=torch.empty(2, 0, dtype=torch.long), edge_attr=torch.empty(0).long())
    )
    assert atom.spatial_pos.tolist() == [0]
    assert atom.edge_path.tolist() == [[-1, -1, -1]]
    assert atom.in_degree.tolist() == [0] and atom.out_degree.tolist() == [0]

    isolated = transform(Data(x=torch.zeros(3, 1, dtype=torch.long), edge_index=torch.empty(2, 0, dtype=torch.long)))
    assert isolated.spatial_pos.view(3, 3).tolist() == [[0, -1, -1], [-1, 0, -1], [-1, -1, 0]]
    assert (isolated.edge_path == -1).all()

    batch = collate_graphormer([atom, isolated])
    assert batch.num_graphs == 2 and batch.max_nodes == 3
    assert batch.row_batch.tolist() == [0, 0, 1, 1, 1, 1]  # token + 1 node, token + 3 nodes
    assert batch.token_mask.tolist() == [True, False, True, False, False, False]
    assert batch.position_mask.tolist() == [[True, True, False, False], [True, True, True, True]]
    assert batch.edge_attr is None and batch.edge_index.shape == (2, 0) and batch.row_edge_index.shape == (2, 0)


def test_collate_layout_maps_rows_nodes_and_edges_consistently() -> None:
    transform = GraphormerPreprocess(multi_hop_max_dist=3)
    graphs = [transform(random_graph(n, 0.3, False, seed)) for seed, n in enumerate([5, 8, 2])]
    batch = collate_graphormer(graphs, multi_hop_max_dist=2)
    counts = [5, 8, 2]
    assert batch.spatial_pos.shape == (3, 8, 8) and batch.edge_path.shape == (3, 8, 8, 2)
    assert batch.x.shape == (15, 1) and batch.row_batch.numel() == 18
    assert batch.num_nodes_per_graph.tolist() == counts
    # node rows are exactly the non-token rows, in order; dense positions are (graph, 1 + local node)
    assert torch.equal(batch.node_rows, (~batch.token_mask).nonzero().view(-1))
    positions = 1 + batch.max_nodes
    assert torch.equal(batch.dense_index[batch.token_mask], torch.arange(3) * positions)
    assert torch.equal(batch.row_batch[batch.node_rows], batch.node_batch)
    assert torch.equal(batch.row_edge_index, batch.node_rows[batch.edge_index])
    # global edge ids along paths point at edges of the same graph, with the stored local ids shifted
    offset = 0
    edge_offset = 0
    for g, graph in enumerate(graphs):
        n = counts[g]
        local = graph.edge_path.view(n, n, 3)[..., :2]
        shifted = batch.edge_path[g, :n, :n]
        assert torch.equal(shifted, torch.where(local >= 0, local + edge_offset, local))
        assert (batch.edge_path[g, n:] == -1).all() and (batch.edge_path[g, :, n:] == -1).all()
        assert torch.equal(
            batch.edge_index[:, edge_offset : edge_offset + graph.edge_index.size(1)], graph.edge_index + offset
        )
        offset += n
        edge_offset += graph.edge_index.size(1)
    assert torch.equal(batch.y, torch.cat([g.y for g in graphs]))


def test_bad_input_gives_clear_errors() -> None:
    transform = GraphormerPreprocess(multi_hop_max_dist=2, max_nodes=4)
    big = random_graph(6, 0.3, False, 0)
    with pytest.raises(ValueError, match="6 nodes, more than max_nodes=4"):
        transform(big.clone())
    kept, dropped = filter_max_nodes([big, random_graph(3, 0.5, False, 1)], max_nodes=4)
    assert len(kept) == 1 and dropped == 1
    with pytest.raises(ValueError, match="more than max_nodes=4"):
        collate_graphormer([GraphormerPreprocess(2)(big.clone())], max_nodes=4)
    with pytest.raises(ValueError, match="lacks"):
        collate_graphormer([big])
    with pytest.raises(ValueError, match="node ids"):
        transform(Data(x=torch.zeros(2, 1), edge_index=torch.tensor([[0], [5]])))
    with pytest.raises(ValueError, match="at least one node"):
        transform(Data(x=torch.zeros(0, 1), edge_index=torch.empty(2, 0, dtype=torch.long)))
    with pytest.raises(ValueError, match="multi_hop_max_dist"):
        GraphormerPreprocess(multi_hop_max_dist=0)
    with pytest.raises(ValueError, match="preprocessed with 2 hops"):
        collate_graphormer([GraphormerPreprocess(2)(big.clone())], multi_hop_max_dist=3)
    with pytest.raises(ValueError, match="empty"):
        collate_graphormer([])


def test_preprocess_dataset_caches_and_reloads(tmp_path) -> None:
    graphs = [random_graph(n, 0.3, False, seed) for seed, n in enumerate([4, 7, 1, 5])]
    cache = tmp_path / "graphormer_cache.pt"
    first = preprocess_dataset(graphs, multi_hop_max_dist=3, cache_path=cache)
    assert cache.exists()
    stamp = cache.stat().st_mtime_ns
    second = preprocess_dataset(graphs, multi_hop_max_dist=3, cache_path=cache)
    assert cache.stat().st_mtime_ns == stamp, "a matching cache is loaded, not rewritten"
    for a, b in zip(first, second):
        for key in ("spatial_pos", "edge_path", "in_degree", "out_degree"):
            assert torch.equal(a[key], b[key])
    # a different hop count does not reuse the stale cache
    third = preprocess_dataset(graphs, multi_hop_max_dist=2, cache_path=cache)
    assert third[1].edge_path.shape == (49, 2)
    with pytest.raises(ValueError, match="max_nodes"):
        preprocess_dataset(graphs, multi_hop_max_dist=2, max_nodes=5, cache_path=cache)


def test_real_zinc_graphs_preprocess_to_valid_paths(data_root) -> None:
    from torch_geometric.datasets import ZINC

    from graphnorm.data.root import seed_from_mirror

    seed_from_mirror(data_root, "ZINC", ["raw/val.pickle"])
    dataset = ZINC(str(data_root / "ZINC"), subset=True, split="val")
    graphs = preprocess_dataset(dataset[:40], multi_hop_max_dist=5)
    for graph in graphs[:10]:
        assert_valid_paths(graph, 5)
    batch = collate_graphormer(graphs)
    assert batch.edge_attr.shape == (batch.edge_index.size(1), 1)
    assert int(batch.edge_attr.min()) >= 1 and int(batch.edge_attr.max()) <= 3  # ZINC bond types
