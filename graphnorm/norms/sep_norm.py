"""SepNorm (Chen et al., 2023): separate normalization for the graph token and the node tokens."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.utils import subgraph

from graphnorm.norms.base import NormBase
from graphnorm.norms.layer_norm import LayerNorm
from graphnorm.norms.ops.graph_stats import num_graphs
from graphnorm.norms.ops.input_checks import check_token_mask
from graphnorm.norms.registry import build_norm, register_norm

# One line for a host without graph-token rows (every PyG model and layer): what is missing, who has it, what else.
NO_TOKEN_ROWS = (
    "sepnorm: token_mask is required: SepNorm normalizes one graph-token row per graph apart from the node rows, and "
    "this host marks none (PyG's GCN, GAT, GraphSAGE, GIN and GPSConv have no token rows); hosts with token rows "
    "are graphnorm's models 'graphormer', and 'gcn' or 'gat' with virtual_node=True at graph level; elsewhere use "
    "its node norm alone, e.g. build_norm('layernorm', channels)"
)


@register_norm("sepnorm")
class SepNorm(NormBase):
    r"""Separate normalization, from `"On Separate Normalization in Self-supervised Transformers"
    <https://arxiv.org/abs/2309.12931>`_ (Chen et al., NeurIPS 2023): the [CLS]-like graph-token row of each graph and
    the node rows go through two different norms,

    .. math::
        \mathbf{x}'_i = \begin{cases} \mathrm{Norm}_{\text{token}}(\mathbf{x}_i) & i \text{ is a graph token} \\
        \mathrm{Norm}_{\text{node}}(\mathbf{x}_i) & \text{otherwise.} \end{cases}

    ``token_mask`` (bool ``[num_nodes]``) is required and must mark exactly one row per graph of ``batch``. The token
    rows are passed with their graph ids as ``batch``, so the default BatchNorm normalizes across the graphs of the
    batch, as the paper's BatchNorm for [CLS]; with one graph in training mode it uses its running statistics (see
    :class:`~graphnorm.norms.BatchNorm`). The node rows keep their ``batch`` entries and ``edge_index`` restricted to
    node-node edges, relabelled. Neither sub-norm receives ``token_mask``.

    Args:
        channels: features per node.
        token_norm: :math:`\mathrm{Norm}_{\text{token}}`, a registered name (default ``"batchnorm"``) or a built norm.
        node_norm: :math:`\mathrm{Norm}_{\text{node}}`, a registered name (default ``"layernorm"``) or a built norm.
        token_kwargs: keywords for ``token_norm`` (with a name only).
        node_kwargs: keywords for ``node_norm`` (with a name only).

    Raises:
        ValueError: ``token_norm`` or ``node_norm`` is ``"sepnorm"`` or unknown, or its keywords are; in forward, a
            missing ``token_mask`` (a host without graph-token rows, e.g. any PyG model: the message names the hosts
            that have them) or a malformed one.
        TypeError: ``token_mask`` is not a bool tensor.
    """

    per_graph = True
    computes_in_float32 = False  # each sub-norm computes in its own dtype

    def __init__(
        self,
        channels: int,
        token_norm: str | nn.Module = "batchnorm",
        node_norm: str | nn.Module = "layernorm",
        token_kwargs: dict[str, Any] | None = None,
        node_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.channels = channels
        if any(isinstance(n, str) and n.lower() == "sepnorm" for n in (token_norm, node_norm)):
            raise ValueError("sepnorm: token_norm and node_norm cannot themselves be 'sepnorm'")
        self.token_norm = build_norm(token_norm, channels, **(token_kwargs or {}))
        self.node_norm = build_norm(node_norm, channels, **(node_kwargs or {}))

    def _normalize(
        self,
        x: Tensor,
        batch: Tensor | None,
        batch_size: int | None,
        edge_index: Tensor | None,
        token_mask: Tensor | None,
    ) -> Tensor:
        if token_mask is None:
            raise ValueError(NO_TOKEN_ROWS)
        check_token_mask(x, batch, token_mask, batch_size, "sepnorm")
        graphs = num_graphs(batch, batch_size)
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        # Row indices once; index_select / index_copy_ copy whole rows (boolean indexing redoes nonzero each time
        # and index_put_ with a mask is several times slower than index_copy_ on wide rows).
        token_rows = token_mask.nonzero().squeeze(1)
        token_out = self.token_norm(
            x.index_select(0, token_rows), batch=batch.index_select(0, token_rows), batch_size=graphs
        )  # [num_graphs, C]
        if isinstance(self.node_norm, LayerNorm) and self.node_norm.mode == "node":
            # Row-wise node norm (the default): normalizing all rows and overwriting the token rows gives the same
            # result without gathering the node rows and scattering them back (two full-size copies fewer).
            # F.layer_norm does not save its output, so writing the token rows into it in place is autograd-safe.
            return self.node_norm(x).index_copy_(0, token_rows, token_out.to(x.dtype))
        node_rows = (~token_mask).nonzero().squeeze(1)
        node_edge_index = None
        if edge_index is not None:
            node_edge_index, _ = subgraph(~token_mask, edge_index, relabel_nodes=True, num_nodes=x.size(0))
        node_out = self.node_norm(
            x.index_select(0, node_rows),
            batch=batch.index_select(0, node_rows),
            batch_size=graphs,
            edge_index=node_edge_index,
        )  # [num_nodes - num_graphs, C]
        # Every row is written exactly once; index_copy_'s backward only gathers the gradient rows.
        out = torch.empty_like(x)
        return out.index_copy_(0, node_rows, node_out.to(x.dtype)).index_copy_(0, token_rows, token_out.to(x.dtype))

    def extra_repr(self) -> str:
        return f"{self.channels}"
