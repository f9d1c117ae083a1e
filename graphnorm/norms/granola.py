"""GRANOLA (Eliasof et al., NeurIPS 2024): graph-adaptive normalization with random node features, per graph.

A shallow message-passing network reads each node's features beside random node features (RNF) and predicts the
node's own gain and shift; the features are standardized per graph and channel, then scaled and shifted node by node.
The RNF come from generators seeded by the module's seed, the draw and the block of rows
(:func:`random_node_features`), never from torch's global generator: a node's RNF depend only on its position among
its graph's nodes, so a graph's output does not depend on the other graphs of its mini-batch, and a run repeats.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphnorm.checks import check_choice, check_count, check_edge_index, check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.graph_stats import graph_center_scale, graph_reduce, graph_variance
from graphnorm.norms.ops.precision import cast
from graphnorm.norms.registry import register_norm

# RNF are drawn in blocks of this many rows, each from its own generator, so the rows of a position never depend on
# how many rows a call needs (torch's CPU normal sampler fills the tail of a tensor differently from its body).
RNF_BLOCK_ROWS = 256
EVAL_DRAW = -1  # the draw evaluation uses: a stream of its own, apart from every training draw (0, 1, 2, ...)
SEED_LIMIT = 1 << 24  # default seeds lie below: exact in float32, so a state dict cast to float loads them unchanged
_MASK64 = (1 << 64) - 1
GNN_INPUTS = ("standardized", "raw")  # what the normalization GNN reads beside the RNF


class GranolaNoEdgesWarning(UserWarning):
    """GRANOLA was called without ``edge_index``: its normalization network saw no neighbours."""


def _mix(*values: int) -> int:
    """A 63-bit generator seed from integers (SplitMix64 steps): nearby inputs give unrelated seeds."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = ((state ^ (value & _MASK64)) + 0x9E3779B97F4A7C15) & _MASK64
        state = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        state = ((state ^ (state >> 27)) * 0x94D049BB133111EB) & _MASK64
        state ^= state >> 31
    return state >> 1


def random_node_features(positions: Tensor, features: int, seed: int, draw: int) -> Tensor:
    """Standard normal RNF ``[len(positions), features]`` in float32 on ``positions``' device: row ``p`` of the
    stream ``(seed, draw)`` for a node at position ``p`` of its graph. Drawn on the CPU, so a seed gives the same
    numbers on every device."""
    if positions.numel() == 0 or positions.device.type == "meta":  # meta: shapes only, no values to draw for
        return torch.zeros(positions.numel(), features, device=positions.device)
    blocks = int(positions.max()) // RNF_BLOCK_ROWS + 1
    table = torch.cat(
        [
            torch.randn(RNF_BLOCK_ROWS, features, generator=torch.Generator().manual_seed(_mix(seed, draw, block)))
            for block in range(blocks)
        ]
    )
    return table.to(positions.device)[positions]


def positions_in_graphs(batch: Tensor | None, num_nodes: int, device: torch.device) -> Tensor:
    """Each node's rank among its graph's nodes, in row order (``[num_nodes]`` int64)."""
    ranks = torch.arange(num_nodes, device=device)
    if batch is None:
        return ranks
    order = torch.argsort(batch, stable=True)
    graph_of_sorted = batch[order]
    sizes = torch.bincount(graph_of_sorted)
    starts = sizes.cumsum(0) - sizes
    positions = torch.empty_like(order)
    positions[order] = ranks - starts[graph_of_sorted]
    return positions


def _linear(layer: nn.Linear, x: Tensor) -> Tensor:
    """``layer(x)`` with the layer's parameters in ``x``'s dtype (half-precision modules, float64 input)."""
    return F.linear(x, cast(layer.weight, x.dtype), cast(layer.bias, x.dtype))


class _SumConv(nn.Module):
    """One layer of the normalization network: ``relu(W_root z_i + b + W_nbr sum_{j -> i} z_j)``."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.root = nn.Linear(in_channels, out_channels)
        self.neighbor = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, z: Tensor, sources: Tensor | None, targets: Tensor | None) -> Tensor:
        out = _linear(self.root, z)
        if sources is not None:
            out = out.index_add(0, targets, _linear(self.neighbor, z).index_select(0, sources))
        return F.relu(out)


@register_norm("granola")
class Granola(NormBase):
    r"""GRANOLA, from `"GRANOLA: Adaptive Normalization for Graph Neural Networks"
    <https://arxiv.org/abs/2404.13344>`_ (Eliasof, Bevilacqua, Schoenlieb & Maron, NeurIPS 2024), per graph:
    random node features :math:`\mathbf{R}_g \in \mathbb{R}^{|\mathcal{V}_g| \times K}` are drawn, a shallow
    normalization GNN reads them beside the input and predicts each node's gain and shift, and the input, standardized
    per graph and channel, is scaled and shifted node by node (the paper's GRANOLA layer):

    .. math::
        \mathbf{Z}_g = \mathrm{GNN}_{\mathrm{NORM}}(\tilde{\mathbf{X}}_g \oplus \mathbf{R}_g, \mathbf{A}_g), \quad
        \boldsymbol\gamma_i = f_1(\mathbf{z}_i), \quad \boldsymbol\beta_i = f_2(\mathbf{z}_i), \quad
        \mathbf{x}'_i = \boldsymbol\gamma_i \odot \frac{\mathbf{x}_i - \boldsymbol\mu_g}
        {\sqrt{\boldsymbol\sigma^2_g + \epsilon}} + \boldsymbol\beta_i

    with :math:`\boldsymbol\mu_g = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g}\mathbf{x}_j` and
    :math:`\boldsymbol\sigma^2_g = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g}(\mathbf{x}_j -
    \boldsymbol\mu_g)^2` per channel (biased, as InstanceNorm), :math:`\oplus` concatenation of channels and
    :math:`f_1, f_2` linear maps. The GNN's input :math:`\tilde{\mathbf{X}}_g` is the paper's
    :math:`\mathbf{X}_g` with ``gnn_input="raw"``; by default the standardized features (below). The paper leaves
    open, and these are our choices:

    * :math:`\mathrm{GNN}_{\mathrm{NORM}}`: ``num_layers`` sum-aggregation layers (GraphConv, an MPNN as the paper's
      analysis assumes), :math:`\mathbf{z}'_i = \mathrm{ReLU}(\mathbf{W}_1 \mathbf{z}_i + \mathbf{b} + \mathbf{W}_2
      \sum_{j \to i} \mathbf{z}_j)` along ``edge_index`` (source to target), ``hidden_channels`` wide.
    * RNF: :math:`K` = ``random_features`` (default ``channels``) i.i.d. standard normal entries per node, drawn again
      at every training forward (the paper resamples them); in eval mode one fixed draw, so evaluation is
      deterministic. A node's row is the row of its position among its graph's nodes in a stream seeded by
      ``seed`` and the draw (:func:`random_node_features`): graphs of one batch share the stream (two graphs' nodes at
      the same position get the same row, which leaves each graph's RNF i.i.d.), and a graph's output does not
      depend on the other graphs of its batch. The RNF never come from torch's global generator, so GRANOLA
      changes no dropout mask or data order of a run; the module counts its training draws and keeps seed and count
      in its state dict, so a resumed run draws on where it stopped.
    * The GNN's input (a deviation, ``gnn_input``): by default it reads the standardized features
      :math:`\hat{\mathbf{X}}_g = (\mathbf{X}_g - \boldsymbol\mu_g) / \sqrt{\boldsymbol\sigma^2_g + \epsilon}` in
      place of :math:`\mathbf{X}_g`, so the layer is invariant to each graph's per-channel shift and scale, as the
      standardization is. With the raw features, a new 16-layer GCN on Cora diverged in our runs (training loss
      1e11 to 1e16 within 10 epochs at lr 0.005 and 0.01): each layer's gain and shift grow with its input's scale,
      and depth compounds it.
    * Initialization: :math:`f_1` has zero weights and bias 1, :math:`f_2` zero weights and bias 0, so a new GRANOLA
      is exactly the plain standardization (InstanceNorm without affine); :math:`\epsilon` = ``eps`` (1e-5).

    Without ``edge_index`` the GNN sees no neighbours (node-wise on the features and RNF) and warns once
    (:class:`GranolaNoEdgesWarning`); in a PyG host call :func:`~graphnorm.norms.pass_edge_index` once. Statistics,
    RNF and messages stay within each graph (edges between graphs of a batch are an error).

    Args:
        channels: features per node.
        hidden_channels: width of the normalization GNN (default ``channels``).
        num_layers: layers of the normalization GNN (default 2).
        random_features: RNF per node, :math:`K` (default ``channels``).
        eps: added to the variance (default 1e-5).
        seed: seeds the RNF streams; default: drawn once from torch's global generator when the module is built, as
            its weights are (copies of a module share it; give each layer its own for independent streams).
        gnn_input: what the normalization GNN reads beside the RNF, ``"standardized"`` (default) or ``"raw"``
            (the paper's :math:`\mathbf{X}_g`).

    Raises:
        ValueError: a width, depth or count that is not a positive int, ``eps`` not a finite number > 0, ``seed``
            not an int, an unknown ``gnn_input``; at a call, edges outside the rows or between graphs of the batch.
    """

    per_graph = True
    needs_edge_index = True  # a call on rows that are not the host's nodes gets no handed edges: a clear error

    def __init__(
        self,
        channels: int,
        hidden_channels: int | None = None,
        num_layers: int = 2,
        random_features: int | None = None,
        eps: float = 1e-5,
        seed: int | None = None,
        gnn_input: str = "standardized",
    ) -> None:
        super().__init__()
        self.channels = channels
        self.hidden_channels = (
            channels if hidden_channels is None else check_count(hidden_channels, "hidden_channels", "granola")
        )
        self.num_layers = check_count(num_layers, "num_layers", "granola")
        self.random_features = (
            channels if random_features is None else check_count(random_features, "random_features", "granola")
        )
        self.eps = check_positive(eps, "eps", "granola")
        self.gnn_input = check_choice(gnn_input, GNN_INPUTS, "gnn_input", "granola")
        if seed is None:  # built on the meta device (a config check): no values, and no draw from the global RNG
            meta = torch.get_default_device().type == "meta"
            seed = 0 if meta else int(torch.randint(SEED_LIMIT, (), device="cpu"))
        self.seed = check_count(seed, "seed", "granola", -(2**63), "an int")
        self.draws = 0  # training forwards so far: the next training draw
        widths = [channels + self.random_features] + [self.hidden_channels] * self.num_layers
        self.convs = nn.ModuleList(_SumConv(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.gain = nn.Linear(self.hidden_channels, channels)  # f_1
        self.shift = nn.Linear(self.hidden_channels, channels)  # f_2
        self._init_heads()

    def _init_heads(self) -> None:
        """Gain 1 and shift 0 at every node: the plain standardization until the heads learn."""
        for head, bias in ((self.gain, 1.0), (self.shift, 0.0)):
            nn.init.zeros_(head.weight)
            nn.init.constant_(head.bias, bias)

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.root.reset_parameters()
            conv.neighbor.reset_parameters()
        self._init_heads()

    def _check_inputs(self, x: Tensor, batch: Tensor | None, batch_size: int | None, edge_index: Tensor | None) -> None:
        super()._check_inputs(x, batch, batch_size, edge_index)
        if edge_index is None:
            self._warn_no_edges()
        else:
            check_edge_index(edge_index, x.size(0), where="granola")

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None, edge_index: Tensor | None) -> Tensor:
        sources, targets = self._edges(edge_index, batch)
        draw = self.draws if self.training else EVAL_DRAW
        if self.training:
            self.draws += 1
        mean = graph_reduce(x, batch, batch_size, "mean")  # [num_graphs, C]
        inv_std = (graph_variance(x, mean, batch, batch_size) + self.eps).rsqrt()
        standardized = graph_center_scale(x, mean, inv_std, batch)
        positions = positions_in_graphs(batch, x.size(0), x.device)
        rnf = random_node_features(positions, self.random_features, self.seed, draw).to(x.dtype)
        z = torch.cat([standardized if self.gnn_input == "standardized" else x, rnf], dim=1)
        for conv in self.convs:
            z = conv(z, sources, targets)
        gain, shift = _linear(self.gain, z), _linear(self.shift, z)  # [num_nodes, channels] each
        return torch.addcmul(shift, gain, standardized)

    @staticmethod
    def _edges(edge_index: Tensor | None, batch: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        """(sources, targets) as int64, ``(None, None)`` without edges; ``ValueError`` for an edge between graphs."""
        if edge_index is None or edge_index.numel() == 0:
            return None, None
        sources, targets = edge_index[0].long(), edge_index[1].long()
        if batch is not None and bool((batch[sources] != batch[targets]).any()):
            raise ValueError("granola: edge_index connects nodes of different graphs in the batch")
        return sources, targets

    def _warn_no_edges(self) -> None:
        """:class:`GranolaNoEdgesWarning`, once per instance."""
        if self.__dict__.get("_warned_no_edges", False):
            return
        self.__dict__["_warned_no_edges"] = True
        warnings.warn(
            "granola: called without edge_index (as PyG's GCN, GAT, GraphSAGE, GIN and GPSConv call their norms), so "
            "its normalization GNN sees no neighbours, only each node's features and random features. To hand it the "
            "graph, call graphnorm.norms.pass_edge_index(model) once after building the model",
            GranolaNoEdgesWarning,
            stacklevel=3,
        )

    def get_extra_state(self) -> Tensor:
        """``[seed, draws]`` (int64): the RNF streams travel with the weights, so a resumed run draws on."""
        return torch.tensor([self.seed, self.draws], dtype=torch.int64)

    def set_extra_state(self, state: Tensor) -> None:
        self.seed, self.draws = (int(value) for value in state.tolist())

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, hidden_channels={self.hidden_channels}, num_layers={self.num_layers}, "
            f"random_features={self.random_features}, eps={self.eps}, seed={self.seed}, gnn_input={self.gnn_input!r}"
        )
