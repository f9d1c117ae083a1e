"""GIN (Xu et al., ICLR 2019, https://arxiv.org/abs/1810.00826) with OGB's bond features and virtual node (Hu et
al., NeurIPS 2020, https://arxiv.org/abs/2005.00687), with a pluggable norm after each convolution.

:class:`GIN` stacks :class:`GINBlock` layers (bond encoder, GINEConv or GINConv, norm, activation, dropout) with an
optional :class:`VirtualNode`, as OGB's ``examples/graphproppred/mol`` code does; its class docstring gives the layer
formula and where it differs from OGB's code. :func:`check_gin_config` rejects what its OGB-style virtual node
cannot do. The input layer, argument checks and readout it shares with the other message-passing models are in
:mod:`graphnorm.models.inputs` and :mod:`graphnorm.models.readout`.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GINConv, GINEConv, global_add_pool
from torch_geometric.nn.norm import BatchNorm as PyGBatchNorm

from graphnorm.checks import check_choice, check_edge_index
from graphnorm.data.task import ZINC_NUM_BOND_TYPES
from graphnorm.models.inputs import (
    InputLayer,
    check_encoder_and_norm,
    check_node_features,
    check_sizes,
    parameter_dtype,
)
from graphnorm.models.readout import graph_level_batch, pool_graphs
from graphnorm.models.registry import register_model
from graphnorm.norms import build_norm

READOUTS = (None, "mean", "sum")
NODE_ROWS_ONLY = SimpleNamespace(node_rows=None)  # what InputLayer reads of its rows: no virtual-node rows


class ConstantReadoutWarning(UserWarning):
    """A graph-level GIN whose last norm centers each graph with nothing after it: every graph reads out the same."""


class AtomInput(InputLayer):
    """The shared atom encoder (ZINC ``nn.Embedding``, OGB ``AtomEncoder``, or none for float features) over the node
    rows alone. Output ``[N, width]``: the probe's ``input`` layer."""

    def __init__(self, in_channels: int, hidden_channels: int, atom_encoder: str | None) -> None:
        super().__init__(in_channels, hidden_channels, atom_encoder, virtual_node=False)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x, NODE_ROWS_ONLY)


def two_layer_mlp(in_channels: int, hidden_channels: int, output_norm: bool) -> nn.Sequential:
    """OGB's MLPs: ``Linear(in, 2d) -> BatchNorm -> ReLU -> Linear(2d, d)`` (the GIN update), followed by
    ``BatchNorm -> ReLU`` when ``output_norm`` (the virtual-node update). The BatchNorms are PyG's
    ``BatchNorm(allow_single_element=True)``: ``BatchNorm1d`` except that a training batch of a single row (one
    graph's virtual node, a one-atom batch) is normalized with the running statistics instead of raising."""
    layers: list[nn.Module] = [
        nn.Linear(in_channels, 2 * hidden_channels),
        PyGBatchNorm(2 * hidden_channels, allow_single_element=True),
        nn.ReLU(),
        nn.Linear(2 * hidden_channels, hidden_channels),
    ]
    if output_norm:
        layers += [PyGBatchNorm(hidden_channels, allow_single_element=True), nn.ReLU()]
    return nn.Sequential(*layers)


def build_bond_encoder(atom_encoder: str | None, hidden_channels: int, bond_feature_dims: list[int] | None):
    """One layer's bond embedding: OGB's ``BondEncoder`` (3 categorical columns, summed embeddings) for ``"ogb"``,
    an ``nn.Embedding`` of the bond types for ``"zinc"``; ``None`` without categorical features."""
    if atom_encoder == "ogb":
        from ogb.graphproppred.mol_encoder import BondEncoder

        return BondEncoder(hidden_channels)
    if atom_encoder == "zinc":
        num_types = bond_feature_dims[0] if bond_feature_dims else ZINC_NUM_BOND_TYPES
        return nn.Embedding(num_types, hidden_channels)
    return None


class GINBlock(nn.Module):
    """One GIN layer: [bond encoder ->] GINEConv / GINConv -> norm -> [ReLU] -> dropout [-> + input]. Its forward
    output is the representation after the layer (the probe hooks it). The norm is called as every graphnorm norm
    is, ``norm(x, batch=, batch_size=, edge_index=, token_mask=None)``."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        norm: nn.Module,
        dropout: float,
        activation: bool,
        residual: bool,
        bond_encoder: nn.Module | None,
    ) -> None:
        super().__init__()
        mlp = two_layer_mlp(in_channels, hidden_channels, output_norm=False)
        self.bond_encoder = bond_encoder
        # eps starts at 0 and is trained (OGB); GINEConv: message ReLU(x_j + e_ji), update mlp((1 + eps) x + sum).
        self.conv = GINEConv(mlp, train_eps=True) if bond_encoder is not None else GINConv(mlp, train_eps=True)
        self.norm = norm
        self.dropout = dropout
        self.activation = activation
        self.residual = residual and in_channels == hidden_channels

    def forward(
        self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None, batch: Tensor | None, batch_size: int | None
    ) -> Tensor:
        if self.bond_encoder is not None:
            h = self.conv(x, edge_index, self.bond_encoder(edge_attr))
        else:
            h = self.conv(x, edge_index)
        h = self.norm(h, batch=batch, batch_size=batch_size, edge_index=edge_index, token_mask=None)
        if self.activation:
            h = F.relu(h)
        h = F.dropout(h, self.dropout, self.training)
        return h + x if self.residual else h


class VirtualNode(nn.Module):
    """OGB's virtual node: one learned start vector (zero at init), added to every row of its graph before each
    layer and updated after each layer but the last by ``MLP_v(sum of the graph's layer-input rows + v)``. It is a
    vector, not a row of the node matrix (DeepGCN's virtual node is a row), so the norms never see token rows.
    ``in_channels``: the width of the first layer's input (the raw features' without an atom encoder), which the
    start vector and the first update's MLP take; every later one is ``hidden_channels`` wide."""

    def __init__(
        self, in_channels: int, hidden_channels: int, num_updates: int, dropout: float, residual: bool
    ) -> None:
        super().__init__()
        self.start = nn.Parameter(torch.zeros(1, in_channels))
        self.mlps = nn.ModuleList(
            two_layer_mlp(in_channels if index == 0 else hidden_channels, hidden_channels, True)
            for index in range(num_updates)
        )
        self.dropout = dropout
        self.residual = residual

    def initial(self, batch_size: int) -> Tensor:
        """Every graph's virtual node before the first layer: the start vector."""
        return self.start.expand(batch_size, -1)  # [num_graphs, hidden]

    def update(self, index: int, v: Tensor, layer_input: Tensor, batch: Tensor, batch_size: int) -> Tensor:
        """The virtual nodes after layer ``index``: ``MLP_v`` of each graph's summed layer-input rows plus ``v``."""
        pooled = global_add_pool(layer_input, batch, batch_size) + v
        new = F.dropout(self.mlps[index](pooled), self.dropout, self.training)
        return v + new if self.residual and v.size(1) == new.size(1) else new


def warn_if_readout_is_constant(norm: nn.Module, readout: str) -> None:
    """:class:`ConstantReadoutWarning` where ``norm``, after the last layer with no activation or residual after it,
    centers each graph (:attr:`graphnorm.norms.base.NormBase.centers_each_graph`): the readout is then the same for
    every graph (mean) or depends on its size alone (sum), and the model cannot learn."""
    if getattr(norm, "centers_each_graph", False):
        name = getattr(type(norm), "registry_name", type(norm).__name__)
        warnings.warn(
            f"GIN's last layer ends in {name}, which centers each graph, so the {readout} readout is the same for "
            "every graph (or depends on its size alone): pass last_norm=False (no norm after the last layer, as "
            "PyG's models) or residual=True",
            ConstantReadoutWarning,
            stacklevel=3,
        )


def check_gin_config(config: Any) -> None:
    """GIN's virtual node is OGB's (a vector added to node rows, not a row): no token rows for sepnorm and no
    virtual-node readout. ``config``: a :class:`graphnorm.config.RunConfig`."""
    if config.readout == "virtual":
        raise ValueError("model='gin' reads out with readout=mean or sum, not 'virtual' (its virtual node is no row)")
    if isinstance(config.norm, str) and config.norm.lower() == "sepnorm":
        raise ValueError(
            "norm='sepnorm' needs graph-token rows; model='gin' has none (its virtual node is OGB's, a vector added "
            "to the node rows): use model=gcn with virtual_node=true"
        )


@register_model("gin", check_config=check_gin_config, virtual_node_rows=False)  # OGB's virtual node: no row
class GIN(nn.Module):
    """GIN with OGB's bond features and optional virtual node:
    ``model(x, edge_index, batch=None, batch_size=None, edge_attr=None) -> Tensor``.

    Layer :math:`l = 1 .. L` (:class:`GINBlock`), with :math:`e_{ji}` the bond embedding of edge :math:`j \\to i` (a
    separate bond encoder per layer, as OGB) and :math:`v_g` the virtual node of graph :math:`g`
    (:class:`VirtualNode`)::

        h_in  = h + v[batch]                                         # virtual node: added to its graph's rows
        m_i   = sum_{j -> i} ReLU(h_in_j + e_ji)                     # PyG GINEConv (GINConv without bonds)
        h     = dropout(act(norm(MLP((1 + eps_l) h_in_i + m_i))))    # act: ReLU except after the last layer
        v     = dropout(MLP_v(sum_{i in g} h_in_i + v_g))            # after every layer but the last

    with the MLPs of :func:`two_layer_mlp` and a trainable :math:`\\epsilon_l` starting at 0. The output is the last
    layer's rows (OGB's ``JK="last"``), then the readout and a linear head (graph level) or a linear head per node.
    ``last_norm=False`` leaves the norm out of the last layer, as PyG's ``BasicGNN`` does: a norm that centers each
    graph (PairNorm, InstanceNorm, ...) there, with no activation after it, makes every graph's mean readout zero.

    OGB's ogbg-molhiv setting is 5 layers, ``hidden_channels=300``, ``dropout=0.5``, ``norm="batchnorm"``,
    ``readout="mean"``, ``atom_encoder="ogb"``; OGB reports a test ROC-AUC of 77.07 +- 1.49 with the virtual node
    (Hu et al., 2020). Where ours differs from OGB's code: the norm is any registered norm (OGB's ``BatchNorm1d``
    equals ``norm="batchnorm"``); one layer is allowed (OGB needs 2); OGB's ``JK="sum"`` and other poolings are left
    out.

    Args:
        in_channels: feature width (float features), or atom vocabulary size (``atom_encoder="zinc"``), or the 9
            OGB atom columns (``atom_encoder="ogb"``).
        num_layers: number of GIN convolutions (>= 1).
        norm: registry name or an ``nn.Module`` (deep-copied per layer) after each convolution; ``norm_kwargs`` go to
            ``build_norm``. Default ``"batchnorm"`` (OGB).
        readout: ``None`` (node level) or ``"mean"`` / ``"sum"`` (graph level).
        virtual_node: OGB's virtual node (graph level only).
        residual: OGB's residual connections (``h_in`` added to each layer's output, the old ``v`` to the new one).
        atom_encoder: ``None``, ``"zinc"`` (``nn.Embedding``) or ``"ogb"`` (OGB ``AtomEncoder``).
        bond_feature_dims: values per bond feature column (from the task; the ZINC bond-type count).
        bond_encoder: embed the task's bond features into each message (OGB's ``BondEncoder``; ZINC's bond types
            as ``nn.Embedding`` rows); ``False``, or a task without categorical features (e.g. Cora's float
            features): PyG's ``GINConv`` without edge features.
        last_norm: the norm after the last convolution too (OGB, the default); ``False``: none there (PyG).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int,
        norm: str | nn.Module = "batchnorm",
        norm_kwargs: dict | None = None,
        dropout: float = 0.5,
        readout: str | None = None,
        virtual_node: bool = False,
        residual: bool = False,
        atom_encoder: str | None = None,
        bond_feature_dims: list[int] | None = None,
        bond_encoder: bool = True,
        last_norm: bool = True,
    ) -> None:
        super().__init__()
        in_channels, hidden_channels, out_channels, num_layers = check_sizes(
            in_channels, hidden_channels, out_channels, num_layers, dropout, "convs"
        )
        check_choice(readout, READOUTS, "readout")
        norm_kwargs = check_encoder_and_norm(in_channels, atom_encoder, norm, norm_kwargs)
        if virtual_node and readout is None:
            raise ValueError("virtual_node=True is for graph-level models: also set readout")
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.readout = readout
        self.input_layer = AtomInput(in_channels, hidden_channels, atom_encoder)
        self.uses_bonds = bond_encoder and atom_encoder is not None
        blocks = []
        for index in range(num_layers):
            normed = last_norm or index < num_layers - 1
            blocks.append(
                GINBlock(
                    self.input_layer.out_channels if index == 0 else hidden_channels,
                    hidden_channels,
                    # an instance is copied per layer
                    build_norm(norm, hidden_channels, **norm_kwargs) if normed else build_norm("none", hidden_channels),
                    dropout,
                    activation=index < num_layers - 1,  # OGB: no ReLU after the last layer
                    residual=residual,
                    bond_encoder=build_bond_encoder(atom_encoder, hidden_channels, bond_feature_dims)
                    if self.uses_bonds
                    else None,
                )
            )
        self.blocks = nn.ModuleList(blocks)
        if readout is not None and not residual:
            warn_if_readout_is_constant(self.blocks[-1].norm, readout)
        self.virtual_node = (
            VirtualNode(self.input_layer.out_channels, hidden_channels, num_layers - 1, dropout, residual)
            if virtual_node
            else None
        )
        self.head = nn.Linear(hidden_channels, out_channels)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_attr: Tensor | None = None,
    ) -> Tensor:
        """``x`` ``[N, in_channels]`` float (or atom ids), ``edge_attr`` ``[E, bond columns]`` (or ZINC bond types
        ``[E]``) -> ``[N, out]`` (node level) or ``[num_graphs, out]`` (graph level)."""
        self._check_inputs(x, edge_index, batch, edge_attr)
        batch = graph_level_batch(self.readout, batch, edge_index, x.size(0))
        if batch is not None and batch_size is None:
            batch_size = int(batch.max()) + 1 if batch.numel() else 0
        h = self.input_layer(x)  # [N, hidden] (raw features without an atom encoder)
        v = None if self.virtual_node is None else self.virtual_node.initial(batch_size)
        for index, block in enumerate(self.blocks):
            if v is not None:
                h = h + v[batch]
            layer_input = h
            h = block(h, edge_index, edge_attr, batch, batch_size)  # [N, hidden]
            if v is not None and index < self.num_layers - 1:
                v = self.virtual_node.update(index, v, layer_input, batch, batch_size)
        if self.readout is not None:
            h = pool_graphs(h, batch, batch_size, self.readout)  # [num_graphs, hidden]
        return self.head(h)

    def _check_inputs(self, x: Tensor, edge_index: Tensor, batch: Tensor | None, edge_attr: Tensor | None) -> None:
        """``ValueError`` (``TypeError`` for a non-integer ``edge_index``) for inputs that do not fit: sparse or
        misshapen ``x``, a bad ``edge_index`` or ``batch``, missing or misshapen bond features when bonds are used."""
        if x.is_sparse:
            raise ValueError("model 'gin' takes dense x; pass x.to_dense()")
        check_node_features(x, self.in_channels, self.input_layer.atom_encoder, parameter_dtype(self))
        check_edge_index(edge_index, x.size(0), batch, where="gin")
        if not self.uses_bonds:
            return
        if edge_attr is None:
            raise ValueError(
                "model 'gin' embeds bond features: pass edge_attr (or build it with bond_encoder=False for GINConv)"
            )
        if edge_attr.size(0) != edge_index.size(1) or edge_attr.is_floating_point():
            raise ValueError(
                f"gin: edge_attr must be integer bond features with one row per edge ({edge_index.size(1)}), got "
                f"{edge_attr.dtype} {tuple(edge_attr.shape)}"
            )

    def collapse_layers(self) -> list[tuple[str, nn.Module]]:
        """Modules whose forward output is the representation after each layer, all over the node rows, for
        :class:`graphnorm.analysis.CollapseProbe`: ``input`` (the atom encoder output, when there is one) and
        ``layer1 .. layerL`` (each :class:`GINBlock`'s output). The probe reads their ``batch`` and ``edge_index``
        from the keywords the norms receive."""
        layers: list[tuple[str, nn.Module]] = []
        if self.input_layer.encoder is not None:
            layers.append(("input", self.input_layer))
        return layers + [(f"layer{i}", block) for i, block in enumerate(self.blocks, start=1)]
