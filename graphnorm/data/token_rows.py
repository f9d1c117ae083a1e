"""The row layout of graphs with one graph token each (a virtual node, Graphormer's graph token): every graph's
token row first, then its node rows, graph by graph. DeepGCN's virtual node and Graphormer's batches share it."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class TokenRows:
    """``R = num_nodes + B`` rows. ``row_batch`` ``[R]`` graph of each row; ``token_mask`` ``[R]``; ``token_rows``
    ``[B]`` row of each graph's token; ``node_rows`` ``[num_nodes]`` row of each node (nodes graph by graph)."""

    row_batch: Tensor
    token_mask: Tensor
    token_rows: Tensor
    node_rows: Tensor


def token_row_layout(counts: Tensor) -> TokenRows:
    """The layout for graphs of ``counts[g]`` nodes (``[B]`` long; nodes numbered graph by graph)."""
    device = counts.device
    graph_ids = torch.arange(counts.numel(), device=device)
    row_counts = counts + 1  # token + nodes
    token_rows = torch.cumsum(row_counts, 0) - row_counts  # [B]
    row_batch = torch.repeat_interleave(graph_ids, row_counts)  # [R]
    token_mask = torch.zeros(row_batch.numel(), dtype=torch.bool, device=device)
    token_mask[token_rows] = True
    node_batch = torch.repeat_interleave(graph_ids, counts)  # [num_nodes]
    node_rows = torch.arange(node_batch.numel(), device=device) + node_batch + 1  # node i of graph b: i + b + 1
    return TokenRows(row_batch, token_mask, token_rows, node_rows)
