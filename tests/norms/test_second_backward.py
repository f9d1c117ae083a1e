"""Every registered norm survives a second backward through a retained graph, with the first backward's gradients,
and passes ``torch.autograd.gradcheck`` in float64 (which also checks that backward is reentrant)."""

from __future__ import annotations

import pytest
import torch

import graphnorm.norms.contranorm as contranorm_module
from graphnorm.norms import available_norms, build_norm


def _undirected_edges(n: int, seed: int) -> torch.Tensor:
    """A random undirected edge set (both directions) on ``n`` nodes."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, n, (3 * n,), generator=generator)
    cols = torch.randint(0, n, (3 * n,), generator=generator)
    keep = rows != cols
    rows, cols = rows[keep], cols[keep]
    return torch.cat([torch.stack([rows, cols]), torch.stack([cols, rows])], dim=1)


def _two_backwards(run, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradient of ``run(x)`` against a fixed random cotangent, from two backwards through one graph."""
    out = run(x)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    loss = (out * weights).sum()
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    x.grad = None
    loss.backward(retain_graph=True)
    return first, x.grad.clone()


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("n", [300, 1100])
def test_contranorm_large_graph_second_backward_equals_the_first(n, directed) -> None:
    """Graphs over the dense limit (256 nodes) take the streaming kernels: the symmetric one for undirected edges
    (whose second backward used to crash on edges freed by the first), the row-block one for directed edges (whose
    second backward recomputed P that the first had kept, differing by rounding); n = 1100 recomputes P in both."""
    torch.manual_seed(0)
    edge_index = _undirected_edges(n, seed=n)
    if directed:
        edge_index = edge_index[:, : edge_index.size(1) // 2]
    norm = build_norm("contranorm", 8).double()
    x = torch.randn(n, 8, dtype=torch.float64, requires_grad=True)
    first, second = _two_backwards(lambda x: norm(x, edge_index=edge_index), x)
    assert torch.equal(first, second)


@pytest.mark.parametrize("directed", [False, True])
def test_contranorm_large_graph_kernels_pass_gradcheck(directed) -> None:
    """gradcheck on the streaming kernels themselves (a 40-node graph forced past the dense path)."""
    torch.manual_seed(0)
    n = 40
    edge_index = _undirected_edges(n, seed=3)
    if directed:
        edge_index = edge_index[:, : edge_index.size(1) // 2]
    norm = contranorm_module.ContraNorm(4, layer_norm=False, dense_max_nodes=0).double()
    x = torch.randn(n, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: norm(x, edge_index=edge_index), (x,), nondet_tol=0.0)


NUM_NODES, CHANNELS = 10, 4
BATCH = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
TOKEN_MASK = torch.tensor([True, False, False, False, False, True, False, False, False, False])
EDGES = torch.tensor([[0, 1, 1, 2, 5, 6, 7, 8], [1, 0, 2, 1, 6, 5, 8, 7]])
# Norms whose backward is not the derivative of their forward on purpose: gradcheck's finite differences see the
# statistics move, the analytic gradient treats them as constants.
NOT_THE_DERIVATIVE = {"adanorm", "detachnorm"}  # AdaNorm: its factor (1 - k y) is detached


def _norm_and_call(name: str):
    """``name`` built in float64 (training mode) and a function of ``x`` feeding it every input a norm may ask for."""
    torch.manual_seed(0)
    norm = build_norm(name, CHANNELS).double()
    return lambda x: norm(x, batch=BATCH, batch_size=2, edge_index=EDGES, token_mask=TOKEN_MASK)


def _input() -> torch.Tensor:
    generator = torch.Generator().manual_seed(2)
    return torch.randn(NUM_NODES, CHANNELS, generator=generator, dtype=torch.float64).requires_grad_(True)


@pytest.mark.parametrize("name", available_norms())
def test_every_norm_second_backward_equals_the_first(name) -> None:
    first, second = _two_backwards(_norm_and_call(name), _input())
    assert torch.equal(first, second)


@pytest.mark.parametrize("name", available_norms())
def test_every_norm_passes_gradcheck(name) -> None:
    run = _norm_and_call(name)
    if name in NOT_THE_DERIVATIVE:
        pytest.skip(f"{name} stops gradients through its statistics on purpose")
    assert torch.autograd.gradcheck(run, (_input(),), nondet_tol=0.0)
