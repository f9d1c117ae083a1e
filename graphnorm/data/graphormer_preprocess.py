"""Graphormer's inputs: shortest-path distances, edge paths and degrees per graph, and the padded batch collate.

Follows Ying et al., "Do Transformers Really Perform Bad for Graph Representation?" (NeurIPS 2021) and the data
pipeline of microsoft/Graphormer (``algos.pyx``, ``wrapper.py``, ``collator.py``), written anew:
:class:`GraphormerPreprocess` adds the per-graph tensors (a PyG transform; :func:`shortest_paths_padded` computes
them for many graphs at once), :func:`preprocess_dataset` runs it over a dataset once and caches the result, and
:func:`collate_graphormer` turns preprocessed graphs into a :class:`GraphormerBatch`: the dense per-pair inputs of
the attention bias and the row layout (:mod:`graphnorm.data.token_rows`) that the model and the norms use.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from graphnorm.checks import check_edge_index
from graphnorm.data.token_rows import token_row_layout
from graphnorm.files import atomic_write
from graphnorm.threads import single_thread

UNREACHABLE = -1  # spatial_pos value of pairs with no path
NO_EDGE = -1  # edge_path value past the end of a path
PAIR_KEYS = ("spatial_pos", "edge_path", "in_degree", "out_degree")
CACHE_CHECK_KEYS = ("multi_hop_max_dist", "node_counts", "edge_counts")  # what a cache was made for


def _check_graph(data: Data, where: str) -> tuple[int, Tensor]:
    """Validate ``num_nodes`` and ``edge_index``; return them (edge_index as long, possibly ``[2, 0]``)."""
    num_nodes = data.num_nodes
    if num_nodes is None or num_nodes < 1:
        raise ValueError(f"{where}: a graph needs at least one node, got num_nodes={num_nodes}")
    edge_index = data.edge_index
    if edge_index is None:
        edge_index = torch.empty(2, 0, dtype=torch.long)
    check_edge_index(edge_index, num_nodes, where=where)
    return int(num_nodes), edge_index.long()


def shortest_paths_padded(
    edge_indices: Sequence[Tensor], node_counts: Sequence[int], multi_hop_max_dist: int
) -> tuple[Tensor, Tensor]:
    """Hop distances and edge paths of several graphs at once, padded to ``N = max(node_counts)``.

    Breadth-first search as repeated boolean matrix products on the dense adjacency ``[B, N, N]``, then a
    vectorized forward walk along "next hop" pointers: loops run over hops only, never over node pairs.

    Returns ``spatial_pos`` ``[B, N, N]`` (hops ``i -> j``, ``-1`` unreachable) and ``edge_path``
    ``[B, N, N, multi_hop_max_dist]``: ``edge_path[b, i, j, k]`` is the column of graph ``b``'s ``edge_index``
    holding hop ``k`` of one shortest path ``i -> j`` (counted from ``i``), ``-1`` past its end. Of several
    shortest paths, the one taking the lowest-numbered next node at every step. Directed edges are respected;
    self-loops are ignored; of parallel edges one id is kept.
    """
    num_graphs, n = len(node_counts), max(node_counts)
    edge_counts = [int(e.size(1)) for e in edge_indices]
    graph_of_edge = torch.repeat_interleave(torch.arange(num_graphs), torch.tensor(edge_counts, dtype=torch.long))
    src, dst = torch.cat([e.long() for e in edge_indices], dim=1) if edge_indices else torch.empty(2, 0)
    local_edge_id = torch.cat([torch.arange(c) for c in edge_counts])
    keep = src != dst
    graph_of_edge, src, dst, local_edge_id = graph_of_edge[keep], src[keep], dst[keep], local_edge_id[keep]

    adjacency = torch.zeros(num_graphs, n, n, dtype=torch.bool)
    adjacency[graph_of_edge, src, dst] = True
    edge_id_of = torch.full((num_graphs, n, n), NO_EDGE, dtype=torch.long)  # [B, N, N] edge id of i -> j
    edge_id_of[graph_of_edge, src, dst] = local_edge_id

    # BFS for all sources at once: reach[b, i, j] = j within d hops of i.
    reach = torch.eye(n, dtype=torch.bool).expand(num_graphs, n, n).clone()
    dist = torch.where(reach, 0, UNREACHABLE)  # [B, N, N]
    adjacency_float = adjacency.float()
    for hops in range(1, n):
        grown = reach | (torch.bmm(reach.float(), adjacency_float) > 0)
        newly = grown & ~reach
        if not newly.any():
            break
        dist[newly] = hops
        reach = grown

    # next_hop[b, i, j]: lowest-numbered neighbour u of i with dist(u, j) = dist(i, j) - 1 (where dist(i, j) > 0),
    # found edge by edge: [num_edges, N] work instead of [B, N, N, N].
    dist_from_src = dist[graph_of_edge, src]  # [E, N]: dist(i, j) for the edge's source i
    on_shortest_path = (dist[graph_of_edge, dst] == dist_from_src - 1) & (dist_from_src > 0)  # [E, N]
    candidate = torch.where(on_shortest_path, dst[:, None], n)  # n = "none"
    next_hop = torch.full((num_graphs * n * n,), n, dtype=torch.long)
    pair = ((graph_of_edge * n + src)[:, None] * n + torch.arange(n)[None, :]).reshape(-1)  # flat (b, i, j)
    next_hop = next_hop.scatter_reduce(0, pair, candidate.reshape(-1), "amin").view(num_graphs, n, n)
    next_hop = next_hop.clamp(max=n - 1)  # "none" only where dist(i, j) <= 0, never followed

    batch_index = torch.arange(num_graphs)[:, None, None]
    target = torch.arange(n)[None, None, :]
    current = torch.arange(n)[None, :, None].expand(num_graphs, n, n)  # walker, starts at i
    edge_path = torch.full((num_graphs, n, n, multi_hop_max_dist), NO_EDGE, dtype=torch.long)
    for hop in range(multi_hop_max_dist):
        walking = dist[batch_index, current, target] > 0  # not yet at j (and j reachable)
        if not walking.any():
            break
        step = next_hop[batch_index, current, target]
        edge_path[..., hop] = torch.where(walking, edge_id_of[batch_index, current, step], NO_EDGE)
        current = torch.where(walking, step, current)
    return dist, edge_path


def shortest_paths(edge_index: Tensor, num_nodes: int, multi_hop_max_dist: int) -> tuple[Tensor, Tensor]:
    """One graph's ``spatial_pos`` ``[n, n]`` and ``edge_path`` ``[n, n, multi_hop_max_dist]``
    (see :func:`shortest_paths_padded`)."""
    dist, edge_path = shortest_paths_padded([edge_index], [num_nodes], multi_hop_max_dist)
    return dist[0], edge_path[0]


class GraphormerPreprocess(BaseTransform):
    """Add Graphormer's per-graph inputs to a ``Data`` (a PyG ``BaseTransform``: as ``transform`` or
    ``pre_transform``), computed by batched breadth-first search and vectorized path recovery:

    - ``spatial_pos`` ``[n * n]`` long: hop distance from ``i`` to ``j`` at ``i * n + j``, ``-1`` when unreachable;
    - ``edge_path`` ``[n * n, multi_hop_max_dist]`` long: ids (columns of ``edge_index``) of the first
      ``multi_hop_max_dist`` edges of one shortest path ``i -> j``, in order from ``i``; ``-1`` past the path's end;
    - ``in_degree`` / ``out_degree`` ``[n]`` long.

    The pair tensors are flat so that PyG's ``InMemoryDataset`` can concatenate and slice them like node features;
    :func:`collate_graphormer` reshapes them to ``[n, n]``.

    Args:
        multi_hop_max_dist: number of path edges kept per pair (the edge encoding's hops).
        max_nodes: graphs with more nodes raise ``ValueError`` (the dense ``[n, n]`` inputs grow quadratically);
            ``None`` for no limit. Use :func:`filter_max_nodes` to drop them explicitly, with a count.

    Raises:
        ValueError: ``multi_hop_max_dist`` or ``max_nodes`` is not a positive integer; when called, a graph without
            nodes, with a malformed ``edge_index``, or above ``max_nodes``.
        TypeError: ``edge_index`` is not an integer tensor.
    """

    def __init__(self, multi_hop_max_dist: int = 5, max_nodes: int | None = None) -> None:
        if not isinstance(multi_hop_max_dist, int) or multi_hop_max_dist < 1:
            raise ValueError(f"multi_hop_max_dist must be a positive integer, got {multi_hop_max_dist!r}")
        if max_nodes is not None and max_nodes < 1:
            raise ValueError(f"max_nodes must be a positive integer or None, got {max_nodes!r}")
        self.multi_hop_max_dist = multi_hop_max_dist
        self.max_nodes = max_nodes

    def check(self, data: Data) -> tuple[int, Tensor]:
        """Validate one graph (nodes, edge_index, ``max_nodes``); return its node count and ``edge_index``."""
        num_nodes, edge_index = _check_graph(data, "GraphormerPreprocess")
        if self.max_nodes is not None and num_nodes > self.max_nodes:
            raise ValueError(
                f"GraphormerPreprocess: graph has {num_nodes} nodes, more than max_nodes={self.max_nodes}; "
                "raise max_nodes or drop such graphs with filter_max_nodes()"
            )
        return num_nodes, edge_index

    def attach(self, data: Data, num_nodes: int, edge_index: Tensor, spatial_pos: Tensor, edge_path: Tensor) -> Data:
        """Store one checked graph's ``[n, n]`` results (padding cropped) flat on ``data``, plus its degrees."""
        data.spatial_pos = spatial_pos[:num_nodes, :num_nodes].reshape(-1)  # [n * n]
        hops = self.multi_hop_max_dist
        data.edge_path = edge_path[:num_nodes, :num_nodes].reshape(num_nodes * num_nodes, hops)  # [n * n, hops]
        data.out_degree = torch.bincount(edge_index[0], minlength=num_nodes)  # [n]
        data.in_degree = torch.bincount(edge_index[1], minlength=num_nodes)  # [n]
        return data

    def forward(self, data: Data) -> Data:
        num_nodes, edge_index = self.check(data)
        spatial_pos, edge_path = shortest_paths(edge_index, num_nodes, self.multi_hop_max_dist)
        return self.attach(data, num_nodes, edge_index, spatial_pos, edge_path)

    def process_many(self, graphs: Sequence[Data], pairs_per_chunk: int = 1 << 15) -> list[Data]:
        """Preprocess many graphs (copies; the inputs are not modified) in padded chunks of similar size.

        ``pairs_per_chunk`` bounds ``chunk_size * N**2`` (memory of a chunk's padded ``[B, N, N]`` tensors).
        """
        # Thousands of tiny tensor ops: intra-op threads only add dispatch and wake-up cost (several times the CPU
        # time of one thread), so run single-threaded and restore.
        with single_thread():
            checked = [self.check(g) for g in graphs]
            order = sorted(range(len(graphs)), key=lambda i: checked[i][0])  # similar sizes pad little
            out: list[Data | None] = [None] * len(graphs)
            start = 0
            while start < len(order):
                stop = start + 1
                while stop < len(order) and (stop + 1 - start) * checked[order[stop]][0] ** 2 <= pairs_per_chunk:
                    stop += 1
                chunk = order[start:stop]
                dist, edge_path = shortest_paths_padded(
                    [checked[i][1] for i in chunk], [checked[i][0] for i in chunk], self.multi_hop_max_dist
                )
                for position, index in enumerate(chunk):
                    num_nodes, edge_index = checked[index]
                    out[index] = self.attach(
                        copy.copy(graphs[index]), num_nodes, edge_index, dist[position], edge_path[position]
                    )
                start = stop
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(multi_hop_max_dist={self.multi_hop_max_dist}, max_nodes={self.max_nodes})"


def filter_max_nodes(graphs: Sequence[Data], max_nodes: int) -> tuple[list[Data], int]:
    """Keep the graphs with at most ``max_nodes`` nodes; return them and how many were dropped (report it)."""
    kept = [g for g in graphs if g.num_nodes <= max_nodes]
    return kept, len(graphs) - len(kept)


def preprocess_dataset(
    dataset: Sequence[Data],
    multi_hop_max_dist: int = 5,
    max_nodes: int | None = None,
    cache_path: str | os.PathLike | None = None,
) -> list[Data]:
    """Preprocess every graph of ``dataset`` once; return an in-memory list of preprocessed ``Data``.

    With ``cache_path`` the results are saved there (plain tensors, ``torch.save``) and reused on the next call
    when they were made for the same graphs (same count, node and edge counts) and the same ``multi_hop_max_dist``.
    Put the cache next to the dataset's processed files, e.g. ``Path(dataset.processed_dir) / "graphormer_train.pt"``.
    The cache is written atomically (processes that write it at once never read a partial file); an unreadable
    cache is recomputed and an unwritable one skipped, each with a warning naming the file.
    """
    transform = GraphormerPreprocess(multi_hop_max_dist, max_nodes)
    graphs = [dataset[i] for i in range(len(dataset))]
    node_counts = torch.tensor([g.num_nodes for g in graphs], dtype=torch.long)
    edge_counts = torch.tensor([0 if g.edge_index is None else g.edge_index.size(1) for g in graphs], dtype=torch.long)

    cached = _read_cache(cache_path)
    if cached is not None and _cache_matches(cached, multi_hop_max_dist, node_counts, edge_counts):
        if max_nodes is not None and len(graphs) > 0 and int(node_counts.max()) > max_nodes:
            transform(graphs[int(node_counts.argmax())].clone())  # raises the max_nodes error
        return _attach_cached(graphs, cached, node_counts)

    out = transform.process_many(graphs)
    if cache_path is not None:
        if not out:
            raise ValueError("preprocess_dataset: the dataset is empty; nothing to cache")
        payload = {key: torch.cat([g[key] for g in out]) for key in PAIR_KEYS}
        payload.update(
            multi_hop_max_dist=torch.tensor(multi_hop_max_dist), node_counts=node_counts, edge_counts=edge_counts
        )
        _write_cache(Path(cache_path), payload)
    return out


def _read_cache(cache_path: str | os.PathLike | None) -> dict[str, Tensor] | None:
    """The cached tensors (``weights_only=True``: tensors only, never code), or None when absent or unreadable."""
    if cache_path is None or not Path(cache_path).exists():
        return None
    try:
        cached = torch.load(cache_path, weights_only=True)
        if isinstance(cached, dict) and all(key in cached for key in (*PAIR_KEYS, *CACHE_CHECK_KEYS)):
            return cached
        reason = "not a Graphormer cache"
    except Exception as error:
        reason = f"torch.load raised {type(error).__name__}"
    warnings.warn(f"ignoring the unreadable Graphormer cache {cache_path} ({reason}); recomputing it", stacklevel=3)
    return None


def _cache_matches(cached: dict[str, Tensor], hops: int, node_counts: Tensor, edge_counts: Tensor) -> bool:
    """Whether the cache was made for these graphs (node and edge counts) with this many hops."""
    return (
        int(cached["multi_hop_max_dist"]) == hops
        and torch.equal(cached["node_counts"], node_counts)
        and torch.equal(cached["edge_counts"], edge_counts)
    )


def _attach_cached(graphs: list[Data], cached: dict[str, Tensor], node_counts: Tensor) -> list[Data]:
    """Copies of ``graphs`` carrying their slices of the cached per-graph tensors."""
    pair_sizes = (node_counts * node_counts).tolist()
    node_sizes = node_counts.tolist()
    per_key = {
        "spatial_pos": cached["spatial_pos"].split(pair_sizes),
        "edge_path": cached["edge_path"].split(pair_sizes),
        "in_degree": cached["in_degree"].split(node_sizes),
        "out_degree": cached["out_degree"].split(node_sizes),
    }
    out = []
    for index, graph in enumerate(graphs):
        graph = graph.clone()
        for key in PAIR_KEYS:
            graph[key] = per_key[key][index]
        out.append(graph)
    return out


def _write_cache(path: Path, payload: dict[str, Tensor]) -> None:
    """Save by :func:`graphnorm.files.atomic_write`: readers see the old cache, the new one or none, never a
    partial one. A cache that cannot be written (read-only or full data root) only costs the recomputation next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda handle: torch.save(payload, handle))
    except (OSError, RuntimeError) as error:  # on a full disk torch's zip writer raises RuntimeError
        reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
        warnings.warn(f"could not write the Graphormer cache {path} ({reason}); continuing without it", stacklevel=3)


@dataclass
class GraphormerBatch:
    """A padded Graphormer mini-batch. ``B`` graphs, ``N`` = most nodes in a graph, ``T = 1 + N`` positions
    (the virtual graph token first), ``R`` = token + node rows of all graphs (node-major, graph by graph).

    Node-major inputs (all nodes of all graphs, graph by graph):
        x ``[num_nodes, atom_features]`` long; in_degree / out_degree ``[num_nodes]``; node_batch ``[num_nodes]``;
        edge_index ``[2, num_edges]`` (global node ids); edge_attr ``[num_edges, bond_features]`` long or ``None``.
    Dense per-pair inputs of the attention bias:
        spatial_pos ``[B, N, N]`` (hops, ``-1`` unreachable or padding);
        edge_path ``[B, N, N, hops]`` (global edge ids, ``-1`` none);
        position_mask ``[B, T]`` True at real positions (token and nodes).
    Row layout (what the norms and probes see):
        row_batch ``[R]`` graph of each row; token_mask ``[R]``; row_edge_index ``[2, num_edges]`` (edges in row ids);
        node_rows ``[num_nodes]`` row of each node; dense_index ``[R]`` flat position of each row in ``[B * T]``.
    """

    x: Tensor
    in_degree: Tensor
    out_degree: Tensor
    node_batch: Tensor
    edge_index: Tensor
    edge_attr: Tensor | None
    spatial_pos: Tensor
    edge_path: Tensor
    position_mask: Tensor
    row_batch: Tensor
    token_mask: Tensor
    row_edge_index: Tensor
    node_rows: Tensor
    dense_index: Tensor
    num_nodes_per_graph: Tensor
    y: Tensor | None

    @property
    def num_graphs(self) -> int:
        """``B``, the graphs in the batch."""
        return self.position_mask.size(0)

    @property
    def max_nodes(self) -> int:
        """``N``, the most nodes in one of the batch's graphs."""
        return self.spatial_pos.size(1)

    def to(self, device: torch.device | str) -> GraphormerBatch:
        """A copy with every tensor on ``device``."""
        moved = {
            f.name: (getattr(self, f.name).to(device) if getattr(self, f.name) is not None else None)
            for f in fields(self)
        }
        return GraphormerBatch(**moved)


def check_collatable(
    graphs: Sequence[Data], multi_hop_max_dist: int | None, max_nodes: int | None
) -> tuple[list[int], int]:
    """(node count of every graph, hops to keep) for :func:`collate_graphormer`, after checking that every graph was
    preprocessed, fits ``max_nodes`` and stores at least ``multi_hop_max_dist`` hops."""
    if len(graphs) == 0:
        raise ValueError("collate_graphormer: got an empty list of graphs")
    node_counts: list[int] = []
    for index, graph in enumerate(graphs):
        missing = [key for key in PAIR_KEYS if getattr(graph, key, None) is None]
        if missing:
            raise ValueError(
                f"collate_graphormer: graph {index} lacks {missing}; preprocess it with GraphormerPreprocess "
                "(as transform / pre_transform) or preprocess_dataset()"
            )
        n, _ = _check_graph(graph, f"collate_graphormer (graph {index})")
        if max_nodes is not None and n > max_nodes:
            raise ValueError(f"collate_graphormer: graph {index} has {n} nodes, more than max_nodes={max_nodes}")
        if graph.spatial_pos.numel() != n * n:
            raise ValueError(
                f"collate_graphormer: graph {index} has {n} nodes but spatial_pos has {graph.spatial_pos.numel()} "
                f"entries (expected {n * n}); was it preprocessed before a transform changed the graph?"
            )
        node_counts.append(n)
    stored_hops = min(int(g.edge_path.size(-1)) for g in graphs)
    hops = stored_hops if multi_hop_max_dist is None else multi_hop_max_dist
    if hops > stored_hops:
        raise ValueError(
            f"collate_graphormer: multi_hop_max_dist={hops} but the graphs were preprocessed with {stored_hops} hops"
        )
    return node_counts, hops


def pack_graphs(graphs: Sequence[Data], node_counts: list[int], hops: int) -> dict[str, Tensor | None]:
    """The padded pair tensors (``spatial_pos``, ``edge_path`` with global edge ids) and the concatenated node and
    edge tensors (``x``, ``edge_index`` with global node ids, ``edge_attr``) of ``graphs``."""
    num_graphs, max_n = len(graphs), max(node_counts)
    counts = torch.tensor(node_counts, dtype=torch.long)
    node_offsets = torch.cumsum(counts, 0) - counts  # [B] first global node id of each graph
    edge_counts = [g.edge_index.size(1) if g.edge_index is not None else 0 for g in graphs]
    edge_offsets = torch.cumsum(torch.tensor(edge_counts, dtype=torch.long), 0) - torch.tensor(edge_counts)
    spatial_pos = torch.full((num_graphs, max_n, max_n), UNREACHABLE, dtype=torch.long)
    edge_path = torch.full((num_graphs, max_n, max_n, hops), NO_EDGE, dtype=torch.long)
    edge_index_parts, edge_attr_parts, x_parts = [], [], []
    for g, graph in enumerate(graphs):
        n = node_counts[g]
        spatial_pos[g, :n, :n] = graph.spatial_pos.view(n, n)
        path = graph.edge_path.view(n, n, -1)[..., :hops]
        edge_path[g, :n, :n] = torch.where(path >= 0, path + edge_offsets[g], path)
        if graph.x is None:
            raise ValueError(f"collate_graphormer: graph {g} has no node features x")
        x_parts.append(graph.x.view(n, -1).long())
        if edge_counts[g] == 0:
            continue
        edge_index_parts.append(graph.edge_index.long() + node_offsets[g])
        if graph.edge_attr is not None:
            edge_attr_parts.append(graph.edge_attr.view(edge_counts[g], -1).long())
    if 0 < len(edge_attr_parts) < len(edge_index_parts):
        raise ValueError(
            f"collate_graphormer: {len(edge_attr_parts)} of {len(edge_index_parts)} graphs with edges have "
            "edge_attr; all or none must"
        )
    return {
        "x": torch.cat(x_parts),  # [num_nodes, atom_features]
        "edge_index": torch.cat(edge_index_parts, dim=1) if edge_index_parts else torch.empty(2, 0, dtype=torch.long),
        "edge_attr": torch.cat(edge_attr_parts) if edge_attr_parts else None,  # [num_edges, bond_features]
        "spatial_pos": spatial_pos,
        "edge_path": edge_path,
    }


def collate_graphormer(
    graphs: Sequence[Data], multi_hop_max_dist: int | None = None, max_nodes: int | None = None
) -> GraphormerBatch:
    """Collate preprocessed graphs (see :class:`GraphormerPreprocess`) into a :class:`GraphormerBatch`.

    ``multi_hop_max_dist`` truncates the stored edge paths (``None``: keep all stored hops). A graph with more than
    ``max_nodes`` nodes raises ``ValueError`` (never a silent drop). Use as
    ``DataLoader(graphs, collate_fn=collate_graphormer)`` (``torch.utils.data.DataLoader``) or via
    ``functools.partial`` for the keyword arguments.
    """
    node_counts, hops = check_collatable(graphs, multi_hop_max_dist, max_nodes)
    packed = pack_graphs(graphs, node_counts, hops)
    num_graphs, positions = len(graphs), 1 + max(node_counts)
    counts = torch.tensor(node_counts, dtype=torch.long)
    node_batch = torch.repeat_interleave(torch.arange(num_graphs), counts)  # [num_nodes]
    layout = token_row_layout(counts)  # token row, then node rows, graph by graph
    row_batch, node_rows, edge_index = layout.row_batch, layout.node_rows, packed["edge_index"]
    local_position = torch.arange(row_batch.numel()) - layout.token_rows[row_batch]  # [R]: 0 = token
    has_y = [getattr(g, "y", None) is not None for g in graphs]
    if any(has_y) and not all(has_y):
        raise ValueError("collate_graphormer: some graphs have targets y and others not")
    return GraphormerBatch(
        **packed,
        in_degree=torch.cat([g.in_degree for g in graphs]),
        out_degree=torch.cat([g.out_degree for g in graphs]),
        node_batch=node_batch,
        position_mask=torch.arange(positions)[None, :] < (counts + 1)[:, None],  # [B, T]
        row_batch=row_batch,
        token_mask=layout.token_mask,
        row_edge_index=node_rows[edge_index] if edge_index.numel() > 0 else edge_index.clone(),
        node_rows=node_rows,
        dense_index=row_batch * positions + local_position,  # [R] into [B * T]
        num_nodes_per_graph=counts,
        y=torch.cat([g.y for g in graphs]) if all(has_y) else None,  # PyG's concatenation of per-graph targets
    )
