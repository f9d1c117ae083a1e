"""ContraNorm: equality with a dense per-graph reference of the official formula, edge cases, linear memory."""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import graphnorm.norms.contranorm as contranorm_module
import graphnorm.norms.ops.contranorm_exact as contranorm_exact
import graphnorm.norms.ops.contranorm_symmetric_tiles as symmetric_module
from graphnorm.norms import ContraNorm, build_norm


def dense_reference(
    x: Tensor,
    batch: Tensor,
    edge_index: Tensor | None,
    scale: float,
    tau: float,
    exclude_neighbors: bool,
    identity: bool,
    layer_norm: torch.nn.Module | None,
) -> Tensor:
    """The official ``NormLayer`` 'CN' formula, one graph at a time with its full n x n matrix and negatives mask."""
    outputs, node_ids = [], []
    for graph in torch.unique(batch).tolist():
        nodes = (batch == graph).nonzero().squeeze(1)
        xg = x[nodes]  # [n_g, d]
        n = nodes.numel()
        x_hat = F.normalize(xg, dim=1)
        sim = x_hat @ x_hat.T / tau  # [n_g, n_g]
        negatives = torch.ones(n, n, dtype=torch.bool)
        if exclude_neighbors:
            negatives.fill_diagonal_(False)
            local = torch.full((x.size(0),), -1, dtype=torch.long)
            local[nodes] = torch.arange(n)
            inside = (batch[edge_index[0]] == graph) & (batch[edge_index[1]] == graph)
            negatives[local[edge_index[0, inside]], local[edge_index[1, inside]]] = False
        has_negative = negatives.any(dim=1, keepdim=True)
        sim = sim.masked_fill(~negatives, -math.inf).masked_fill(~has_negative, 0.0)
        probs = torch.softmax(sim, dim=1) * negatives  # rows without negatives: 0 (the reference gives NaN)
        base = (1 + scale) * xg if identity else xg
        outputs.append(base - scale * (probs @ xg))  # the raw x is mixed, as in the official `sim @ x`
        node_ids.append(nodes)
    order = torch.cat(node_ids)
    out = torch.cat(outputs)[torch.argsort(order)]
    return layer_norm(out) if layer_norm is not None else out


def random_graph_batch(sizes: list[int], edges_per_node: int = 3, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``batch`` and an ``edge_index``: random undirected edges inside each graph, duplicates and a self-loop."""
    generator = torch.Generator().manual_seed(seed)
    batch = torch.cat([torch.full((s,), g, dtype=torch.long) for g, s in enumerate(sizes)])
    edges, start = [], 0
    for size in sizes:
        if size > 1:
            pairs = torch.randint(0, size, (2, edges_per_node * size), generator=generator) + start
            edges += [pairs, pairs.flip(0), pairs[:, :3], torch.tensor([[start], [start]])]
        start += size
    edge_index = torch.cat(edges, dim=1) if edges else torch.empty(2, 0, dtype=torch.long)
    return batch, edge_index


def make_norm(channels: int, dtype: torch.dtype, **kwargs) -> ContraNorm:
    norm = ContraNorm(channels, **kwargs).to(dtype)
    if norm.layer_norm is not None:
        with torch.no_grad():  # non-trivial affine parameters so they are really compared
            norm.layer_norm.weight.uniform_(0.5, 1.5)
            norm.layer_norm.bias.uniform_(-0.5, 0.5)
    return norm


def compare(norm: ContraNorm, x: Tensor, batch: Tensor | None, edge_index: Tensor | None, atol: float) -> None:
    """Outputs and gradients (x and LayerNorm parameters) agree with the dense reference."""
    x = x.clone().requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    out = norm(x, batch=batch, edge_index=edge_index)
    full_batch = batch if batch is not None else torch.zeros(x.size(0), dtype=torch.long)
    ref = dense_reference(
        x_ref,
        full_batch,
        edge_index,
        norm.scale,
        norm.tau,
        norm.exclude_neighbors,
        norm.identity,
        norm.layer_norm,
    )
    torch.testing.assert_close(out, ref, atol=atol, rtol=atol)
    upstream = torch.randn_like(out)
    params = list(norm.parameters())
    grads = torch.autograd.grad(out, [x, *params], upstream)
    grads_ref = torch.autograd.grad(ref, [x_ref, *params], upstream)
    for grad, grad_ref in zip(grads, grads_ref):
        torch.testing.assert_close(grad, grad_ref, atol=10 * atol, rtol=10 * atol)


OPTIONS = list(itertools.product([True, False], [True, False], [True, False], [(1.0, 1.0), (0.6, 0.3), (2.0, 4.0)]))


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("path", ["dense", "symmetric", "row-block"])
@pytest.mark.parametrize("identity,exclude_neighbors,layer_norm,scale_tau", OPTIONS)
def test_matches_dense_reference_on_a_batch(
    monkeypatch, dtype, atol, path, identity, exclude_neighbors, layer_norm, scale_tau
) -> None:
    if path == "symmetric":
        # the edges are undirected: every graph with > 4 nodes goes through the half-tile kernel, the 37- and
        # 90-node graphs in 3 and 6 tiles per side (E recomputed in backward), the 6- and 12-node graphs in one tile
        monkeypatch.setattr(contranorm_module, "DENSE_MAX_NODES", 4)
        monkeypatch.setattr(symmetric_module, "TILE_ROWS", 16)
    elif path == "row-block":
        monkeypatch.setattr(symmetric_module, "is_symmetric", lambda *args: False)
        # every graph with > 4 nodes goes through the streaming kernel: the 37- and 90-node graphs in several row
        # blocks (P recomputed in backward), the 6- and 12-node graphs in one block (P kept for backward)
        monkeypatch.setattr(contranorm_module, "DENSE_MAX_NODES", 4)
        monkeypatch.setattr(contranorm_exact, "SINGLE_BLOCK_ELEMENTS", 0)
        monkeypatch.setattr(contranorm_exact, "BLOCK_ELEMENTS", 1024)
        monkeypatch.setattr(contranorm_exact, "MIN_BLOCK_ROWS", 8)
    else:
        monkeypatch.setattr(contranorm_module, "DENSE_CHUNK_ELEMENTS", 2000)  # several padded chunks
    scale, tau = scale_tau
    batch, edge_index = random_graph_batch([6, 1, 37, 3, 90, 12])
    x = torch.randn(batch.numel(), 8, dtype=dtype)
    norm = make_norm(8, dtype, scale=scale, tau=tau, exclude_neighbors=exclude_neighbors, identity=identity,
                     layer_norm=layer_norm)  # fmt: skip
    compare(norm, x, batch, edge_index, atol)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("exclude_neighbors", [True, False])
def test_matches_dense_reference_single_large_graph(dtype, atol, exclude_neighbors) -> None:
    """Default thresholds: one graph above DENSE_MAX_NODES takes the streaming kernel."""
    n = contranorm_module.DENSE_MAX_NODES + 150
    _, edge_index = random_graph_batch([n], edges_per_node=4)
    x = torch.randn(n, 16, dtype=dtype)
    norm = make_norm(16, dtype, scale=0.8, tau=0.5, exclude_neighbors=exclude_neighbors)
    compare(norm, x, None, edge_index, atol)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_symmetric_kernel_on_threads_is_exact_and_repeatable(monkeypatch, threads) -> None:
    """With more than one torch thread the half-tile kernel splits its tiles over Python threads (each into its own
    accumulators): still the dense reference, the same bits on every call, and torch's thread count restored."""
    monkeypatch.setattr(symmetric_module, "TILE_ROWS", 32)  # 150 nodes: 5 tiles per side, 15 upper tiles
    _, edge_index = random_graph_batch([150], edges_per_node=4)
    x = torch.randn(150, 8, dtype=torch.float64)
    norm = make_norm(8, torch.float64, scale=0.8, tau=0.5)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        compare(norm, x, None, edge_index, 1e-10)
        runs = []
        for _ in range(2):
            leaf = x.clone().requires_grad_(True)
            out = norm(leaf, edge_index=edge_index)
            out.backward(torch.ones_like(out))
            runs.append((out.detach(), leaf.grad))
        assert all(torch.equal(a, b) for a, b in zip(*runs))
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("dense_max_nodes", [0, 100, 10**6])
@pytest.mark.parametrize("single_graph", [True, False])
def test_dense_max_nodes_moves_graphs_between_exact_paths(monkeypatch, dense_max_nodes, single_graph) -> None:
    """0 streams every graph (even the 1- and 3-node ones), 10**6 computes all of them as dense n x n blocks (the
    reference's way, for comparisons); both match the reference in float64."""
    calls = {"dense": 0, "streaming": 0}
    dense_fn, streaming_fn = contranorm_exact.dense_negative_mix, contranorm_module._large_graph_mix

    def count(name, fn):
        def wrapped(*args):
            calls[name] += 1
            return fn(*args)

        return wrapped

    monkeypatch.setattr(contranorm_exact, "dense_negative_mix", count("dense", dense_fn))
    monkeypatch.setattr(contranorm_module, "_large_graph_mix", count("streaming", streaming_fn))
    sizes = [300] if single_graph else [6, 1, 300, 3, 90]
    batch, edge_index = random_graph_batch(sizes)
    x = torch.randn(batch.numel(), 8, dtype=torch.float64)
    norm = make_norm(8, torch.float64, scale=0.7, dense_max_nodes=dense_max_nodes)
    compare(norm, x, None if single_graph else batch, edge_index, 1e-10)
    expected_streaming = sum(size > dense_max_nodes for size in sizes)
    assert calls["streaming"] == expected_streaming
    assert (calls["dense"] > 0) == (expected_streaming < len(sizes))
    assert f"dense_max_nodes={dense_max_nodes}" in repr(norm)


@pytest.mark.parametrize(
    "edges,tau,dtype,expected",
    [
        ("undirected", 1.0, torch.float32, "symmetric"),
        ("undirected", 0.05, torch.float64, "symmetric"),
        ("directed", 1.0, torch.float64, "row-block"),  # the mask is not symmetric, so neither is E
        ("undirected", 0.04, torch.float32, "row-block"),  # exp(-2/tau) would underflow float32 with a fixed shift
        ("none", 0.5, torch.float64, "symmetric"),  # the transformer form: no edges, the node itself kept
    ],
)
def test_large_graphs_take_the_symmetric_kernel_when_it_is_exact(monkeypatch, edges, tau, dtype, expected) -> None:
    calls = []
    for name, kernel in (("symmetric", symmetric_module.SymmetricNegativeMix), ("row-block", None)):
        kernel = kernel or contranorm_exact.StreamingNegativeMix
        original = kernel.apply

        def counted(*args, _name=name, _original=original):
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(kernel, "apply", counted)
    monkeypatch.setattr(symmetric_module, "TILE_ROWS", 64)
    n = contranorm_module.DENSE_MAX_NODES + 100
    _, edge_index = random_graph_batch([n], edges_per_node=4, seed=3)
    if edges == "directed":
        edge_index = edge_index[:, edge_index[0] < edge_index[1]]
    x = torch.randn(n, 8, dtype=dtype)
    norm = make_norm(8, dtype, scale=0.7, tau=tau, exclude_neighbors=edges != "none")
    compare(norm, x, None, None if edges == "none" else edge_index, 1e-5 if dtype == torch.float32 else 1e-9)
    assert set(calls) == {expected}


def test_symmetry_check_ignores_duplicates_and_catches_one_missing_pair() -> None:
    rows, cols = torch.tensor([0, 1, 1, 2, 2, 0]), torch.tensor([1, 0, 0, 2, 0, 2])
    assert symmetric_module.is_symmetric(rows, cols, 3)
    assert not symmetric_module.is_symmetric(rows[:-1], cols[:-1], 3)
    assert symmetric_module.is_symmetric(None, None, 3)


@pytest.mark.parametrize("single_block_elements,kept", [(100, False), (10_000, True)])
def test_probabilities_are_kept_for_backward_only_for_small_graphs(monkeypatch, single_block_elements, kept) -> None:
    """A 50-node graph is one row block either way (BLOCK_ELEMENTS is large); P [n, n] stays alive until backward
    only when n^2 <= SINGLE_BLOCK_ELEMENTS, so a deep model's memory stays linear in n (Cora-sized graphs used to
    keep it whenever they fit in one block: +29 MB per layer)."""
    monkeypatch.setattr(contranorm_exact, "BLOCK_ELEMENTS", 1 << 20)
    monkeypatch.setattr(contranorm_exact, "SINGLE_BLOCK_ELEMENTS", single_block_elements)
    _, edge_index = random_graph_batch([50])
    x = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
    x_hat = F.normalize(x, dim=1)
    rows, cols = edge_index[0], edge_index[1]
    order = torch.argsort(rows * 50 + cols)
    out = contranorm_exact.StreamingNegativeMix.apply(x_hat, x, 1.0, rows[order], cols[order], True)
    assert out.grad_fn.keeps_probs == kept
    grad = torch.autograd.grad(out.sum(), x)[0]  # both backward paths give the reference gradient
    x_ref = x.detach().clone().requires_grad_(True)
    ref = dense_reference(x_ref, torch.zeros(50, dtype=torch.long), edge_index, 1.0, 1.0, True, True, None)
    ref_mixed = 2.0 * x_ref - ref  # (1 + s) x - (the reference output) = P x with s = 1
    (ref_grad,) = torch.autograd.grad(ref_mixed.sum(), x_ref)
    torch.testing.assert_close(out, ref_mixed.detach(), atol=1e-10, rtol=0)
    torch.testing.assert_close(grad, ref_grad, atol=1e-10, rtol=0)


@pytest.mark.parametrize("bad", [-1, 2.5, True, "256"])
def test_dense_max_nodes_rejects_bad_values(bad) -> None:
    with pytest.raises(ValueError, match="dense_max_nodes"):
        ContraNorm(8, dense_max_nodes=bad)


def test_graphs_in_a_batch_are_independent() -> None:
    batch, edge_index = random_graph_batch([20, 300, 9])
    x = torch.randn(batch.numel(), 8)
    norm = ContraNorm(8)
    together = norm(x, batch=batch, edge_index=edge_index)
    start = 0
    for graph, size in enumerate([20, 300, 9]):
        inside = batch[edge_index[0]] == graph
        alone = norm(x[start : start + size], edge_index=edge_index[:, inside] - start)
        torch.testing.assert_close(together[start : start + size], alone, atol=1e-5, rtol=1e-5)
        start += size


def test_unsorted_batch_vector() -> None:
    batch, edge_index = random_graph_batch([30, 280, 5])
    perm = torch.randperm(batch.numel())
    inverse = torch.argsort(perm)
    x = torch.randn(batch.numel(), 8)
    norm = ContraNorm(8)
    sorted_out = norm(x, batch=batch, edge_index=edge_index)
    shuffled_out = norm(x[perm], batch=batch[perm], edge_index=inverse[edge_index])
    torch.testing.assert_close(shuffled_out, sorted_out[perm], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_any_integer_edge_index_gives_the_int64_result(dtype) -> None:
    """Every integer dtype the shared edge_index check lets through, in the single-graph path and the batched one
    with an unsorted batch vector (there the pairs index a permutation), through dense blocks and streaming."""
    batch, edge_index = random_graph_batch([30, 200, 5])
    perm = torch.randperm(batch.numel())
    batch, edge_index = batch[perm], torch.argsort(perm)[edge_index]
    x = torch.randn(batch.numel(), 8, requires_grad=True)
    for norm, graph_batch in itertools.product([ContraNorm(8), ContraNorm(8, dense_max_nodes=0)], [None, batch]):
        expected = norm(x, batch=graph_batch, edge_index=edge_index)
        got = norm(x, batch=graph_batch, edge_index=edge_index.to(dtype))
        assert torch.equal(got, expected)
        (grad,) = torch.autograd.grad(got.sum(), x)
        (expected_grad,) = torch.autograd.grad(expected.sum(), x)
        assert torch.equal(grad, expected_grad)


@pytest.mark.parametrize("tau,edge_probability", [(0.05, 0.9), (0.05, 1.0), (0.005, 1.0)])
def test_float32_when_neighbours_carry_the_mass(tau, edge_probability) -> None:
    """Neighbours almost parallel to the node, negatives (almost) orthogonal: in a subtract-the-neighbours scheme
    nearly all of the all-pairs mass would cancel; here masking is exact. With every cluster mate a neighbour and
    tau = 0.005, the fixed-shift sums (exp(-200)) underflow float32 and the exact row-max recomputation must kick in
    (without it the output would be NaN)."""
    n, d = 400, 16
    same = torch.arange(n) % 2  # two clusters on orthogonal axes
    x = torch.eye(d)[same] + 1e-3 * torch.randn(n, d)
    rows, cols = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    in_cluster = (same[rows] == same[cols]) & (rows != cols) & (torch.rand(n, n) < edge_probability)
    edge_index = torch.stack([rows[in_cluster], cols[in_cluster]])
    x_leaf = x.clone().requires_grad_(True)
    out = ContraNorm(d, tau=tau, layer_norm=False)(x_leaf, edge_index=edge_index)
    x_ref = x.double().requires_grad_(True)
    ref = dense_reference(x_ref, torch.zeros(n, dtype=torch.long), edge_index, 1.0, tau, True, True, None)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)
    upstream = torch.randn(n, d, dtype=torch.float64)
    (grad,) = torch.autograd.grad(out, x_leaf, upstream.float())
    (grad_ref,) = torch.autograd.grad(ref, x_ref, upstream)
    torch.testing.assert_close(grad.double(), grad_ref, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("n", [3, contranorm_module.DENSE_MAX_NODES + 20])
def test_complete_graph_has_no_negatives_and_stays_finite(n) -> None:
    rows, cols = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    edge_index = torch.stack([rows.flatten(), cols.flatten()])
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    x = torch.randn(n, 4, requires_grad=True)
    norm = ContraNorm(4, scale=0.5, layer_norm=False)
    out = norm(x, edge_index=edge_index)
    torch.testing.assert_close(out, 1.5 * x)  # no negatives: no repulsive term
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_single_node_and_isolated_node_are_finite() -> None:
    norm = ContraNorm(4)
    single = torch.randn(1, 4, requires_grad=True)
    out = norm(single, edge_index=torch.empty(2, 0, dtype=torch.long))
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(single.grad).all()

    x = torch.randn(5, 4, requires_grad=True)
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])  # node 4 isolated
    out = norm(x, edge_index=edge_index)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    compare(make_norm(4, torch.float64), x.detach().double(), None, edge_index, 1e-10)


def test_bad_input_gives_clear_errors() -> None:
    norm = ContraNorm(4)
    x = torch.randn(5, 4)
    with pytest.raises(ValueError, match=r"shape \[num_nodes, channels\]"):
        norm(torch.randn(5), edge_index=torch.empty(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="built for 4 channels"):
        norm(torch.randn(5, 3), edge_index=torch.empty(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \[2, num_edges\]"):
        norm(x, edge_index=torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="outside"):
        norm(x, edge_index=torch.tensor([[0], [5]]))
    with pytest.raises(TypeError, match="integer"):
        norm(x, edge_index=torch.zeros(2, 1))
    with pytest.raises(ValueError, match="different graphs"):
        norm(x, batch=torch.tensor([0, 0, 1, 1, 1]), edge_index=torch.tensor([[0], [3]]))
    with pytest.raises(ValueError, match="batch must have shape"):
        norm(x, batch=torch.zeros(4, dtype=torch.long), edge_index=torch.tensor([[0], [1]]))
    with pytest.raises(ValueError, match="tau"):
        ContraNorm(4, tau=0.0)
    with pytest.raises(ValueError, match="unknown keyword"):
        build_norm("contranorm", 4, temperature=1.0)


def test_empty_input_gives_empty_output() -> None:
    for layer_norm in (True, False):
        out = ContraNorm(4, layer_norm=layer_norm)(
            torch.empty(0, 4), batch=torch.empty(0, dtype=torch.long), edge_index=torch.empty(2, 0, dtype=torch.long)
        )
        assert out.shape == (0, 4)


def test_transformer_form_needs_no_edges_and_keeps_self() -> None:
    x = torch.randn(50, 8, dtype=torch.float64)
    norm = make_norm(8, torch.float64, exclude_neighbors=False, scale=0.7, tau=0.4)
    compare(norm, x, None, None, 1e-10)


def test_registered_and_built_by_name() -> None:
    norm = build_norm("contranorm", 16, scale=0.5, tau=0.2, exclude_neighbors=False, identity=False, layer_norm=False)
    assert isinstance(norm, ContraNorm) and norm.scale == 0.5 and norm.tau == 0.2 and norm.layer_norm is None


def _rss_bytes(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


@pytest.mark.parametrize("undirected", [False, True])
def test_memory_is_linear_not_quadratic(monkeypatch, undirected) -> None:
    """Forward + backward at n = 6,000 must not allocate anything near n^2 floats (144 MB).

    Row blocks of 2^19 entries (2 MB) make the O(n * block) working set small against n^2 at this n; the default
    16 MB blocks are measured at n = 20,000 in experiments/benchmarks/bench_contranorm.py."""
    monkeypatch.setattr(contranorm_exact, "BLOCK_ELEMENTS", 1 << 19)
    n, d = 6_000, 4
    x = torch.randn(n, d, requires_grad=True)
    edge_index = torch.randint(0, n, (2, 5 * n))
    if undirected:  # the half-tile kernel, 512 x 512 tiles
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    norm = ContraNorm(d)
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset the peak-RSS counter VmHWM
    baseline = _rss_bytes("VmRSS")
    norm(x, edge_index=edge_index).sum().backward()
    extra = _rss_bytes("VmHWM") - baseline
    assert extra < 0.25 * n * n * 4, f"peak extra memory {extra / 1e6:.1f} MB; n x n would be {n * n * 4 / 1e6:.0f} MB"
    assert torch.isfinite(x.grad).all()


def test_without_edge_index_the_default_form_is_the_all_nodes_form_and_warns_once_per_instance() -> None:
    """Called as PyG's hosts call their norms (no edge_index), the default form computes exclude_neighbors=False's
    all-nodes form exactly, and says so once per instance; the all-nodes form itself never warns."""
    from graphnorm.norms import NeighborsNotExcludedWarning

    x = torch.randn(9, 4, dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])
    default = make_norm(4, torch.float64)
    all_nodes = ContraNorm(4, exclude_neighbors=False).double()
    all_nodes.load_state_dict(default.state_dict())
    with pytest.warns(NeighborsNotExcludedWarning, match=r"pass_edge_index\(model\).*exclude_neighbors=False"):
        out = default(x, batch, 2)
    torch.testing.assert_close(out, all_nodes(x, batch, 2), rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default(x, batch, 2)  # the same instance warns once
        all_nodes(x)
    with pytest.warns(NeighborsNotExcludedWarning):
        make_norm(4, torch.float64)(x)  # another instance warns again
    # with edges the default form still leaves the neighbours out: a different result
    edge_index = torch.tensor([[0, 1, 4, 5], [1, 0, 5, 4]])
    assert not torch.allclose(default(x, batch, 2, edge_index), out)
