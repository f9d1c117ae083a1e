"""DeepGAT: a deep GAT (Veličković et al., ICLR 2018) with a pluggable norm per layer, DeepGCN with attention.

:class:`DeepGAT` is :class:`~graphnorm.models.gcn.DeepGCN` with every ``GCNConv`` replaced by PyG's ``GATConv``, so
everything else is DeepGCN's and behaves the same: the block layout and layer orders, the norms and the shared
LayerNorm, residuals, readouts, the virtual node, the atom encoders, the input checks and the probed layers. Read
:mod:`graphnorm.models.gcn` for those, and :class:`DeepGAT` for the attention options.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv
from torch_geometric.utils import add_self_loops

from graphnorm.checks import check_choice, check_count
from graphnorm.models.gcn import DeepGCN
from graphnorm.models.initialization import INITS, kipf_init
from graphnorm.models.registry import register_model

ATTENTION_INITS = ("glorot", "zeros")


def check_gat_config(config: Any) -> None:
    """GATConv weighs neighbours by attention (self loops included), so there is no adjacency to choose; its hidden
    heads are concatenated to hidden_channels unless model_kwargs sets concat=false. ``config``: a
    :class:`graphnorm.config.RunConfig`."""
    if config.adjacency != "sym":
        raise ValueError(
            f"adjacency={config.adjacency!r} is a DeepGCN option: model='gat' weighs neighbours by attention; "
            "leave adjacency at 'sym'"
        )
    concat = config.model_kwargs.get("concat", True)
    if concat is True and config.hidden_channels % config.num_heads != 0:
        raise ValueError(
            f"num_heads={config.num_heads} must divide hidden_channels={config.hidden_channels} for model='gat' "
            "(its heads are concatenated), or set model_kwargs concat: false"
        )


@register_model(
    "gat",
    check_config=check_gat_config,
    last_layer={
        "node": "the classifier output (logits: the last GAT conv, heads averaged, no norm)",
        "graph": "the last GAT block (after norm and activation, before the readout)",
    },
)
class DeepGAT(DeepGCN):
    """Deep GAT with a norm per hidden layer; :class:`DeepGCN` describes the layout.

    Convolutions: the hidden layers' ``GATConv(width, hidden_channels // heads, heads=heads, concat=True)``
    concatenate their heads back to ``hidden_channels`` (the GAT paper, PyG's ``GAT``, the PairNorm/ContraNorm
    ``GraphAttConv``); with ``concat=False`` each head is ``hidden_channels`` wide and the heads are averaged. The
    node-level classifier is ``GATConv(width, out_channels, heads=output_heads, concat=False)`` (heads averaged; the
    PairNorm/ContraNorm code uses 1 head, PyG's ``GAT`` uses ``heads``). Attention runs over each row's neighbours
    and itself; the attention weights replace the fixed normalized adjacency, so there is no ``adjacency``.

    Args (besides DeepGCN's, which mean the same):
        num_heads: attention heads of every hidden layer (``hidden_channels`` must be divisible by it when ``concat``).
        concat: concatenate the hidden heads (each ``hidden_channels // heads`` wide) or average them (each
            ``hidden_channels`` wide).
        output_heads: heads of the node-level classifier, averaged.
        attention_dropout: dropout on the attention coefficients in training; ``None``: the same as ``dropout`` (as
            PyG's ``GAT`` and the PairNorm/ContraNorm code). Deep models may need 0: with dropout 0.6 both before
            every convolution and on every layer's attention, no norm lets a GAT of 8 or more layers learn Cora
            (results page, study ``cora_gat_attention_dropout``).
        negative_slope: LeakyReLU slope of the attention scores (GAT: 0.2).
        init: linear weights and bias. ``"glorot"``: ``GATConv``'s own (Glorot weights, zero bias); ``"kipf"``:
            uniform in :math:`\\pm 1/\\sqrt{\\text{width}}`, ``width`` the layer's output width (heads concatenated),
            as DeepGCN's ``init="kipf"``.
        attention_init: attention vectors. ``"glorot"``: ``GATConv``'s own; ``"zeros"``: every attention score
            starts at 0, so each layer starts as the plain mean over a node and its neighbours (DeepGCN with
            ``adjacency="row"``) and learns to weigh them from there. With ``init="kipf"`` the model at step 0 is
            the row-adjacency DeepGCN of the ContraNorm protocol. With Glorot attention the loss gradient of a deep
            GAT at initialization is far larger at the first layer's output than at the last, and no norm lets a
            32-layer GAT learn Cora under that protocol; with zero attention the gradients are spread about as in
            the row-adjacency GCN. The GAT protocol preset uses both, with ``activation="elu"`` (results page,
            study ``cora_gat_contranorm_protocol``).
        activation: ``"relu"`` (DeepGCN's) or ``"elu"`` (the GAT paper's, PairNorm's and ContraNorm's ``DeepGAT``);
            with ReLU the 32-layer ContraNorm GAT of that protocol learns Cora much worse (results page, study
            ``cora_gat_relu``).
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
        layer_order: str = "conv-norm-act-dropout",
        shared_layernorm: bool = False,
        readout: str | None = None,
        virtual_node: bool = False,
        atom_encoder: str | None = None,
        num_heads: int = 4,
        concat: bool = True,
        output_heads: int = 1,
        attention_dropout: float | None = None,
        negative_slope: float = 0.2,
        init: str = "glorot",
        attention_init: str = "glorot",
        activation: str = "relu",
    ) -> None:
        heads, output_heads = check_count(num_heads, "num_heads"), check_count(output_heads, "output_heads")
        whole = isinstance(hidden_channels, numbers.Integral) and not isinstance(hidden_channels, bool)
        if concat and whole and hidden_channels % heads != 0:  # other widths: DeepGCN's check names them
            raise ValueError(
                f"hidden_channels={hidden_channels} must be divisible by num_heads={heads} when concat=True "
                "(the heads are concatenated to hidden_channels); or set concat=False"
            )
        if attention_dropout is not None and not 0.0 <= attention_dropout < 1.0:
            raise ValueError(f"attention_dropout must be in [0, 1) or None, got {attention_dropout}")
        if not negative_slope >= 0.0:
            raise ValueError(f"negative_slope must be >= 0, got {negative_slope}")
        check_choice(init, INITS, "init")
        check_choice(attention_init, ATTENTION_INITS, "attention_init")
        # DeepGCN builds and checks everything (input layer, norms, blocks, head); its GCNConvs are swapped below.
        super().__init__(
            in_channels,
            hidden_channels,
            out_channels,
            num_layers,
            norm=norm,
            norm_kwargs=norm_kwargs,
            dropout=dropout,
            residual=residual,
            layer_order=layer_order,
            shared_layernorm=shared_layernorm,
            readout=readout,
            virtual_node=virtual_node,
            atom_encoder=atom_encoder,
            activation=activation,
        )
        self.adjacency = None  # attention weights replace the normalized adjacency
        self.heads = heads
        self.concat = concat
        self.output_heads = output_heads
        self.attention_dropout = dropout if attention_dropout is None else attention_dropout
        self.negative_slope = negative_slope
        for block in self.blocks:
            block.conv = self.attention_conv(block.conv.in_channels, block.conv.out_channels, block.is_output)
            self._initialize(block.conv, init, attention_init)

    @staticmethod
    def _initialize(conv: GATConv, init: str, attention_init: str) -> None:
        """Re-initialize ``conv`` per ``init`` and ``attention_init`` (see the class docstring); "glorot" keeps
        GATConv's own."""
        if init == "kipf":
            kipf_init(conv)
        if attention_init == "zeros":
            nn.init.zeros_(conv.att_src)
            nn.init.zeros_(conv.att_dst)

    def attention_conv(self, in_channels: int, out_channels: int, is_output: bool) -> GATConv:
        """The ``GATConv`` mapping ``in_channels`` to ``out_channels`` (heads concatenated or averaged)."""
        heads = self.output_heads if is_output else self.heads
        concat = self.concat and not is_output
        return GATConv(
            in_channels,
            out_channels // heads if concat else out_channels,
            heads=heads,
            concat=concat,
            negative_slope=self.negative_slope,
            dropout=self.attention_dropout,
            add_self_loops=False,  # added once per forward in graph_rows
        )

    def _normalized_adjacency(self, edge_index: Tensor, num_rows: int, dtype: torch.dtype) -> tuple[Tensor, None]:
        """Every row's edges plus its self loop, and no weights (so no ``dtype``): ``GATConv`` computes its own.
        The self loops are added once per forward here (``GATConv(add_self_loops=False)``), not in every layer as a
        default ``GATConv`` does."""
        index, _ = add_self_loops(edge_index, num_nodes=num_rows)  # edge_index comes without self loops
        return index, None
