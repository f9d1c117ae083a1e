"""Every registered model, with every registered norm, runs in bfloat16 and float16 on the CPU, forward and backward,
close to the float32 model of the same weights, wherever PyG's own layers run in that dtype.

Each case builds a small model (two layers, width 8), casts a copy with ``.to(dtype)`` and compares it with the
float32 model holding the same (rounded) weights, on the same rounded input, in training mode (dropout 0) with a
backward, then in eval mode. SepNorm needs graph-token rows, so it is run on the hosts that have them only (DeepGCN
with a virtual node, Graphormer); elsewhere it refuses at any dtype.

Tolerance. Every op rounds its output to the dtype (unit roundoff ``u``: 2^-8 for bfloat16, 2^-11 for float16), and
the norms compute their statistics in float32, so the output of a two-layer model is off by some roundings of values
of its scale: the test allows ``64 u`` times the rms of the float32 output per entry (the grid's largest is 13 u, and
48 u for SepNorm in Graphormer, allowed 4 times more: its BatchNorm over the four graph-token rows, which start equal
and differ by what attention adds, amplifies rounding). Gradients are more sensitive: a ReLU input within rounding
of zero flips, and a BatchNorm over a few rows (GIN's virtual-node MLP, SepNorm's tokens) divides by a small spread.
The error of all the parameters' gradients together (L2) may be ``0.1`` of their norm in float16 (largest: 0.05)
and ``0.5`` in bfloat16 (largest: 0.21); every parameter with a float32 gradient has a finite one. A wrong path is
outside these: an adjacency or weight left in float32 fails with a dtype error, a missing gradient is off by its
whole norm, and a half value in place of a float32 statistic (PairNorm's scale as a sum of float16 squares) is off
by O(rms).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GATConv, GCN2Conv, GCNConv, GINConv

from graphnorm.data.graphormer_preprocess import GraphormerPreprocess, collate_graphormer
from graphnorm.models import GCNII, GIN, DeepGAT, DeepGCN, Graphormer
from graphnorm.norms import available_norms

pytestmark = pytest.mark.usefixtures("one_thread")

HALF = (torch.bfloat16, torch.float16)
SIZES = (3, 4, 5, 6)
CHANNELS = 6
TOLERANCE_ROUNDINGS = 64
ILL_CONDITIONED = {("graphormer", "sepnorm"): 4}  # forward tolerance factor (see the module docstring)
GRADIENT_TOLERANCE = {torch.float16: 0.1, torch.bfloat16: 0.5}  # of the gradients' norm


def rings() -> tuple[Tensor, Tensor]:
    """``edge_index`` of a ring per graph (both directions) and the batch vector."""
    edges, start = [], 0
    for n in SIZES:
        nodes = torch.arange(start, start + n)
        edges += [torch.stack([nodes, nodes.roll(1)]), torch.stack([nodes.roll(1), nodes])]
        start += n
    batch = torch.cat([torch.full((n,), g) for g, n in enumerate(SIZES)])
    return torch.cat(edges, dim=1), batch


EDGE_INDEX, BATCH = rings()
X = torch.randn(sum(SIZES), CHANNELS, generator=torch.Generator().manual_seed(0))
ATOMS = torch.randint(0, 5, (sum(SIZES), 1), generator=torch.Generator().manual_seed(1))
BONDS = torch.randint(0, 4, (EDGE_INDEX.size(1),), generator=torch.Generator().manual_seed(2))


def graphormer_batch():
    preprocess = GraphormerPreprocess(multi_hop_max_dist=2)
    graphs, start = [], 0
    for n in SIZES:
        edge_index = EDGE_INDEX[:, (EDGE_INDEX[0] >= start) & (EDGE_INDEX[0] < start + n)] - start
        graphs.append(preprocess(Data(x=ATOMS[start : start + n], edge_index=edge_index, num_nodes=n)))
        start += n
    return collate_graphormer(graphs)


GRAPHORMER_BATCH = graphormer_batch()


# name -> (builder(norm), call(model, dtype), has graph-token rows)
MODELS: dict[str, tuple[Callable[[str], nn.Module], Callable[[nn.Module, torch.dtype], Tensor], bool]] = {
    "gcn": (lambda norm: DeepGCN(CHANNELS, 8, 3, 2, norm=norm, dropout=0.0), None, False),
    "gcn-sparse": (lambda norm: DeepGCN(CHANNELS, 8, 3, 2, norm=norm, dropout=0.0, propagation="sparse"), None, False),
    "gcn-virtual-node": (
        lambda norm: DeepGCN(CHANNELS, 8, 3, 2, norm=norm, dropout=0.0, readout="mean", virtual_node=True),
        "batch",
        True,
    ),
    "gat": (lambda norm: DeepGAT(CHANNELS, 8, 3, 2, norm=norm, dropout=0.0, num_heads=2), None, False),
    "gcnii": (lambda norm: GCNII(CHANNELS, 8, 3, 2, norm=norm, dropout=0.0), None, False),
    "gin": (lambda norm: GIN(CHANNELS, 8, 3, 2, norm=norm, dropout=0.0), None, False),
    "gin-virtual-node": (
        # no norm after the last layer: one that centers each graph there would leave every output the head's bias
        lambda norm: GIN(
            5, 8, 3, 2, norm=norm, dropout=0.0, readout="mean", virtual_node=True, atom_encoder="zinc", last_norm=False
        ),
        "atoms",
        False,
    ),
    "graphormer": (
        lambda norm: Graphormer(
            2, 8, 2, out_channels=3, atom_feature_dims=[5], max_degree=4, max_distance=4, multi_hop_max_dist=2,
            norm=norm, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, init="pytorch",
        ),
        "graphormer",
        True,
    ),
}  # fmt: skip


def call(model: nn.Module, name: str, x: Tensor) -> Tensor:
    """``model`` on the test graph, with float features ``x`` where it takes them."""
    kind = MODELS[name][1]
    if kind == "graphormer":
        return model(GRAPHORMER_BATCH)
    if kind == "atoms":
        return model(ATOMS, EDGE_INDEX, BATCH, edge_attr=BONDS)
    if kind == "batch":
        return model(x, EDGE_INDEX, BATCH)
    return model(x, EDGE_INDEX)


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def assert_close_to_float32(half: Tensor, reference: Tensor, dtype: torch.dtype, factor: float, what: str) -> None:
    assert half.dtype == dtype, f"{what}: {half.dtype}, not {dtype}"
    half64, reference64 = half.detach().double(), reference.detach().double()
    assert torch.isfinite(half64).all(), f"{what}: non-finite entries"
    scale = float(reference64.square().mean().sqrt())
    error = float((half64 - reference64).abs().max())
    bound = factor * TOLERANCE_ROUNDINGS * unit_roundoff(dtype) * scale
    assert error <= bound, f"{what}: error {error:.2e}, rms {scale:.2e}"


def assert_gradients_close(half: nn.Module, reference: nn.Module, dtype: torch.dtype, what: str) -> None:
    errors, norms = [], []
    for (name, p), p_reference in zip(half.named_parameters(), reference.parameters()):
        if p_reference.grad is None:
            continue
        if p_reference.grad.abs().max() > 0:
            assert p.grad is not None, f"{what}: no gradient for {name}"
        grad = torch.zeros_like(p_reference.grad) if p.grad is None else p.grad.double()
        assert p.grad is None or p.grad.dtype == dtype, f"{what}: gradient of {name} is {p.grad.dtype}"
        assert torch.isfinite(grad).all(), f"{what}: non-finite gradient of {name}"
        errors.append((grad - p_reference.grad.double()).flatten())
        norms.append(p_reference.grad.double().flatten())
    relative = float(torch.cat(errors).norm() / torch.cat(norms).norm())
    assert relative <= GRADIENT_TOLERANCE[dtype], f"{what}: gradients off by {relative:.2e} of their norm"


def cases() -> list[tuple[str, str]]:
    return [(model, norm) for model in MODELS for norm in available_norms() if norm != "sepnorm" or MODELS[model][2]]


@pytest.mark.slow  # the grid: about 250 cases
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize(("model_name", "norm"), cases())
def test_model_in_half_precision_matches_float32(model_name: str, norm: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    half = MODELS[model_name][0](norm).to(dtype).train()
    reference = copy.deepcopy(half).float()  # the same rounded weights, computing in float32
    what = f"{model_name} norm={norm} {dtype}"
    factor = ILL_CONDITIONED.get((model_name, norm), 1)
    x = X.to(dtype)
    out, expected = call(half, model_name, x), call(reference, model_name, x.float())
    assert_close_to_float32(out, expected, dtype, factor, f"{what} train forward")
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    (out.float() * upstream).sum().backward()
    (expected * upstream).sum().backward()
    assert_gradients_close(half, reference, dtype, what)
    half.eval(), reference.eval()
    with torch.no_grad():
        out, expected = call(half, model_name, x), call(reference, model_name, x.float())
    assert_close_to_float32(out, expected, dtype, factor, f"{what} eval forward")


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_pyg_layers_the_models_use_run_in_half_precision(dtype: torch.dtype) -> None:
    """The PyG layers under the models run in both dtypes with an edge list (the reference the grid relies on)."""
    x = X.to(dtype)
    for conv in (GCNConv(CHANNELS, 4), GATConv(CHANNELS, 4, heads=2), GINConv(nn.Linear(CHANNELS, 4))):
        assert conv.to(dtype)(x, EDGE_INDEX).dtype == dtype
    assert GCN2Conv(CHANNELS, 0.1).to(dtype)(x, x, EDGE_INDEX).dtype == dtype


def test_float32_features_into_a_half_model_name_the_dtypes() -> None:
    model = DeepGCN(CHANNELS, 8, 3, 2).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"x is torch\.float32 but the model's parameters are torch\.bfloat16"):
        model(X, EDGE_INDEX)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_gin_virtual_node_takes_raw_features_narrower_than_the_hidden_width(dtype: torch.dtype) -> None:
    """The virtual node starts at the first layer's input width (the raw features'), then the hidden width."""
    model = GIN(CHANNELS, 8, 3, 3, readout="mean", virtual_node=True, residual=True, dropout=0.0).to(dtype)
    out = model(X.to(dtype), EDGE_INDEX, BATCH)
    assert out.shape == (len(SIZES), 3) and out.dtype == dtype and torch.isfinite(out).all()
    out.float().sum().backward()
    assert model.virtual_node.start.grad is not None
