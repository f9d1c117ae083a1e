"""Graphormer (Ying et al., 2021, "Do Transformers Really Perform Bad for Graph Representation?") with pluggable norms.

Written after the paper and microsoft/Graphormer (``graphormer_layers.py``, ``graphormer_graph_encoder*.py``):

* centrality encoding: learned in- and out-degree embeddings added to the atom embeddings (sum over feature columns);
* spatial and edge encodings: a learned per-head attention bias from each node pair's shortest-path distance and from
  the edges along that path (:class:`GraphAttentionBias`);
* a virtual graph token prepended to every graph, attending to and attended by all nodes through its own learned
  per-head "virtual distance" bias; the prediction head reads it out;
* pre-LN encoder layers (the paper's; post-LN optional) whose norms come from the registry.

How rows and norms meet: :class:`Graphormer`; its optimizer: :func:`graphnorm.train.schedules.polynomial_optimizer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphnorm.checks import check_count
from graphnorm.data.graphormer_preprocess import GraphormerBatch
from graphnorm.models.dropout import FastDropout, fast_dropout
from graphnorm.models.registry import register_model
from graphnorm.norms import build_norm

INITS = ("graphormer", "pytorch")


class RepresentationTap(nn.Identity):
    """Identity placed on a layer's output rows ``[R, hidden]`` so that forward hooks (collapse probes) see them."""


class FeatureEmbedding(nn.Module):
    """Embed integer feature columns, one table per column (stored as one table with offsets), summed or averaged.

    ``feature_dims[c]`` is the number of values of column ``c``; input ``[rows, len(feature_dims)]`` (or ``[rows]``
    for one column), values in ``[0, feature_dims[c])``.
    """

    def __init__(self, feature_dims: Sequence[int], out_channels: int, reduce: str = "sum") -> None:
        super().__init__()
        if len(feature_dims) == 0 or any(int(d) < 1 for d in feature_dims):
            raise ValueError(f"feature_dims must be a non-empty list of positive sizes, got {list(feature_dims)}")
        if reduce not in ("sum", "mean"):
            raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
        self.feature_dims = [int(d) for d in feature_dims]
        self.reduce = reduce
        self.embedding = nn.Embedding(sum(self.feature_dims), out_channels)
        offsets = torch.tensor([0, *self.feature_dims[:-1]], dtype=torch.long).cumsum(0)
        self.register_buffer("offsets", offsets, persistent=False)
        self.register_buffer("sizes", torch.tensor(self.feature_dims, dtype=torch.long), persistent=False)

    def forward(self, features: Tensor) -> Tensor:
        """Embeddings ``[rows, out_channels]``; ``ValueError`` / ``TypeError`` for a wrong shape, float features or a
        value outside its column's range."""
        if features.dim() == 1:
            features = features.unsqueeze(-1)
        if features.dim() != 2 or features.size(1) != len(self.feature_dims):
            raise ValueError(
                f"expected integer features of shape [rows, {len(self.feature_dims)}] (feature_dims="
                f"{self.feature_dims}), got shape {tuple(features.shape)}"
            )
        if features.is_floating_point():
            raise TypeError(f"features must be integer category ids, got {features.dtype}")
        if features.numel() > 0:
            out_of_range = (features < 0) | (features >= self.sizes)
            if bool(out_of_range.any()):
                column = int(out_of_range.any(dim=0).nonzero()[0])
                bad = features[:, column][out_of_range[:, column]][0]
                raise ValueError(
                    f"feature column {column} holds value {int(bad)}, outside [0, {self.feature_dims[column]})"
                )
        embedded = self.embedding(features + self.offsets)  # [rows, columns, out]
        return embedded.sum(dim=1) if self.reduce == "sum" else embedded.mean(dim=1)


class GraphAttentionBias(nn.Module):
    """The per-head attention bias ``[B, heads, T, T]``: spatial + edge encodings, the token's virtual distance,
    and ``-inf`` on padded keys.

    * spatial encoding: a learned per-head bias from the shortest-path distance of each node pair (distances clipped
      to ``max_distance``, unreachable pairs their own index);
    * edge encoding ("multi_hop"): per-head bias = mean over the first ``multi_hop_max_dist`` hops of a shortest path
      of (embedded edge features @ a learned ``[heads, heads]`` matrix per hop); edge features embedded per column to
      ``heads`` values and averaged over columns, as the original.
    """

    def __init__(
        self, num_heads: int, max_distance: int, bond_feature_dims: Sequence[int] | None, multi_hop_max_dist: int
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.max_distance = max_distance
        self.multi_hop_max_dist = multi_hop_max_dist
        # indices 0..max_distance are distances (clipped), max_distance + 1 means "unreachable"
        self.spatial_embedding = nn.Embedding(max_distance + 2, num_heads)
        self.virtual_distance = nn.Parameter(torch.zeros(num_heads))
        self.edge_embedding = FeatureEmbedding(bond_feature_dims, num_heads, "mean") if bond_feature_dims else None
        self.hop_weight = (
            nn.Parameter(torch.empty(multi_hop_max_dist, num_heads, num_heads)) if bond_feature_dims else None
        )

    def edge_path_bias(self, batch: GraphormerBatch, hops: int) -> Tensor:
        """Edge encoding ``[B, N, N, heads]``: mean over the first ``hops`` edges of each shortest path of
        (embedded edge features @ ``hop_weight[k]``)."""
        edge_path = batch.edge_path[..., :hops]  # [B, N, N, hops]
        on_path = edge_path >= 0
        edge_values = self.edge_embedding(batch.edge_attr)  # [E, heads]
        num_edges = edge_values.size(0)
        # Hop k of a path adds edge_values[e] @ hop_weight[k]: tabulate that for every (hop, edge), plus one zero row
        # for "no edge", then add up each path's rows hop by hop with index_select, whose backward is an index_add
        # (advanced indexing's and embedding_bag's backwards sort the indices, a large share of a training step).
        hop_values = torch.einsum("eh,khg->keg", edge_values, self.hop_weight[:hops])  # [hops, E, heads]
        table = torch.cat(
            [hop_values.reshape(hops * num_edges, self.num_heads), hop_values.new_zeros(1, self.num_heads)]
        )
        hop_offset = torch.arange(hops, device=edge_path.device) * num_edges
        rows = torch.where(on_path, edge_path + hop_offset, hops * num_edges)  # [B, N, N, hops] into table
        path_bias = table.index_select(0, rows[..., 0].reshape(-1))  # [B * N * N, heads]
        for hop in range(1, hops):
            path_bias = path_bias + table.index_select(0, rows[..., hop].reshape(-1))
        path_length = on_path.sum(dim=-1).clamp(min=1)  # [B, N, N]: min(distance, hops), 1 for empty paths
        return path_bias.view(*rows.shape[:-1], self.num_heads) / path_length.unsqueeze(-1)

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """The bias ``[B, heads, T, T]`` of ``batch``; ``ValueError`` for a batch with edges but no ``edge_attr``
        when the bias has an edge encoding."""
        num_graphs, max_nodes = batch.num_graphs, batch.max_nodes
        spatial_pos = batch.spatial_pos  # [B, N, N], -1 unreachable
        spatial_index = torch.where(spatial_pos < 0, self.max_distance + 1, spatial_pos.clamp(max=self.max_distance))
        node_bias = self.spatial_embedding(spatial_index)  # [B, N, N, heads]

        if self.edge_embedding is not None and batch.edge_attr is not None:
            hops = min(self.multi_hop_max_dist, batch.edge_path.size(-1))  # 0 only for paths collated with 0 hops
            if hops > 0:
                node_bias = node_bias + self.edge_path_bias(batch, hops)
        elif self.edge_embedding is not None and batch.edge_index.numel() > 0:
            raise ValueError("Graphormer was built with bond_feature_dims but the batch has edges without edge_attr")

        # The token row and column get the virtual distance (token-token once), as the original.
        virtual = self.virtual_distance.view(1, 1, 1, -1)
        node_rows = torch.cat([virtual.expand(num_graphs, max_nodes, 1, -1), node_bias], dim=2)  # [B, N, T, heads]
        token_row = virtual.expand(num_graphs, 1, max_nodes + 1, -1)  # [B, 1, T, heads]
        bias = torch.cat([token_row, node_rows], dim=1).permute(0, 3, 1, 2)  # [B, heads, T, T]
        padded_key = ~batch.position_mask[:, None, None, :]  # [B, 1, 1, T]
        return bias.masked_fill(padded_key, float("-inf")).contiguous()  # every layer views it as [B * heads, T, T]


class GraphormerLayer(nn.Module):
    """One encoder layer on node-major rows: multi-head self-attention with the graph bias, then a GELU FFN.

    Pre-LN: ``x + attn(norm1(x))``, then ``x + ffn(norm2(x))``. Post-LN: ``norm1(x + attn(x))``, ``norm2(x + ffn(x))``.
    """

    def __init__(
        self,
        hidden_channels: int,
        num_heads: int,
        ffn_channels: int,
        norm: str | nn.Module | None,
        norm_kwargs: dict[str, Any],
        pre_ln: bool,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_channels = hidden_channels // num_heads
        self.pre_ln = pre_ln
        self.attention_dropout = attention_dropout
        self.qkv = nn.Linear(hidden_channels, 3 * hidden_channels)
        self.out_proj = nn.Linear(hidden_channels, hidden_channels)
        self.fc1 = nn.Linear(hidden_channels, ffn_channels)
        self.fc2 = nn.Linear(ffn_channels, hidden_channels)
        self.attention_norm = build_norm(norm, hidden_channels, **norm_kwargs)
        self.ffn_norm = build_norm(norm, hidden_channels, **norm_kwargs)
        self.dropout = FastDropout(dropout)
        self.activation_dropout = FastDropout(activation_dropout)
        self.tap = RepresentationTap()

    def attention(self, rows: Tensor, bias: Tensor, batch: GraphormerBatch) -> Tensor:
        """Multi-head ``softmax(q k^T / sqrt(d) + bias) v`` of the rows ``[R, hidden]``, through the padded layout and
        back; the output projection of each row ``[R, hidden]``."""
        num_graphs, positions = bias.size(0), bias.size(-1)
        qkv = self.qkv(rows)  # [R, 3 * hidden]
        dense = qkv.new_zeros(num_graphs * positions, qkv.size(1)).index_copy(0, batch.dense_index, qkv)
        dense = dense.view(num_graphs, positions, 3, self.num_heads, self.head_channels)
        batched_heads = num_graphs * self.num_heads
        # each [B * heads, T, head_channels]
        query, key, value = dense.permute(2, 0, 3, 1, 4).reshape(3, batched_heads, positions, self.head_channels)
        # softmax(q k^T / sqrt(d) + bias) v written out: on CPU, SDPA's checks of a float mask are a sizeable share of
        # a step.
        scores = torch.baddbmm(
            bias.reshape(batched_heads, positions, positions),
            query,
            key.transpose(1, 2),
            alpha=self.head_channels**-0.5,
        )  # [B * heads, T, T]
        weights = fast_dropout(scores.softmax(dim=-1), self.attention_dropout, self.training)
        attended = torch.bmm(weights, value).view(num_graphs, self.num_heads, positions, self.head_channels)
        attended = attended.transpose(1, 2).reshape(num_graphs * positions, -1)  # [B * T, hidden]
        # index_select, not attended[index]: its backward is an index_add, not a sort-based accumulate.
        return self.out_proj(attended.index_select(0, batch.dense_index))  # [R, hidden]; padded positions dropped

    def feed_forward(self, rows: Tensor) -> Tensor:
        """``fc2(dropout(gelu(fc1(rows))))``."""
        return self.fc2(self.activation_dropout(F.gelu(self.fc1(rows))))

    def forward(self, rows: Tensor, bias: Tensor, batch: GraphormerBatch, norm_args: dict[str, Any]) -> Tensor:
        """The layer's output rows ``[R, hidden]`` (pre- or post-LN), seen by the collapse probe's tap."""
        if self.pre_ln:
            rows = rows + self.dropout(self.attention(self.attention_norm(rows, **norm_args), bias, batch))
            rows = rows + self.dropout(self.feed_forward(self.ffn_norm(rows, **norm_args)))
        else:
            rows = self.attention_norm(rows + self.dropout(self.attention(rows, bias, batch)), **norm_args)
            rows = self.ffn_norm(rows + self.dropout(self.feed_forward(rows)), **norm_args)
        return self.tap(rows)


ATTENTION_BIAS_LR_SCALE_RULE = "attention_bias_lr_scale is for model=graphormer with scheduler=polynomial"
# RunConfig keys only Graphormer uses (its padded dense batches, its optimizer), with the error for another model.
GRAPHORMER_KEYS = {
    "attention_bias_lr_scale": ATTENTION_BIAS_LR_SCALE_RULE,
    "max_nodes": "max_nodes and drop_large_graphs are for model='graphormer'",
    "drop_large_graphs": "max_nodes and drop_large_graphs are for model='graphormer'",
    "bucket_batches": "bucket_batches groups graphs by size against Graphormer's padding: set model=graphormer",
}


def check_graphormer_config(config: Any) -> None:
    """Graphormer's rules on a run config (a :class:`graphnorm.config.RunConfig`): its heads split the width, it
    reads out its own graph token, and the attention-bias learning rate is a knob of the per-step schedule."""
    if config.hidden_channels % config.num_heads != 0:
        raise ValueError(f"num_heads={config.num_heads} must divide hidden_channels={config.hidden_channels}")
    if config.virtual_node or config.readout != "mean":
        raise ValueError("model='graphormer' reads out its own virtual graph token: leave virtual_node and readout")
    if config.attention_bias_lr_scale != 1.0 and config.scheduler != "polynomial":
        raise ValueError(ATTENTION_BIAS_LR_SCALE_RULE)


def check_arguments(
    atom_feature_dims: Sequence[int] | None, sizes: dict[str, Any], rates: dict[str, float]
) -> dict[str, int]:
    """Graphormer's constructor arguments: atom features given, ``sizes`` positive integers (the heads dividing
    the width), dropout ``rates`` in [0, 1); ``ValueError`` naming the first that is not. Returns ``sizes`` as Python
    ints (NumPy integers are taken)."""
    if atom_feature_dims is None:
        raise ValueError("Graphormer needs categorical atom features (atom_feature_dims), e.g. ZINC's or OGB's")
    sizes = {name: check_count(value, name) for name, value in sizes.items()}
    if sizes["hidden_channels"] % sizes["num_heads"] != 0:
        raise ValueError(
            f"hidden_channels ({sizes['hidden_channels']}) must be divisible by num_heads ({sizes['num_heads']})"
        )
    for name, value in rates.items():
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value}")
    return sizes


@register_model(
    "graphormer",
    levels=("graph",),
    inputs="graphormer",
    check_config=check_graphormer_config,
    token_rows=True,  # the virtual graph token of every graph
    own_keys=GRAPHORMER_KEYS,
    last_layer="the last encoder layer (before the final norm)",
)
class Graphormer(nn.Module):
    """Graphormer for graph-level prediction from the virtual graph token (see the module docs).

    Rows: the residual stream is kept node-major, ``[R, hidden]`` with ``R`` = token + node rows of every graph (graph
    by graph, token first; see :class:`graphnorm.data.graphormer_preprocess.GraphormerBatch`). Every norm is called on
    these rows as ``norm(x, batch=row_batch, batch_size=num_graphs, edge_index=row_edge_index, token_mask=token_mask)``,
    so padding never enters a statistic and ``sepnorm`` can treat token rows apart. Only attention goes through the
    padded dense layout ``[B, T = 1 + max_nodes, ...]``, with padded keys masked out.

    Args:
        num_layers, hidden_channels, num_heads, ffn_channels: encoder size (``hidden_channels % num_heads == 0``;
            ``ffn_channels`` None: ``hidden_channels``).
        out_channels: prediction size (1 for ZINC regression and MolHIV's logit).
        atom_feature_dims: number of values per node feature column (ZINC ``[28]``; OGB ``get_atom_feature_dims()``).
        bond_feature_dims: same for edge features (ZINC ``[4]``; OGB ``get_bond_feature_dims()``); ``None``: no
            edge encoding.
        max_degree: degrees above it share the last degree embedding.
        max_distance: shortest-path distances above it share the last spatial embedding; unreachable pairs have one
            of their own.
        multi_hop_max_dist: hops of a path used by the edge encoding.
        norm, norm_kwargs: any registered norm for every normalization position (before attention, before the FFN,
            final); ``"layernorm"`` everywhere is the original Graphormer.
        pre_ln: pre-LN layers (the paper's) with a final norm; ``False``: post-LN layers, no final norm.
        dropout, attention_dropout, activation_dropout: as the original (embedding/residual, attention weights,
            inside the FFN).
        init: ``"graphormer"`` (the original's N(0, 0.02) for linear and embedding weights and the graph token) or
            ``"pytorch"`` (PyTorch's defaults for every ``nn.Linear`` and ``nn.Embedding`` (Kaiming-uniform weights;
            N(0, 1) embeddings, the attention-bias tables included) and a N(0, 1) graph token; the attention-bias
            scalars stay at N(0, 0.02)). Not in the paper: with LayerNorm at every position, the original init starts
            the graph-token rows nearly equal across graphs, and on ogbg-molhiv they collapse to one direction within
            the first optimizer steps (results page: ``analysis/README.md``).
    """

    def __init__(
        self,
        num_layers: int,
        hidden_channels: int,
        num_heads: int,
        ffn_channels: int | None = None,
        out_channels: int = 1,
        atom_feature_dims: Sequence[int] | None = None,
        bond_feature_dims: Sequence[int] | None = None,
        max_degree: int = 64,
        max_distance: int = 20,
        multi_hop_max_dist: int = 5,
        norm: str | nn.Module | None = "layernorm",
        norm_kwargs: dict[str, Any] | None = None,
        pre_ln: bool = True,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation_dropout: float = 0.1,
        init: str = "graphormer",
    ) -> None:
        super().__init__()
        if init not in INITS:
            raise ValueError(f"init must be one of {', '.join(map(repr, INITS))}, got {init!r}")
        ffn_channels = hidden_channels if ffn_channels is None else ffn_channels
        sizes = dict(
            num_layers=num_layers,
            hidden_channels=hidden_channels,
            num_heads=num_heads,
            ffn_channels=ffn_channels,
            out_channels=out_channels,
            max_degree=max_degree,
            max_distance=max_distance,
            multi_hop_max_dist=multi_hop_max_dist,
        )
        rates = dict(dropout=dropout, attention_dropout=attention_dropout, activation_dropout=activation_dropout)
        sizes = check_arguments(atom_feature_dims, sizes, rates)
        num_layers, hidden_channels, num_heads, ffn_channels = (
            sizes[key] for key in ("num_layers", "hidden_channels", "num_heads", "ffn_channels")
        )
        out_channels, max_degree, max_distance, multi_hop_max_dist = (
            sizes[key] for key in ("out_channels", "max_degree", "max_distance", "multi_hop_max_dist")
        )
        norm_kwargs = dict(norm_kwargs or {})
        self.num_layers = num_layers
        self.hidden_channels = hidden_channels
        self.max_degree = max_degree
        self.pre_ln = pre_ln
        self.init = init
        # Built in this order (parameters draw from the RNG as they are made; reset_parameters goes in module order).
        self._build_input(atom_feature_dims, bond_feature_dims, num_heads, max_distance, multi_hop_max_dist, dropout)
        self.layers = nn.ModuleList(
            GraphormerLayer(hidden_channels, num_heads, ffn_channels, norm, norm_kwargs, pre_ln, **rates)
            for _ in range(num_layers)
        )
        self.final_norm = (
            build_norm(norm, hidden_channels, **norm_kwargs) if pre_ln else build_norm("none", hidden_channels)
        )
        self._build_head(out_channels)
        self.reset_parameters()

    def _build_input(
        self,
        atom_feature_dims: Sequence[int],
        bond_feature_dims: Sequence[int] | None,
        num_heads: int,
        max_distance: int,
        multi_hop_max_dist: int,
        dropout: float,
    ) -> None:
        """The input rows (atom and degree embeddings, the graph token) and the attention bias."""
        hidden_channels = self.hidden_channels
        self.atom_embedding = FeatureEmbedding(atom_feature_dims, hidden_channels, "sum")
        self.in_degree_embedding = nn.Embedding(self.max_degree + 1, hidden_channels)
        self.out_degree_embedding = nn.Embedding(self.max_degree + 1, hidden_channels)
        self.graph_token = nn.Parameter(torch.zeros(hidden_channels))
        self.attention_bias = GraphAttentionBias(num_heads, max_distance, bond_feature_dims, multi_hop_max_dist)
        self.embedding_dropout = FastDropout(dropout)
        self.embedding_tap = RepresentationTap()

    def _build_head(self, out_channels: int) -> None:
        """Readout of the graph token as the original: transform, GELU, LayerNorm, output projection."""
        self.head_transform = nn.Linear(self.hidden_channels, self.hidden_channels)
        self.head_norm = nn.LayerNorm(self.hidden_channels)
        self.head_out = nn.Linear(self.hidden_channels, out_channels)

    def reset_parameters(self) -> None:
        """The Graphormer initialization: N(0, 0.02) for linear and embedding weights, zero biases; the norms keep
        their own initialization. ``init="pytorch"``: then PyTorch's defaults for linear and embedding modules and a
        N(0, 1) graph token."""
        norms = [self.final_norm] + [n for layer in self.layers for n in (layer.attention_norm, layer.ffn_norm)]
        inside_norms = {id(m) for norm in norms for m in norm.modules()}  # e.g. DiffGroupNorm's own Linear
        for module in self.modules():
            if id(module) in inside_norms:
                continue
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
        nn.init.normal_(self.graph_token, std=0.02)
        nn.init.normal_(self.attention_bias.virtual_distance, std=0.02)
        if self.attention_bias.hop_weight is not None:
            nn.init.normal_(self.attention_bias.hop_weight, std=0.02)
        self.head_norm.reset_parameters()
        if self.init == "pytorch":
            for module in self.modules():
                if id(module) not in inside_norms and isinstance(module, (nn.Linear, nn.Embedding)):
                    module.reset_parameters()
            nn.init.normal_(self.graph_token, std=1.0)

    def attention_bias_parameters(self) -> list[nn.Parameter]:
        """The attention-bias tables (:class:`GraphAttentionBias`: spatial and edge encodings, virtual distance): the
        parameters whose learning rate ``attention_bias_lr_scale`` scales
        (:func:`graphnorm.train.schedules.polynomial_optimizer`)."""
        return list(self.attention_bias.parameters())

    def collapse_layers(self) -> list[tuple[str, nn.Module]]:
        """``(name, module)`` whose forward outputs are the representations ``[R, hidden]`` (token rows included):
        the input embedding, then the output of every layer (before the final norm)."""
        return [("embedding", self.embedding_tap)] + [
            (f"layer_{index + 1}", layer.tap) for index, layer in enumerate(self.layers)
        ]

    def embed(self, batch: GraphormerBatch) -> Tensor:
        """Input rows ``[R, hidden]``: the graph token, then atom + degree embeddings of each graph's nodes."""
        in_degree = batch.in_degree.clamp(max=self.max_degree)
        out_degree = batch.out_degree.clamp(max=self.max_degree)
        nodes = (
            self.atom_embedding(batch.x) + self.in_degree_embedding(in_degree) + self.out_degree_embedding(out_degree)
        )
        rows = self.graph_token.expand(batch.row_batch.numel(), -1)  # [R, hidden]
        return rows.index_copy(0, batch.node_rows, nodes)

    def encode(self, batch: GraphormerBatch) -> Tensor:
        """All rows ``[R, hidden]`` after the encoder and its final norm."""
        if not isinstance(batch, GraphormerBatch):
            raise TypeError(f"Graphormer expects a GraphormerBatch (collate_graphormer), got {type(batch).__name__}")
        norm_args = {
            "batch": batch.row_batch,
            "batch_size": batch.num_graphs,
            "edge_index": batch.row_edge_index,
            "token_mask": batch.token_mask,
        }
        bias = self.attention_bias(batch)  # [B, heads, T, T]
        rows = self.embedding_tap(self.embedding_dropout(self.embed(batch)))
        for layer in self.layers:
            rows = layer(rows, bias, batch, norm_args)
        return self.final_norm(rows, **norm_args)

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """Predictions ``[num_graphs, out_channels]`` read out from the graph tokens."""
        rows = self.encode(batch)  # [R, hidden]
        tokens = rows.index_select(0, batch.token_mask.nonzero().squeeze(1))  # [B, hidden], graph order
        return self.head_out(self.head_norm(F.gelu(self.head_transform(tokens))))


def graphormer_slim(out_channels: int = 1, **overrides: Any) -> Graphormer:
    """Graphormer-slim as in the paper's ZINC experiments: 12 layers, hidden 80, FFN 80, 8 heads, dropout 0.1,
    ZINC atom/bond vocabularies. Keywords override any argument."""
    arguments: dict[str, Any] = dict(
        num_layers=12,
        hidden_channels=80,
        num_heads=8,
        ffn_channels=80,
        out_channels=out_channels,
        atom_feature_dims=[28],
        bond_feature_dims=[4],
        max_degree=64,
        max_distance=40,
        multi_hop_max_dist=5,
    )
    arguments.update(overrides)
    return Graphormer(**arguments)
