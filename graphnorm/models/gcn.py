"""DeepGCN: the deep GCN of the oversmoothing papers, with a pluggable norm after every hidden convolution.

:class:`DeepGCN` stacks :class:`GCNBlock` layers over the rows of one forward (the nodes, plus one virtual-node row
per graph when asked) and ends in the classifier convolution (node level) or a readout and a linear head (graph
level). :class:`~graphnorm.models.gat.DeepGAT` is the same model with attention convolutions. What the
message-passing models share is in :mod:`graphnorm.models.inputs` (rows, input layer, argument checks),
:mod:`graphnorm.models.readout` and :mod:`graphnorm.models.initialization`; models are built by name through
:mod:`graphnorm.models.registry`.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_remaining_self_loops, degree, remove_self_loops

from graphnorm.checks import check_choice, check_edge_index, same_values
from graphnorm.data.token_rows import token_row_layout
from graphnorm.models.initialization import INITS, kipf_init
from graphnorm.models.inputs import (
    GraphRows,
    InputLayer,
    adjacency_dtype,
    check_encoder_and_norm,
    check_node_features,
    check_sizes,
    dropout_nonzeros,
    parameter_dtype,
)
from graphnorm.models.propagation import SparseAdjacency, auto_propagation
from graphnorm.models.readout import graph_level_batch, pool_graphs
from graphnorm.models.registry import register_model
from graphnorm.norms import build_norm

ADJACENCIES = ("sym", "row")
LAYER_ORDERS = ("conv-norm-act-dropout", "dropout-conv-norm-act")
READOUTS = ("mean", "sum", "virtual")  # graph level; None: node level
ACTIVATIONS = {"relu": F.relu, "elu": F.elu}
PROPAGATIONS = ("auto", "pyg", "sparse")


class GCNBlock(nn.Module):
    """One GCN layer. Its forward output is the representation after the layer (the probe hooks it).

    ``order="conv-norm-act-dropout"``: conv -> norm -> [shared LayerNorm] -> act -> dropout.
    ``order="dropout-conv-norm-act"``: dropout -> conv -> norm -> [shared LayerNorm] -> act (Kipf, PairNorm and
    ContraNorm code). ``is_output``: conv only (the classifier), with the dropout before it in the second order.
    ``activation``: ``"relu"`` or ``"elu"``. The conv runs with ``normalize=False`` on the adjacency of
    :class:`~graphnorm.models.inputs.GraphRows`, or, given ``adjacency`` (``propagation="sparse"``), as the
    conv's own linear map and bias around a :class:`~graphnorm.models.propagation.SparseAdjacency` product (the
    same function; the product runs on the narrower side of the linear map). The norm is called as every graphnorm
    norm is, ``norm(x, batch=, batch_size=, edge_index=, token_mask=)``, with the graph's ``edge_index`` without self
    loops (ContraNorm leaves neighbours out of its negatives) and the virtual-node rows as ``token_mask`` (for
    SepNorm).
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

    def forward(self, x: Tensor, rows: GraphRows, adjacency: SparseAdjacency | None = None) -> Tensor:
        skip = x
        if self.order == "dropout-conv-norm-act":
            x = self.input_dropout(x, self.dropout, self.training)
        x = self._convolve(x, rows, adjacency)
        if self.is_output:
            return x
        if self.norm is not None:
            x = self.norm(
                x, batch=rows.batch, batch_size=rows.batch_size, edge_index=rows.edge_index, token_mask=rows.token_mask
            )
        if self.shared_layernorm is not None:
            x = self.shared_layernorm(x)
        if adjacency is not None and self._fuses_relu_dropout():
            x = _ReLUDropout.apply(x, self.dropout)  # saves its output only (the next linear map saves it anyway)
        else:
            x = self.activation(x)
            if self.order == "conv-norm-act-dropout":
                x = F.dropout(x, self.dropout, self.training)
        if self.residual:
            x = x + skip
        return x

    def _fuses_relu_dropout(self) -> bool:
        """ReLU right before a training-mode dropout: one op (:class:`_ReLUDropout`) on the sparse path."""
        return (
            self.activation is F.relu and self.order == "conv-norm-act-dropout" and self.training and self.dropout > 0
        )

    def _convolve(self, x: Tensor, rows: GraphRows, adjacency: SparseAdjacency | None) -> Tensor:
        """``GCNConv``: :math:`\\hat A (x W^\\top) + b`, with PyG's propagation or the sparse product
        (:math:`(\\hat A x) W^\\top + b` where ``x`` is dense and narrower than the output: fewer channels to
        gather)."""
        if adjacency is None:
            return self.conv(x, rows.propagation_index, rows.propagation_weight)
        lin = self.conv.lin
        out = lin(adjacency(x)) if not x.is_sparse and x.size(1) < lin.out_channels else adjacency(lin(x))
        return out if self.conv.bias is None else out.add_(self.conv.bias)  # out is fresh: nothing saved it


class _ReLUDropout(torch.autograd.Function):
    """``F.dropout(F.relu(x), p)`` with the same random draws and numbers as those two on the CPU (a Bernoulli
    ``1 - p`` mask divided by ``1 - p``), saving only the output ``y`` instead of the ReLU output and the float mask:
    :math:`\\partial y / \\partial x = 1/(1-p)` where :math:`y > 0` (kept and active) and 0 elsewhere."""

    @staticmethod
    def forward(ctx, x, p):  # noqa: ANN001, ANN205 (autograd.Function signature)
        noise = torch.empty_like(x).bernoulli_(1 - p).div_(1 - p)  # F.dropout's CPU mask, drawn the same way
        out = torch.relu(x).mul_(noise)
        ctx.scale = noise.new_ones(()).div_(1 - p)  # the kept entries' factor, rounded as in the mask
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        (out,) = ctx.saved_tensors
        return (grad_out * ctx.scale).masked_fill_(out <= 0, 0), None


@register_model(
    "gcn",
    last_layer={
        "node": "the classifier output (logits: the last GCN conv, no norm)",
        "graph": "the last GCN block (after norm and activation, before the readout)",
    },
)
class DeepGCN(nn.Module):
    """Deep GCN with a norm per hidden layer: ``model(x, edge_index, batch=None, batch_size=None) -> Tensor``.

    * Node level (``readout=None``): ``num_layers`` GCN convolutions; the first ``num_layers - 1`` are hidden blocks
      (:class:`GCNBlock`) and the last conv is the classifier (no norm, no activation). Output
      ``[num_nodes, out_channels]``.
    * Graph level (``readout`` set): all ``num_layers`` convs are hidden blocks, then the readout and a linear head.
      Output ``[num_graphs, out_channels]``. ``"mean"`` / ``"sum"`` pool the node rows only (not the virtual node);
      ``"virtual"`` reads each graph's virtual-node row.

    Args:
        in_channels: feature width (float features), or atom vocabulary size (``atom_encoder="zinc"``), or the 9
            OGB atom columns (``atom_encoder="ogb"``).
        num_layers: number of graph convolutions (>= 1).
        norm: registry name or an ``nn.Module`` (deep-copied per layer); ``norm_kwargs`` go to ``build_norm``.
        residual: add the block input to its output where the widths agree (hidden -> hidden).
        adjacency: the normalized adjacency every layer propagates with, computed once per forward: ``"sym"``
            :math:`D^{-1/2}(A+I)D^{-1/2}` (Kipf & Welling, 2017) or ``"row"`` :math:`D^{-1}(A+I)`, each node
            averaging itself and its neighbours (the PairNorm and ContraNorm code).
        layer_order: ``"conv-norm-act-dropout"`` or ``"dropout-conv-norm-act"``.
        shared_layernorm: one ``nn.LayerNorm(hidden)`` shared by all hidden blocks, after the norm (ContraNorm).
        readout: ``None`` (node level) or ``"mean"``/``"sum"``/``"virtual"`` (graph level).
        virtual_node: add a virtual node per graph (graph level only): one extra row per graph, linked both ways to
            every node of its graph (:meth:`graph_rows`).
        atom_encoder: ``None``, ``"zinc"`` (``nn.Embedding``) or ``"ogb"`` (OGB ``AtomEncoder``). GCNConv does not
            use bond features, so no bond encoder.
        init: conv weights. ``"glorot"``: PyG's ``GCNConv`` default (Glorot-uniform weights, zero bias).
            ``"kipf"``: weights and bias uniform in :math:`\\pm 1/\\sqrt{\\text{out}}`, the ``GraphConv`` of Kipf &
            Welling's, PairNorm's and ContraNorm's code. The ContraNorm protocol needs it: with Glorot, PairNorm
            at 2 layers on Cora falls clearly short of the published accuracy.
        activation: the hidden blocks' ``"relu"`` (GCN) or ``"elu"`` (the GAT paper, PairNorm's and ContraNorm's
            ``DeepGAT``).
        propagation: how each conv multiplies by the normalized adjacency. ``"auto"`` (default): ``"sparse"``
            where it gives ``"pyg"``'s outputs and gradients up to the order of the float sums, on CPU graphs of at
            least :data:`~graphnorm.models.propagation.AUTO_SPARSE_MIN_NODES` nodes in float32 / float64 outside
            autocast; ``"pyg"`` for everything else (and in DeepGAT, whose attention has no fixed adjacency), so
            small graphs keep PyG's numbers bit for bit (the rule:
            :func:`~graphnorm.models.propagation.auto_propagation`, per forward; :meth:`propagation_for` tells the
            path an input gets, ``last_propagation`` the one the last forward took). The sparse product has
            first-order gradients only: pass ``"pyg"`` for double backward. ``"pyg"``: ``GCNConv``'s gather and
            scatter over the edges. ``"sparse"``: a CSR matrix product on the CPU
            (:class:`~graphnorm.models.propagation.SparseAdjacency`), the same function up to the order of the sums
            (float32 round-off), for large graphs: no ``[E, C]`` message tensor per layer, and the adjacency (with
            the rows of :meth:`graph_rows`) is built once and reused while the same ``edge_index`` (and ``batch``)
            tensors come back unchanged (in place edits are noticed). In training, a ReLU and the dropout after it
            are one op there that saves only its output (:class:`_ReLUDropout`: ``F.dropout``'s draws and numbers).
        checkpoint_layers: when training, keep only each block's input and recompute the block in the backward
            (:func:`torch.utils.checkpoint.checkpoint`, dropout masks replayed): activation memory of one block
            instead of all, for about one more forward pass.
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
        propagation: str = "auto",
        checkpoint_layers: bool = False,
    ) -> None:
        super().__init__()
        in_channels, hidden_channels, out_channels, num_layers = check_sizes(
            in_channels, hidden_channels, out_channels, num_layers, dropout, "convs"
        )
        check_choice(propagation, PROPAGATIONS, "propagation")
        if not isinstance(checkpoint_layers, bool):
            raise ValueError(f"checkpoint_layers must be True or False, got {checkpoint_layers!r}")
        check_choice(adjacency, ADJACENCIES, "adjacency")
        check_choice(layer_order, LAYER_ORDERS, "layer_order")
        check_choice(readout, (None, *READOUTS), "readout")
        check_choice(init, INITS, "init")
        check_choice(activation, ACTIVATIONS, "activation")
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
        self.propagation = propagation
        self.last_propagation: str | None = None  # the path the last forward took ("pyg" or "sparse")
        self.checkpoint_layers = checkpoint_layers
        # (key, rows, adjacency, copies of the edge_index and batch they were built from): see _sparse_rows
        self._sparse_cache: tuple[tuple, GraphRows, SparseAdjacency, Tensor, Tensor | None] | None = None
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
            for block in self.blocks:
                kipf_init(block.conv)

    # --- structure -------------------------------------------------------------------------------------------
    def graph_rows(
        self,
        edge_index: Tensor,
        num_nodes: int,
        batch: Tensor | None,
        batch_size: int | None,
        dtype: torch.dtype = torch.float32,
    ) -> GraphRows:
        """Rows (nodes [+ virtual nodes]), their batch/token_mask, and the normalized adjacency with self loops
        (entries computed in ``dtype``: a float64 model gets a float64-exact adjacency).

        A virtual node is one extra row per graph, placed first among its graph's rows (so ``batch`` stays sorted),
        linked in both directions to every node of its graph; its rows are the ``token_mask`` the norms get.
        ``edge_index`` of the result is without self loops, with the virtual-node edges."""
        check_edge_index(edge_index, num_nodes, batch)
        if bool((edge_index[0] == edge_index[1]).any()):  # else keep the caller's tensor: the same values, no copy
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
        propagation_index, propagation_weight = self._normalized_adjacency(edge_index, num_rows, dtype)
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

    def _normalized_adjacency(self, edge_index: Tensor, num_rows: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The ``adjacency`` with self loops as (index, weight in ``dtype``): ``"sym"`` or ``"row"`` (see the class
        docstring)."""
        if self.adjacency == "sym":
            return gcn_norm(edge_index, None, num_rows, add_self_loops=True, dtype=dtype)  # D^-1/2 (A+I) D^-1/2
        index, _ = add_remaining_self_loops(edge_index, num_nodes=num_rows)
        target = index[1]  # GCNConv sums messages source -> target, so row i of \hat A is target i
        in_degree = degree(target, num_rows, dtype=dtype)  # >= 1 thanks to the self loop
        return index, in_degree.reciprocal()[target]  # D^-1 (A+I)

    # --- forward ---------------------------------------------------------------------------------------------
    def forward(
        self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None, batch_size: int | None = None
    ) -> Tensor:
        """``x`` ``[N, in_channels]`` float (or atom ids) -> ``[N, out]`` (node level) or ``[num_graphs, out]``."""
        dtype = parameter_dtype(self)
        self._check_input(x, dtype)
        batch = graph_level_batch(self.readout, batch, edge_index, x.size(0))
        self.last_propagation = path = self.propagation_for(x)
        if path == "sparse":  # the product takes float32 entries for a half model (and rows)
            rows, adjacency = self._sparse_rows(edge_index, x.size(0), batch, batch_size, adjacency_dtype(dtype))
        else:
            rows, adjacency = self.graph_rows(edge_index, x.size(0), batch, batch_size, adjacency_dtype(dtype)), None
            if rows.propagation_weight is not None and rows.propagation_weight.dtype != dtype:
                # PyG's message multiplies the rows by these entries: in the model's dtype, or the rows are promoted
                rows = dataclasses.replace(rows, propagation_weight=rows.propagation_weight.to(dtype))
        h = self.input_layer(x, rows)  # [num_rows, width]
        recompute = self.checkpoint_layers and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            # [num_rows, hidden] (the node-level classifier: [num_rows, out])
            h = checkpoint(block, h, rows, adjacency, use_reentrant=False) if recompute else block(h, rows, adjacency)
        if self.readout is None:
            return h
        return self.head(self._pool(h, rows, batch, batch_size))  # [num_graphs, hidden] -> [num_graphs, out]

    def propagation_for(self, x: Tensor) -> str:
        """The path (``"pyg"`` or ``"sparse"``) a forward with node features ``x`` takes here and now: the model's
        ``propagation``, or for ``"auto"`` :func:`~graphnorm.models.propagation.auto_propagation`'s choice."""
        if self.propagation != "auto":
            return self.propagation
        if self.adjacency is None:  # attention weighs the edges (DeepGAT): no fixed matrix for the product
            return "pyg"
        return auto_propagation(x, parameter_dtype(self))

    def extra_repr(self) -> str:
        last = getattr(self, "last_propagation", None)  # absent from a model pickled before it was recorded
        taken = f" (last forward: {last!r})" if self.propagation == "auto" and last is not None else ""
        return f"propagation={self.propagation!r}{taken}"

    def _sparse_rows(
        self, edge_index: Tensor, num_nodes: int, batch: Tensor | None, batch_size: int | None, dtype: torch.dtype
    ) -> tuple[GraphRows, SparseAdjacency]:
        """:meth:`graph_rows` and its adjacency as a :class:`SparseAdjacency`, reused while the same graph comes back:
        the same ``edge_index`` and ``batch`` objects holding the same values as when the cache was built, and the
        same sizes. The values are compared with the cache's own copies (a pass over the edges, far less than one
        propagation): torch's version counter misses an edit through a NumPy view or ``.data``. The rows are built
        from those copies, so the norms never see a tensor the caller may still edit; the cache also holds the
        caller's tensors, so their memory cannot be reused by another graph that would match by address."""
        key = (edge_index, batch, num_nodes, batch_size, self.adjacency, dtype)
        cached = self._sparse_cache
        same_key = cached is not None and all(
            a is b if isinstance(a, Tensor) or isinstance(b, Tensor) else a == b for a, b in zip(cached[0], key)
        )
        if same_key and same_values(cached[3], edge_index) and same_values(cached[4], batch):
            return cached[1], cached[2]
        self._sparse_cache = None  # the old graph's matrices go before the new ones are built
        edge_copy, batch_copy = edge_index.clone(), None if batch is None else batch.clone()
        rows = self.graph_rows(edge_copy, num_nodes, batch_copy, batch_size, dtype)
        adjacency = SparseAdjacency(rows.propagation_index, rows.propagation_weight, rows.num_rows)
        self._sparse_cache = (key, rows, adjacency, edge_copy, batch_copy)
        return rows, adjacency

    def __getstate__(self) -> dict:
        """Pickled (``torch.save``, ``copy.deepcopy``) without the cached graph."""
        state = dict(self.__dict__)
        state["_sparse_cache"] = None
        return state

    def _pool(self, h: Tensor, rows: GraphRows, batch: Tensor, batch_size: int | None) -> Tensor:
        """The readout ``[num_rows, hidden] -> [num_graphs, hidden]``: each graph's virtual-node row, or the mean / sum
        of its node rows."""
        if self.readout == "virtual":
            return h[rows.token_rows]
        if rows.node_rows is not None:
            h = h[rows.node_rows]  # node rows only: the virtual node is not pooled
        size = rows.batch_size if rows.batch_size is not None else batch_size
        return pool_graphs(h, batch, size, self.readout)

    def _check_input(self, x: Tensor, dtype: torch.dtype) -> None:
        """``ValueError`` for node features that do not fit (:func:`~graphnorm.models.inputs.check_node_features`;
        float features in the model's ``dtype``), or sparse features with a virtual node."""
        if x.is_sparse and self.virtual_node:
            raise ValueError("sparse x is for raw float features without a virtual node; pass x.to_dense()")
        check_node_features(x, self.in_channels, self.input_layer.atom_encoder, dtype)

    # --- probed layers ---------------------------------------------------------------------------------------
    def collapse_layers(self) -> list[tuple[str, nn.Module]]:
        """Modules whose forward output is the representation after each layer, all over the same rows (node rows
        plus virtual-node rows), for :class:`graphnorm.analysis.CollapseProbe`: ``input`` (the atom encoder output,
        only when there is an encoder), then ``layer1 .. layerL`` (each :class:`GCNBlock`, after norm and
        activation; at node level ``layerL`` is the classifier output). The probe reads their ``batch``,
        ``token_mask`` and ``edge_index`` from the keywords the norms receive."""
        layers: list[tuple[str, nn.Module]] = []
        if self.input_layer.encoder is not None:
            layers.append(("input", self.input_layer))
        layers += [(f"layer{i}", block) for i, block in enumerate(self.blocks, start=1)]
        return layers
