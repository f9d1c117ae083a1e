"""The deep GCN of the oversmoothing papers, with a pluggable norm per layer.

Forward signature (PyG style): ``model(x, edge_index, batch=None, batch_size=None) -> Tensor``.

* Node level (``readout=None``): ``num_layers`` GCN convolutions; the first ``num_layers - 1`` are hidden blocks
  (conv, norm, [shared LayerNorm], ReLU, dropout) and the last conv is the classifier (no norm, no activation).
  Output ``[num_nodes, out_channels]``.
* Graph level (``readout="mean"|"sum"|"virtual"``): all ``num_layers`` convs are hidden blocks, then the readout
  and a linear head. Output ``[num_graphs, out_channels]``. ``mean``/``sum`` pool the *node rows only* (the virtual
  node is left out of the pool); ``virtual`` reads each graph's virtual-node row.

Adjacency (computed once per forward, shared by every layer; GCNConv runs with ``normalize=False``):

* ``"sym"``: :math:`\\hat A = D^{-1/2}(A+I)D^{-1/2}` (Kipf & Welling, 2017).
* ``"row"``: :math:`\\hat A = D^{-1}(A+I)`, i.e. each node averages itself and its neighbours (the PairNorm and
  ContraNorm code).

Virtual node (``virtual_node=True``): one extra row per graph, placed *first* among its graph's rows so ``batch``
stays sorted, linked in both directions to every node of its graph and starting from a learned vector. Its rows
are the ``token_mask`` given to every norm (so SepNorm works in a GCN too).

Norms are always called as ``norm(x, batch=, batch_size=, edge_index=, token_mask=)``; ``edge_index`` is the
graph's edge_index *without* self loops (with the virtual-node edges when there is one): ContraNorm uses it to
exclude neighbours from its negatives.

Probed layers (``graphnorm.analysis.CollapseProbe``): :meth:`DeepGCN.collapse_layers` (the probe's optional
attribute) lists the modules whose forward output is the representation after each layer, all over the same rows
(node rows plus virtual-node rows): ``input`` (the atom encoder output, only when there is an encoder), then
``layer1 .. layerL`` (each :class:`GCNBlock`, after norm and activation; the node-level ``layerL`` is the classifier
output). The probe reads their ``batch``, ``token_mask`` and ``edge_index`` from the keywords the norms receive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, global_add_pool, global_mean_pool
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_remaining_self_loops, degree, remove_self_loops

from graphnorm.data.checks import check_edge_index
from graphnorm.data.token_rows import token_row_layout
from graphnorm.models.registry import register_model
from graphnorm.norms import build_norm

ADJACENCIES = ("sym", "row")
LAYER_ORDERS = ("conv-norm-act-dropout", "dropout-conv-norm-act")
READOUTS = (None, "mean", "sum", "virtual")
ATOM_ENCODERS = (None, "zinc", "ogb")
INITS = ("glorot", "kipf")
ACTIVATIONS = {"relu": F.relu, "elu": F.elu}


@dataclass
class GraphRows:
    """The rows every layer works on, and their graph structure, computed once per forward.

    With a virtual node the rows are the original nodes plus one token row per graph; otherwise the nodes.
    """

    num_rows: int
    node_rows: Tensor | None  # [num_nodes] row index of each original node (None: rows are the nodes)
    token_rows: Tensor | None  # [num_graphs] row index of each graph's virtual node
    batch: Tensor | None  # [num_rows] graph id per row (None: one graph without a batch vector)
    batch_size: int | None
    token_mask: Tensor | None  # [num_rows] bool, True on virtual-node rows
    edge_index: Tensor  # [2, E'] without self loops: handed to the norms
    propagation_index: Tensor  # [2, E' + num_rows] with self loops
    propagation_weight: Tensor  # [E' + num_rows] normalized adjacency entries


class InputLayer(nn.Module):
    """Atom encoder (if any) and virtual-node rows. Output ``[num_rows, width]``: layer 0 for the probe."""

    def __init__(self, in_channels: int, hidden_channels: int, atom_encoder: str | None, virtual_node: bool) -> None:
        super().__init__()
        self.atom_encoder = atom_encoder
        if atom_encoder == "zinc":
            self.encoder = nn.Embedding(in_channels, hidden_channels)  # in_channels = number of atom types
        elif atom_encoder == "ogb":
            from ogb.graphproppred.mol_encoder import AtomEncoder

            self.encoder = AtomEncoder(hidden_channels)  # 9 categorical OGB atom features, summed embeddings
        else:
            self.encoder = None
        self.out_channels = in_channels if self.encoder is None else hidden_channels
        # The virtual node starts from a learned vector at the input width of the first conv.
        self.virtual_embedding = nn.Parameter(torch.zeros(1, self.out_channels)) if virtual_node else None

    def forward(self, x: Tensor, rows: GraphRows) -> Tensor:
        if self.atom_encoder == "zinc":
            x = self.encoder(x.view(-1))  # [N, 1] atom types -> [N, hidden]
        elif self.atom_encoder == "ogb":
            x = self.encoder(x)  # [N, 9] -> [N, hidden]
        if rows.node_rows is None:
            return x
        out = x.new_empty(rows.num_rows, x.size(1))  # [N + num_graphs, width]
        out[rows.node_rows] = x
        out[rows.token_rows] = self.virtual_embedding.to(x.dtype).expand(rows.token_rows.numel(), -1)
        return out


def check_sizes(
    in_channels: int, hidden_channels: int, out_channels: int, num_layers: int, dropout: float, layers: str
) -> None:
    """``ValueError`` for a width or depth that is not a positive integer, or a dropout outside [0, 1)."""
    for value, name in ((in_channels, "in_channels"), (hidden_channels, "hidden_channels")):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not isinstance(out_channels, int) or out_channels < 1:
        raise ValueError(f"out_channels must be a positive integer, got {out_channels!r}")
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers (number of {layers}) must be >= 1, got {num_layers!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


def kipf_init(conv: nn.Module) -> None:
    """``conv.lin.weight`` and ``conv.bias`` uniform in :math:`\\pm 1/\\sqrt{\\text{out}}`, ``out`` the width of the
    layer's output (all heads of a concatenating ``GATConv``): Kipf & Welling's GraphConv initialization."""
    bound = 1.0 / math.sqrt(conv.lin.weight.size(0))  # [out, in]
    nn.init.uniform_(conv.lin.weight, -bound, bound)
    nn.init.uniform_(conv.bias, -bound, bound)


def check_choice(name: str, value: object, choices: tuple) -> None:
    """``ValueError`` naming ``name`` and its ``choices`` when ``value`` is not one of them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_encoder_and_norm(
    in_channels: int, atom_encoder: str | None, norm: str | nn.Module, norm_kwargs: dict | None
) -> dict:
    """The GCN-family checks of the atom encoder and the norm arguments; returns ``norm_kwargs`` as a dict."""
    check_choice("atom_encoder", atom_encoder, ATOM_ENCODERS)
    if atom_encoder == "ogb" and in_channels != 9:
        raise ValueError(f"atom_encoder='ogb' expects the 9 OGB atom columns, got in_channels={in_channels}")
    norm_kwargs = dict(norm_kwargs or {})
    if isinstance(norm, nn.Module) and norm_kwargs:
        raise ValueError("norm_kwargs given together with an already-built norm module")
    return norm_kwargs


def check_node_features(x: Tensor, in_channels: int, atom_encoder: str | None) -> None:
    """``ValueError`` unless ``x`` fits the input: float ``[N, in_channels]`` (dense or sparse) without an atom
    encoder, integer atom types ``[N, 1]`` for ``"zinc"``, the 9 integer OGB atom columns for ``"ogb"``."""
    if x.is_sparse and atom_encoder is not None:
        raise ValueError("sparse x is for raw float features, not atom ids; pass x.to_dense()")
    if atom_encoder is None:
        if not x.is_floating_point() or x.dim() != 2 or x.size(1) != in_channels:
            raise ValueError(f"x must be float [num_nodes, {in_channels}], got {x.dtype} {tuple(x.shape)}")
    elif atom_encoder == "zinc":
        if x.is_floating_point() or x.dim() not in (1, 2) or (x.dim() == 2 and x.size(1) != 1):
            raise ValueError(f"atom_encoder='zinc' needs integer atom types [num_nodes, 1], got {tuple(x.shape)}")
    elif x.is_floating_point() or x.dim() != 2 or x.size(1) != 9:
        raise ValueError(f"atom_encoder='ogb' needs integer features [num_nodes, 9], got {tuple(x.shape)}")


def graph_level_batch(readout: str | None, batch: Tensor | None, edge_index: Tensor, num_nodes: int) -> Tensor | None:
    """``batch`` as given; a graph-level model (``readout`` set) called without one reads all rows as one graph."""
    if readout is not None and batch is None:
        return edge_index.new_zeros(num_nodes)
    return batch


def pool_graphs(h: Tensor, batch: Tensor, batch_size: int | None, readout: str) -> Tensor:
    """The ``"mean"`` or ``"sum"`` readout of the rows of each graph: ``[N, C] -> [num_graphs, C]``."""
    pool = global_mean_pool if readout == "mean" else global_add_pool
    return pool(h, batch, batch_size)


def dropout_nonzeros(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout`` that draws a Bernoulli only for the nonzero entries of ``x``.

    Same distribution as ``F.dropout(x, p, training)`` (a zero entry stays zero whatever its draw), but on sparse
    bag-of-words features (Cora: 1.3% nonzero) it draws ~75x fewer random numbers: the dense draw over the
    2708 x 1433 input was over half of a deep Cora run's time. It consumes a different random stream. A coalesced
    sparse COO ``x`` (values in row-major order, the order of ``nonzero()``) gets the same draws and stays sparse.
    """
    if not training or p == 0.0:
        return x
    if x.is_sparse:  # sparse COO features (node-level training hands them over): draw for the stored values
        values = x.values()
        keep = torch.empty_like(values).bernoulli_(1.0 - p)
        return torch.sparse_coo_tensor(
            x.indices(), values * keep / (1.0 - p), x.shape, is_coalesced=True, check_invariants=False
        )
    index = x.nonzero(as_tuple=True)
    keep = torch.empty(index[0].numel(), dtype=x.dtype, device=x.device).bernoulli_(1.0 - p)
    return torch.zeros_like(x).index_put(index, x[index] * keep / (1.0 - p))


class GCNBlock(nn.Module):
    """One GCN layer. Its forward output is the representation after the layer (the probe hooks it).

    ``order="conv-norm-act-dropout"``: conv -> norm -> [shared LayerNorm] -> act -> dropout.
    ``order="dropout-conv-norm-act"``: dropout -> conv -> norm -> [shared LayerNorm] -> act (Kipf, PairNorm and
    ContraNorm code). ``is_output``: conv only (the classifier), with the dropout before it in the second order.
    ``activation``: ``"relu"`` or ``"elu"``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        norm: nn.Module | None,
        shared_layernorm: nn.LayerNorm | None,
        dropout: float,
        order: str,
        residual: bool,
        is_output: bool = False,
        input_features: bool = False,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.activation = ACTIVATIONS[activation]
        self.conv = GCNConv(in_channels, out_channels, normalize=False)  # weights precomputed in GraphRows
        self.norm = norm
        self.shared_layernorm = shared_layernorm
        self.dropout = dropout
        self.order = order
        self.residual = residual and in_channels == out_channels
        self.is_output = is_output
        # The first block of a model without an atom encoder sees the raw (often sparse) input features.
        self.input_dropout = dropout_nonzeros if input_features else F.dropout

    def forward(self, x: Tensor, rows: GraphRows) -> Tensor:
        skip = x
        if self.order == "dropout-conv-norm-act":
            x = self.input_dropout(x, self.dropout, self.training)
        x = self.conv(x, rows.propagation_index, rows.propagation_weight)
        if self.is_output:
            return x
        if self.norm is not None:
            x = self.norm(
                x, batch=rows.batch, batch_size=rows.batch_size, edge_index=rows.edge_index, token_mask=rows.token_mask
            )
        if self.shared_layernorm is not None:
            x = self.shared_layernorm(x)
        x = self.activation(x)
        if self.order == "conv-norm-act-dropout":
            x = F.dropout(x, self.dropout, self.training)
        if self.residual:
            x = x + skip
        return x


@register_model(
    "gcn",
    last_layer={
        "node": "the classifier output (logits: the last GCN conv, no norm)",
        "graph": "the last GCN block (after norm and activation, before the readout)",
    },
)
class DeepGCN(nn.Module):
    """Deep GCN with a norm per hidden layer; see the module docstring for the layer layout and conventions.

    Args:
        in_channels: feature width (float features), or atom vocabulary size (``atom_encoder="zinc"``), or the 9
            OGB atom columns (``atom_encoder="ogb"``).
        num_layers: number of graph convolutions (>= 1).
        norm: registry name or an ``nn.Module`` (deep-copied per layer); ``norm_kwargs`` go to ``build_norm``.
        residual: add the block input to its output where the widths agree (hidden -> hidden).
        adjacency: ``"sym"`` or ``"row"``.
        layer_order: ``"conv-norm-act-dropout"`` or ``"dropout-conv-norm-act"``.
        shared_layernorm: one ``nn.LayerNorm(hidden)`` shared by all hidden blocks, after the norm (ContraNorm).
        readout: ``None`` (node level) or ``"mean"``/``"sum"``/``"virtual"`` (graph level).
        virtual_node: add a virtual node per graph (graph level only).
        atom_encoder: ``None``, ``"zinc"`` (``nn.Embedding``) or ``"ogb"`` (OGB ``AtomEncoder``). GCNConv does not
            use bond features, so no bond encoder.
        init: conv weights. ``"glorot"``: PyG's ``GCNConv`` default (Glorot-uniform weights, zero bias).
            ``"kipf"``: weights and bias uniform in :math:`\\pm 1/\\sqrt{\\text{out}}`, the ``GraphConv`` of Kipf &
            Welling's, PairNorm's and ContraNorm's code. The ContraNorm protocol needs it: with Glorot, PairNorm
            at 2 layers lands 4-5 points lower (69.2 vs 73.9 over 5 seeds, official 73.2).
        activation: the hidden blocks' ``"relu"`` (GCN) or ``"elu"`` (the GAT paper, PairNorm's and ContraNorm's
            ``DeepGAT``).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        norm: str | nn.Module = "none",
        norm_kwargs: dict | None = None,
        dropout: float = 0.6,
        residual: bool = False,
        adjacency: str = "sym",
        layer_order: str = "conv-norm-act-dropout",
        shared_layernorm: bool = False,
        readout: str | None = None,
        virtual_node: bool = False,
        atom_encoder: str | None = None,
        init: str = "glorot",
        activation: str = "relu",
    ) -> None:
        super().__init__()
        check_sizes(in_channels, hidden_channels, out_channels, num_layers, dropout, "convs")
        check_choice("adjacency", adjacency, ADJACENCIES)
        check_choice("layer_order", layer_order, LAYER_ORDERS)
        check_choice("readout", readout, READOUTS)
        check_choice("init", init, INITS)
        check_choice("activation", activation, tuple(ACTIVATIONS))
        norm_kwargs = check_encoder_and_norm(in_channels, atom_encoder, norm, norm_kwargs)
        if virtual_node and readout is None:
            raise ValueError("virtual_node=True is for graph-level models: also set readout")
        if readout == "virtual" and not virtual_node:
            raise ValueError("readout='virtual' reads the virtual node: set virtual_node=True")

        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.adjacency = adjacency
        self.readout = readout
        self.virtual_node = virtual_node
        # Raw float features may come as sparse COO (the node-level trainer passes bag-of-words features so).
        self.takes_sparse_features = atom_encoder is None and not virtual_node

        self.input_layer = InputLayer(in_channels, hidden_channels, atom_encoder, virtual_node)
        self.shared_layernorm = nn.LayerNorm(hidden_channels) if shared_layernorm else None
        layout = dict(dropout=dropout, order=layer_order, activation=activation)
        raw_features = atom_encoder is None  # the first block then sees the raw input features
        num_hidden = num_layers if readout is not None else num_layers - 1
        blocks = []
        for index in range(num_hidden):
            width = self.input_layer.out_channels if index == 0 else hidden_channels
            layer_norm = build_norm(norm, hidden_channels, **norm_kwargs)  # an instance is copied per layer
            blocks.append(
                GCNBlock(width, hidden_channels, layer_norm, self.shared_layernorm, residual=residual, **layout,
                         input_features=raw_features and index == 0)
            )  # fmt: skip
        self.head = None if readout is None else nn.Linear(hidden_channels, out_channels)
        if readout is None:  # node level: the last convolution is the classifier
            width = self.input_layer.out_channels if num_hidden == 0 else hidden_channels
            blocks.append(GCNBlock(width, out_channels, None, None, residual=False, **layout, is_output=True,
                                   input_features=raw_features and num_hidden == 0))  # fmt: skip
        self.blocks = nn.ModuleList(blocks)
        if init == "kipf":
            self._kipf_init()

    def _kipf_init(self) -> None:
        """Conv weights and bias uniform in :math:`\\pm 1/\\sqrt{\\text{out}}` (Kipf & Welling's GraphConv)."""
        for block in self.blocks:
            kipf_init(block.conv)

    # --- structure -------------------------------------------------------------------------------------------
    def graph_rows(self, edge_index: Tensor, num_nodes: int, batch: Tensor | None, batch_size: int | None) -> GraphRows:
        """Rows (nodes [+ virtual nodes]), their batch/token_mask, and the normalized adjacency with self loops."""
        check_edge_index(edge_index, num_nodes, batch)
        edge_index, _ = remove_self_loops(edge_index)
        node_rows = token_rows = token_mask = None
        num_rows = num_nodes
        if self.virtual_node:
            if batch is None:
                batch = edge_index.new_zeros(num_nodes)
            if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
                raise ValueError("virtual_node needs a sorted batch vector (as PyG's DataLoader makes)")
            num_graphs = batch_size if batch_size is not None else (int(batch.max()) + 1 if batch.numel() else 0)
            layout = token_row_layout(torch.bincount(batch, minlength=num_graphs))  # each token before its nodes
            token_rows, node_rows, token_mask = layout.token_rows, layout.node_rows, layout.token_mask
            num_rows = num_nodes + num_graphs
            token_edges = torch.stack([token_rows[batch], node_rows])  # token -> node, [2, N]
            edge_index = torch.cat([node_rows[edge_index], token_edges, token_edges.flip(0)], dim=1)
            batch, batch_size = layout.row_batch, num_graphs
        propagation_index, propagation_weight = self._normalized_adjacency(edge_index, num_rows)
        return GraphRows(
            num_rows=num_rows,
            node_rows=node_rows,
            token_rows=token_rows,
            batch=batch,
            batch_size=batch_size,
            token_mask=token_mask,
            edge_index=edge_index,
            propagation_index=propagation_index,
            propagation_weight=propagation_weight,
        )

    def _normalized_adjacency(self, edge_index: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
        if self.adjacency == "sym":
            return gcn_norm(edge_index, None, num_rows, add_self_loops=True)  # D^-1/2 (A+I) D^-1/2
        index, _ = add_remaining_self_loops(edge_index, num_nodes=num_rows)
        target = index[1]  # GCNConv sums messages source -> target, so row i of \hat A is target i
        in_degree = degree(target, num_rows)  # >= 1 thanks to the self loop
        return index, in_degree.reciprocal()[target]  # D^-1 (A+I)

    # --- forward ---------------------------------------------------------------------------------------------
    def forward(
        self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None, batch_size: int | None = None
    ) -> Tensor:
        """``x`` ``[N, in_channels]`` float (or atom ids) -> ``[N, out]`` (node level) or ``[num_graphs, out]``."""
        self._check_input(x)
        batch = graph_level_batch(self.readout, batch, edge_index, x.size(0))
        rows = self.graph_rows(edge_index, x.size(0), batch, batch_size)
        h = self.input_layer(x, rows)  # [num_rows, width]
        for block in self.blocks:
            h = block(h, rows)  # [num_rows, hidden] (the node-level classifier: [num_rows, out])
        if self.readout is None:
            return h
        return self.head(self._pool(h, rows, batch, batch_size))  # [num_graphs, hidden] -> [num_graphs, out]

    def _pool(self, h: Tensor, rows: GraphRows, batch: Tensor, batch_size: int | None) -> Tensor:
        if self.readout == "virtual":
            return h[rows.token_rows]
        if rows.node_rows is not None:
            h = h[rows.node_rows]  # node rows only: the virtual node is not pooled
        size = rows.batch_size if rows.batch_size is not None else batch_size
        return pool_graphs(h, batch, size, self.readout)

    def _check_input(self, x: Tensor) -> None:
        if x.is_sparse and self.virtual_node:
            raise ValueError("sparse x is for raw float features without a virtual node; pass x.to_dense()")
        check_node_features(x, self.in_channels, self.input_layer.atom_encoder)

    # --- probed layers ---------------------------------------------------------------------------------------
    def collapse_layers(self) -> list[tuple[str, nn.Module]]:
        """Modules whose forward output is the representation after each layer, all over the same rows."""
        layers: list[tuple[str, nn.Module]] = []
        if self.input_layer.encoder is not None:
            layers.append(("input", self.input_layer))
        layers += [(f"layer{i}", block) for i, block in enumerate(self.blocks, start=1)]
        return layers
