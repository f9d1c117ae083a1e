"""GCNII (Chen et al., ICML 2020, "Simple and Deep Graph Convolutional Networks"), with a pluggable norm per layer.

:class:`GCNII` (GCNII and GCNII*) has its own fixed layer, :class:`GCNIIBlock` (initial residual and identity mapping
around PyG's ``GCN2Conv``); :func:`check_gcnii_config` rejects the DeepGCN layer options a run config could set for
it. The input layer, argument checks and readout it shares with the other message-passing models are in
:mod:`graphnorm.models.inputs` and :mod:`graphnorm.models.readout`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCN2Conv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import remove_self_loops

from graphnorm.checks import check_choice, check_edge_index
from graphnorm.edges import csr_from_edges
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
from graphnorm.models.readout import graph_level_batch, pool_graphs
from graphnorm.models.registry import register_model
from graphnorm.norms import build_norm
from graphnorm.norms.ops.precision import HALF_DTYPES

READOUTS = (None, "mean", "sum")


class GCNIIInput(nn.Module):
    """Atom encoder (if any), dropout, Linear to the hidden width, ReLU. Output ``[N, hidden]``: h0."""

    def __init__(self, in_channels: int, hidden_channels: int, atom_encoder: str | None, dropout: float) -> None:
        super().__init__()
        self.encoder = InputLayer(in_channels, hidden_channels, atom_encoder, virtual_node=False)
        self.lin = nn.Linear(self.encoder.out_channels, hidden_channels)
        self.dropout = dropout
        # Raw (often sparse bag-of-words) features: dropout draws only for the nonzero entries.
        self.input_dropout = dropout_nonzeros if atom_encoder is None else F.dropout

    def forward(self, x: Tensor, rows: GraphRows) -> Tensor:
        x = self.input_dropout(self.encoder(x, rows), self.dropout, self.training)
        if x.is_sparse:  # sparse COO raw features: the product skips the zeros (Cora: 1.3% nonzero)
            return F.relu(torch.sparse.mm(x, self.lin.weight.t()) + self.lin.bias)
        return F.relu(self.lin(x))


class GCNIIBlock(nn.Module):
    """One GCNII layer: dropout -> GCN2Conv(h, h0) -> norm -> ReLU. Its output is what the probe hooks.

    ``GCN2Conv`` computes, with :math:`\\hat P = D^{-1/2}(A+I)D^{-1/2}` and :math:`\\beta_l = \\log(\\lambda / l + 1)`
    (``theta`` is the paper's :math:`\\lambda`, ``layer`` is :math:`l`):

    * GCNII (``shared_weights=True``): :math:`((1-\\alpha)\\hat P h + \\alpha h_0)((1-\\beta_l) I + \\beta_l W_l)`,
      the initial residual (:math:`\\alpha h_0`) and the identity mapping (:math:`(1-\\beta_l) I`);
    * GCNII* (``shared_weights=False``): :math:`(1-\\alpha)\\hat P h((1-\\beta_l) I + \\beta_l W_l) +
      \\alpha h_0((1-\\beta_l) I + \\beta_l W'_l)`, separate weights for the propagated and the initial part. PyG's
      form; the authors' code concatenates :math:`[\\hat P h, h_0]` before one weight, which is the same function
      with the weights rescaled by :math:`1-\\alpha` and :math:`\\alpha`.

    The norm (default ``"none"``, the paper) is called as in DeepGCN, ``norm(x, batch=, batch_size=, edge_index=,
    token_mask=None)`` with ``edge_index`` without self loops.
    """

    def __init__(
        self,
        channels: int,
        alpha: float,
        theta: float,
        layer: int,
        shared_weights: bool,
        norm: nn.Module | None,
        dropout: float,
    ) -> None:
        super().__init__()
        # normalize=False: the adjacency is normalized once per forward and shared by every layer.
        self.conv = GCN2Conv(channels, alpha, theta, layer, shared_weights=shared_weights, normalize=False)
        self.norm = norm
        self.dropout = dropout

    def forward(self, x: Tensor, x_0: Tensor, rows: GraphRows, adjacency: Tensor | None) -> Tensor:
        """``adjacency``: the normalized adjacency as a sparse CSR ``[N, N]`` matrix, row ``i`` = target ``i``; None:
        PyG's propagation over ``rows``' edge list and weights (float16 / bfloat16, which torch's CSR product on the
        CPU does not take)."""
        x = F.dropout(x, self.dropout, self.training)
        if adjacency is None:
            x = self.conv(x, x_0, rows.propagation_index, rows.propagation_weight)
        else:
            x = self.conv(x, x_0, adjacency)
        if self.norm is not None:
            x = self.norm(x, batch=rows.batch, batch_size=rows.batch_size, edge_index=rows.edge_index, token_mask=None)
        return F.relu(x)


def check_gcnii_config(config: Any) -> None:
    """GCNII has its own fixed layer (sym adjacency, initial residual, dropout before each conv and before the
    output, so both ``layer_order`` values describe it): DeepGCN's other layer options would be silently ignored,
    so they are errors. ``config``: a :class:`graphnorm.config.RunConfig`."""
    defaults = type(config)()
    for key in ("residual", "adjacency", "shared_layernorm", "virtual_node"):
        if getattr(config, key) != getattr(defaults, key):
            raise ValueError(
                f"{key}={getattr(config, key)!r} is a DeepGCN option; model='gcnii' has its own layer: leave {key} "
                f"at {getattr(defaults, key)!r}"
            )
    if config.readout == "virtual":
        raise ValueError("model='gcnii' reads out with readout=mean or sum, not 'virtual'")


@register_model(
    "gcnii",
    check_config=check_gcnii_config,
    last_layer="the last GCNII layer (after norm and ReLU, before the output Linear)",
)
class GCNII(nn.Module):
    """GCNII / GCNII* with a norm per layer: ``model(x, edge_index, batch=None, batch_size=None) -> Tensor``.

    Layout (the authors' code, ``chennnM/GCNII`` ``model.py``, and PyG's ``examples/gcn2_cora.py``); the layer
    formula is :class:`GCNIIBlock`'s::

        h0 = ReLU(Linear(dropout(x)))                                   # "input": the initial representation
        h  = ReLU(norm(GCN2Conv_l(dropout(h), h0)))   for l = 1 .. L    # "layer1" .. "layerL"
        out = Linear(dropout(h))                                        # node level
        out = Linear(dropout(readout(h)))                               # graph level (readout "mean" | "sum")

    Args:
        in_channels: feature width (float features), or atom vocabulary size (``atom_encoder="zinc"``), or the 9
            OGB atom columns (``atom_encoder="ogb"``).
        hidden_channels: width of h0 and of every layer.
        num_layers: number of GCN2Conv layers (>= 1); the paper uses 64 on Cora.
        norm: registry name or an ``nn.Module`` (deep-copied per layer); ``norm_kwargs`` go to ``build_norm``.
        dropout: before the input Linear, before every conv and before the output Linear (paper: 0.6 on Cora).
        alpha: initial-residual weight :math:`\\alpha` (paper: 0.1 on Cora).
        theta: the paper's :math:`\\lambda` in :math:`\\beta_l = \\log(\\lambda/l + 1)` (paper: 0.5 on Cora).
        shared_weights: ``True`` GCNII, ``False`` GCNII* (separate weights for the initial residual).
        conv_weight_decay: weight decay of the conv weights in :meth:`parameter_groups` (paper: 0.01 on the conv
            weights, 5e-4 on the dense layers); ``None``: the optimizer's weight decay for every parameter.
        readout: ``None`` (node level) or ``"mean"``/``"sum"`` (graph level: pool, dropout, Linear head).
        atom_encoder: ``None``, ``"zinc"`` or ``"ogb"``, as in DeepGCN (then the input Linear maps the embedding).
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
        alpha: float = 0.1,
        theta: float = 0.5,
        shared_weights: bool = True,
        conv_weight_decay: float | None = None,
        readout: str | None = None,
        atom_encoder: str | None = None,
    ) -> None:
        super().__init__()
        in_channels, hidden_channels, out_channels, num_layers = check_sizes(
            in_channels, hidden_channels, out_channels, num_layers, dropout, "GCN2Conv layers"
        )
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha (initial-residual weight) must be in [0, 1], got {alpha}")
        if not theta > 0.0:
            raise ValueError(f"theta (the paper's lambda) must be > 0, got {theta}")
        if conv_weight_decay is not None and not conv_weight_decay >= 0.0:
            raise ValueError(f"conv_weight_decay must be >= 0 or None, got {conv_weight_decay}")
        check_choice(readout, READOUTS, "readout")
        norm_kwargs = check_encoder_and_norm(in_channels, atom_encoder, norm, norm_kwargs)

        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.dropout = dropout
        self.readout = readout
        self.conv_weight_decay = conv_weight_decay
        # Raw float features may come as sparse COO (the node-level trainer passes bag-of-words features so).
        self.takes_sparse_features = atom_encoder is None
        self.input_block = GCNIIInput(in_channels, hidden_channels, atom_encoder, dropout)
        self.blocks = nn.ModuleList(
            GCNIIBlock(
                hidden_channels,
                alpha,
                theta,
                layer,
                shared_weights,
                build_norm(norm, hidden_channels, **norm_kwargs),  # an instance is copied per layer
                dropout,
            )
            for layer in range(1, num_layers + 1)
        )
        self.head = nn.Linear(hidden_channels, out_channels)

    # --- structure -------------------------------------------------------------------------------------------
    def graph_rows(
        self,
        edge_index: Tensor,
        num_nodes: int,
        batch: Tensor | None,
        batch_size: int | None,
        dtype: torch.dtype = torch.float32,
    ) -> GraphRows:
        """The node rows and the normalized adjacency :math:`D^{-1/2}(A+I)D^{-1/2}` (entries computed in
        ``dtype``: a float64 model gets a float64-exact adjacency), computed once per forward."""
        check_edge_index(edge_index, num_nodes, batch)
        edge_index, _ = remove_self_loops(edge_index)
        propagation_index, propagation_weight = gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
        return GraphRows(
            num_rows=num_nodes,
            node_rows=None,
            token_rows=None,
            batch=batch,
            batch_size=batch_size,
            token_mask=None,
            edge_index=edge_index,
            propagation_index=propagation_index,
            propagation_weight=propagation_weight,
        )

    def parameter_groups(self, weight_decay: float) -> list[dict]:
        """Optimizer parameter groups: the conv weights with ``conv_weight_decay``, everything else (input and
        output Linear, encoders, norms) with ``weight_decay``. One group when ``conv_weight_decay`` is ``None``.
        The optional model method the trainer's ``build_optimizer`` uses."""
        if self.conv_weight_decay is None:
            return [{"params": list(self.parameters()), "weight_decay": weight_decay}]
        conv_params = [p for block in self.blocks for p in block.conv.parameters()]
        conv_ids = {id(p) for p in conv_params}
        dense_params = [p for p in self.parameters() if id(p) not in conv_ids]
        return [
            {"params": conv_params, "weight_decay": self.conv_weight_decay},
            {"params": dense_params, "weight_decay": weight_decay},
        ]

    # --- forward ---------------------------------------------------------------------------------------------
    def forward(
        self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None, batch_size: int | None = None
    ) -> Tensor:
        """``x`` ``[N, in_channels]`` float (or atom ids) -> ``[N, out]`` (node level) or ``[num_graphs, out]``."""
        dtype = parameter_dtype(self)
        self._check_input(x, dtype)
        batch = graph_level_batch(self.readout, batch, edge_index, x.size(0))
        rows = self.graph_rows(edge_index, x.size(0), batch, batch_size, dtype=adjacency_dtype(dtype))
        rows.propagation_weight = rows.propagation_weight.to(dtype)  # the entries rounded once for a half model
        h0 = self.input_block(x, rows)  # [N, hidden]
        adjacency = None  # half precision: PyG's propagation over the edge list (no CSR product on the CPU)
        if dtype not in HALF_DTYPES:
            # row i = target i (PyG's adj_t), repeated edges summed as PyG does: its product is cheaper on the CPU
            # than PyG's gather/scatter over edges, forward and backward
            index, n = rows.propagation_index, rows.num_rows
            adjacency = csr_from_edges(index[1], index[0], rows.propagation_weight, (n, n), sum_repeats=True)
        h = h0
        for block in self.blocks:
            h = block(h, h0, rows, adjacency)  # [N, hidden]
        if self.readout is not None:
            h = pool_graphs(h, batch, batch_size, self.readout)  # [num_graphs, hidden]
        return self.head(F.dropout(h, self.dropout, self.training))

    def _check_input(self, x: Tensor, dtype: torch.dtype) -> None:
        """``ValueError`` for node features that do not fit (:func:`~graphnorm.models.inputs.check_node_features`;
        float features in the model's ``dtype``)."""
        check_node_features(x, self.in_channels, self.input_block.encoder.atom_encoder, dtype)

    # --- probed layers ---------------------------------------------------------------------------------------
    def collapse_layers(self) -> list[tuple[str, nn.Module]]:
        """Modules whose forward output is the representation after each layer, all over the node rows, for
        :class:`graphnorm.analysis.CollapseProbe`: ``input`` (h0, after the input Linear and ReLU) and
        ``layer1 .. layerL`` (each :class:`GCNIIBlock`, after norm and ReLU). The probe reads their ``batch`` and
        ``edge_index`` from the keywords the norms receive (``"none"`` included: it is a registered norm too)."""
        return [("input", self.input_block)] + [(f"layer{i}", block) for i, block in enumerate(self.blocks, start=1)]
