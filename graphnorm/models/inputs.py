"""The input side that the message-passing models (DeepGCN, DeepGAT, GCNII, GIN) share; Graphormer has its own.

:class:`GraphRows` holds the rows one forward works on and their normalized adjacency; :class:`InputLayer` is the
atom encoder and the virtual-node rows; the ``check_*`` functions check the constructor arguments and the node
features of these models; :func:`dropout_nonzeros` drops out sparse raw features. The models themselves are in
:mod:`graphnorm.models.gcn`, :mod:`~graphnorm.models.gat`, :mod:`~graphnorm.models.gcnii` and
:mod:`~graphnorm.models.gin`; their graph-level readout is in :mod:`graphnorm.models.readout`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from graphnorm.checks import check_choice, check_count
from graphnorm.norms.ops.precision import HALF_DTYPES

ATOM_ENCODERS = (None, "zinc", "ogb")


def parameter_dtype(module: nn.Module) -> torch.dtype:
    """The dtype of ``module``'s floating-point parameters (the first one's; float32 without any): what
    ``module.to(dtype)`` set, and the dtype its float features must come in."""
    for parameter in module.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.float32


def adjacency_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a model of ``dtype`` computes its normalized adjacency in: float32 for float16 / bfloat16 (degrees
    past 256 are not exact in bfloat16; the entries are rounded to the model's dtype once, for the convolutions),
    else the model's own."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


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
    propagation_weight: Tensor | None  # [E' + num_rows] normalized adjacency entries (None: the conv weighs edges)


class InputLayer(nn.Module):
    """Atom encoder (if any) and virtual-node rows. Output ``[num_rows, width]``: layer 0 for the probe.

    ``atom_encoder``: ``None`` (float features pass through), ``"zinc"`` (an ``nn.Embedding`` of the atom types) or
    ``"ogb"`` (OGB's ``AtomEncoder`` of the 9 atom columns). ``virtual_node``: each graph's virtual-node row starts
    from one learned vector (zero at init) at the input width of the first layer.
    """

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
) -> tuple[int, int, int, int]:
    """``(in_channels, hidden_channels, out_channels, num_layers)`` as Python ints (NumPy integers are taken);
    ``ValueError`` for a width or depth that is not a positive integer (a bool or a float included), or a dropout
    outside [0, 1). ``layers`` names what ``num_layers`` counts (``"convs"``, ``"GCN2Conv layers"``)."""
    widths = tuple(
        check_count(value, name)
        for value, name in (
            (in_channels, "in_channels"),
            (hidden_channels, "hidden_channels"),
            (out_channels, "out_channels"),
        )
    )
    num_layers = check_count(num_layers, f"num_layers (number of {layers})", needed=">= 1")
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    return (*widths, num_layers)


def check_encoder_and_norm(
    in_channels: int, atom_encoder: str | None, norm: str | nn.Module, norm_kwargs: dict | None
) -> dict:
    """The atom encoder and norm arguments of a message-passing model; returns ``norm_kwargs`` as a dict.

    Raises:
        ValueError: an unknown ``atom_encoder``, ``"ogb"`` with ``in_channels`` other than its 9 atom columns, or
            ``norm_kwargs`` given with an already-built norm module.
    """
    check_choice(atom_encoder, ATOM_ENCODERS, "atom_encoder")
    if atom_encoder == "ogb" and in_channels != 9:
        raise ValueError(f"atom_encoder='ogb' expects the 9 OGB atom columns, got in_channels={in_channels}")
    norm_kwargs = dict(norm_kwargs or {})
    if isinstance(norm, nn.Module) and norm_kwargs:
        raise ValueError("norm_kwargs given together with an already-built norm module")
    return norm_kwargs


def check_node_features(
    x: Tensor, in_channels: int, atom_encoder: str | None, dtype: torch.dtype | None = None
) -> None:
    """``ValueError`` unless ``x`` fits the input: float ``[N, in_channels]`` (dense or sparse) without an atom
    encoder, in the model's ``dtype`` when given (:func:`parameter_dtype`; as PyG's layers, the models do not cast
    their input), integer atom types ``[N, 1]`` for ``"zinc"``, the 9 integer OGB atom columns for ``"ogb"``."""
    if x.is_sparse and atom_encoder is not None:
        raise ValueError("sparse x is for raw float features, not atom ids; pass x.to_dense()")
    if atom_encoder is None:
        if not x.is_floating_point() or x.dim() != 2 or x.size(1) != in_channels:
            raise ValueError(f"x must be float [num_nodes, {in_channels}], got {x.dtype} {tuple(x.shape)}")
        if dtype is not None and x.dtype != dtype:
            raise ValueError(f"x is {x.dtype} but the model's parameters are {dtype}: pass x.to({dtype})")
    elif atom_encoder == "zinc":
        if x.is_floating_point() or x.dim() not in (1, 2) or (x.dim() == 2 and x.size(1) != 1):
            raise ValueError(f"atom_encoder='zinc' needs integer atom types [num_nodes, 1], got {tuple(x.shape)}")
    elif x.is_floating_point() or x.dim() != 2 or x.size(1) != 9:
        raise ValueError(f"atom_encoder='ogb' needs integer features [num_nodes, 9], got {tuple(x.shape)}")


def dropout_nonzeros(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout`` that draws a Bernoulli only for the nonzero entries of ``x``.

    Same distribution as ``F.dropout(x, p, training)`` (a zero entry stays zero whatever its draw), but on sparse
    bag-of-words features it draws a small fraction of the random numbers of a dense mask, which would otherwise
    dominate a deep node-level run. It consumes a different random stream. A coalesced sparse COO ``x`` (values in
    row-major order, the order of ``nonzero()``) gets the same draws and stays sparse.
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
