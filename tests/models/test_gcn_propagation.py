"""DeepGCN's ``propagation="sparse"`` (a CSR product, graphnorm.models.propagation) against PyG's GCNConv path: same
weights give the same outputs and gradients (float32 round-off) on Cora, on directed graphs with isolated nodes and
duplicate edges, on batches of graphs with virtual nodes; the per-graph cache; activation checkpointing."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from graphnorm.models import DeepGCN
from graphnorm.models.propagation import SERIAL_MULTIPLY_ADDS, CSRMatrix, SparseAdjacency

pytestmark = pytest.mark.usefixtures("one_thread")


def directed_graph(num_nodes: int = 40, num_edges: int = 150, isolated: int = 6, seed: int = 0) -> Tensor:
    """A random directed edge list with self loops and duplicates, leaving the last ``isolated`` nodes without edges."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, num_nodes - isolated, (2, num_edges), generator=generator)


def sparse_twin(model: DeepGCN) -> DeepGCN:
    """The same model (weights and all) with the sparse propagation."""
    twin = copy.deepcopy(model)
    twin.propagation = "sparse"
    return twin


def outputs_and_gradients(model: nn.Module, *args: object) -> tuple[Tensor, list[Tensor]]:
    out = model(*args)
    gradients = torch.autograd.grad(out.square().sum(), list(model.parameters()), allow_unused=True)
    return out.detach(), [torch.zeros(()) if g is None else g for g in gradients]


def assert_same_function(reference: nn.Module, candidate: nn.Module, *args: object, tol: float = 1e-4) -> None:
    """Outputs and every parameter gradient agree up to float32 round-off: relative to the output's scale, and to
    the largest gradient (a bias before a centering norm has a zero gradient up to the round-off of the others)."""
    out_ref, grads_ref = outputs_and_gradients(reference, *args)
    out, grads = outputs_and_gradients(candidate, *args)
    scale = out_ref.abs().max().clamp_min(1.0)
    torch.testing.assert_close(out, out_ref, atol=tol * scale, rtol=tol)
    scale = max(grad.abs().max() for grad in grads_ref).clamp_min(1.0)
    for name, (grad, grad_ref) in zip(
        [name for name, _ in reference.named_parameters()], zip(grads, grads_ref, strict=True), strict=True
    ):
        torch.testing.assert_close(grad, grad_ref, atol=tol * scale, rtol=tol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("adjacency", ["sym", "row"])
@pytest.mark.parametrize("undirected", [False, True])
@pytest.mark.parametrize("layer_order", ["conv-norm-act-dropout", "dropout-conv-norm-act"])
def test_sparse_equals_pyg_on_random_graphs(adjacency: str, undirected: bool, layer_order: str) -> None:
    edge_index = directed_graph()
    if undirected:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    x = torch.randn(40, 12)
    for hidden in (8, 24):  # propagate after the linear map (hidden < 12) and before it (hidden > 12)
        torch.manual_seed(0)
        model = DeepGCN(12, hidden, 5, 4, norm="pairnorm", dropout=0.0, adjacency=adjacency, layer_order=layer_order)
        assert_same_function(model, sparse_twin(model), x, edge_index)


def test_sparse_equals_pyg_on_cora_dense_and_sparse_features(data_root) -> None:
    from graphnorm.data import load_dataset

    data = load_dataset("cora").data
    torch.manual_seed(0)
    model = DeepGCN(data.num_features, 16, 7, 3, norm="pairnorm", residual=True, dropout=0.0)
    twin = sparse_twin(model)
    assert_same_function(model, twin, data.x, data.edge_index)
    assert twin._sparse_cache[2].symmetric  # Cora is undirected: the backward reuses the matrix
    assert_same_function(model, twin, data.x.to_sparse(), data.edge_index)


@pytest.mark.parametrize("norm", ["batchnorm", "pairnorm"])
def test_training_mode_dropout_draws_and_gradients_are_the_same(norm: str) -> None:
    """The sparse path's fused ReLU + dropout draws F.dropout's mask and gives its numbers, forward and backward."""
    edge_index, x = directed_graph(), torch.randn(40, 12)
    model = DeepGCN(12, 16, 3, 4, norm=norm, dropout=0.5)
    twin = sparse_twin(model)
    torch.manual_seed(3)
    out, grads = outputs_and_gradients(model, x, edge_index)
    torch.manual_seed(3)
    out_twin, grads_twin = outputs_and_gradients(twin, x, edge_index)
    torch.testing.assert_close(out_twin, out, atol=1e-5, rtol=1e-5)
    scale = max(grad.abs().max() for grad in grads).clamp_min(1.0)
    for grad, grad_twin in zip(grads, grads_twin, strict=True):
        torch.testing.assert_close(grad_twin, grad, atol=1e-4 * scale, rtol=1e-4)
    assert all(block._fuses_relu_dropout() for block in twin.blocks[:-1])  # the fused op ran in every hidden block


def test_batches_of_graphs_with_virtual_nodes_are_independent_per_graph() -> None:
    graphs = []
    for seed, size in enumerate((5, 9, 4)):
        edges = directed_graph(size, 12, isolated=1, seed=seed)
        graphs.append(Data(x=torch.randn(size, 6), edge_index=torch.cat([edges, edges.flip(0)], dim=1)))
    batch = Batch.from_data_list(graphs)
    torch.manual_seed(0)
    model = DeepGCN(6, 8, 2, 3, norm="graphnorm", readout="sum", virtual_node=True, dropout=0.0)
    twin = sparse_twin(model)
    assert_same_function(model, twin, batch.x, batch.edge_index, batch.batch, 3)
    twin.eval()
    together = twin(batch.x, batch.edge_index, batch.batch, 3)
    for index, graph in enumerate(graphs):
        alone = twin(graph.x, graph.edge_index, torch.zeros(graph.num_nodes, dtype=torch.long), 1)
        torch.testing.assert_close(together[index : index + 1], alone, atol=1e-5, rtol=1e-5)


def test_probe_reads_the_same_layers_from_both_paths() -> None:
    from graphnorm.analysis import CollapseProbe

    edge_index = directed_graph()
    data = Data(x=torch.randn(40, 12), edge_index=torch.cat([edge_index, edge_index.flip(0)], dim=1))
    model = DeepGCN(12, 16, 3, 4, norm="pairnorm")
    reference, table = CollapseProbe(model).probe(data), CollapseProbe(sparse_twin(model)).probe(data)
    assert len(table) == len(reference) > 0
    assert table.drop(columns="value").equals(reference.drop(columns="value"))  # same layers, metrics, rows
    finite = reference["value"].notna()
    assert table["value"][finite].tolist() == pytest.approx(reference["value"][finite].tolist(), rel=1e-3, abs=1e-5)


def test_adjacency_is_cached_per_graph_and_rebuilt_on_change() -> None:
    edge_index, x = directed_graph(), torch.randn(40, 12)
    model = DeepGCN(12, 8, 3, 2, dropout=0.0, propagation="sparse")
    reference = copy.deepcopy(model)
    reference.propagation = "pyg"
    model(x, edge_index)
    first = model._sparse_cache[2]
    model(x, edge_index)
    assert model._sparse_cache[2] is first  # same tensor, unedited: reused
    edge_index[1, :10] = 39  # an in-place edit is a new graph
    torch.testing.assert_close(model(x, edge_index), reference(x, edge_index), atol=1e-5, rtol=1e-5)
    assert model._sparse_cache[2] is not first
    second = model._sparse_cache[2]
    model(x, edge_index.clone())  # an equal graph in another tensor is rebuilt (identity, not contents)
    assert model._sparse_cache[2] is not second
    copied = pickle.loads(pickle.dumps(model))
    assert copied._sparse_cache is None and copied.propagation == "sparse"
    torch.testing.assert_close(copied(x, edge_index), model(x, edge_index))


@pytest.mark.parametrize("propagation", ["pyg", "sparse"])
def test_checkpoint_layers_gives_the_same_gradients(propagation: str) -> None:
    edge_index, x = directed_graph(), torch.randn(40, 12)
    torch.manual_seed(0)
    model = DeepGCN(12, 16, 3, 5, norm="pairnorm", dropout=0.5, propagation=propagation)
    checkpointed = copy.deepcopy(model)
    checkpointed.checkpoint_layers = True
    torch.manual_seed(7)
    out, grads = outputs_and_gradients(model, x, edge_index)
    torch.manual_seed(7)
    out_checkpointed, grads_checkpointed = outputs_and_gradients(checkpointed, x, edge_index)
    torch.testing.assert_close(out_checkpointed, out)  # the dropout masks are replayed in the recompute
    for grad, grad_checkpointed in zip(grads, grads_checkpointed, strict=True):
        torch.testing.assert_close(grad_checkpointed, grad)


def test_sparse_adjacency_products_match_dense_matrices() -> None:
    index = directed_graph(30, 90, isolated=3)
    weight = torch.rand(90)
    dense = torch.zeros(30, 30).index_put_((index[1], index[0]), weight, accumulate=True)  # row = target
    adjacency = SparseAdjacency(index, weight, 30)
    assert not adjacency.symmetric
    x = torch.randn(30, 7)
    torch.testing.assert_close(adjacency.matmul(x), dense @ x)
    torch.testing.assert_close(adjacency.matmul(x, transpose=True), dense.T @ x)
    x64 = x.double()  # float64 rows keep the float32 weights, as PyG's messages do
    torch.testing.assert_close(adjacency.matmul(x64), dense.double() @ x64)
    bf16 = adjacency.matmul(x.bfloat16())  # multiplied in float32, returned in the input dtype
    assert bf16.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.float(), dense @ x.bfloat16().float(), atol=0.05, rtol=0.02)
    leaf = x.clone().requires_grad_(True)
    upstream = torch.randn(30, 7)
    adjacency(leaf).backward(upstream)
    torch.testing.assert_close(leaf.grad, dense.T @ upstream)
    undirected = torch.cat([index, index.flip(0)], dim=1)
    assert SparseAdjacency(undirected, torch.ones(180), 30).symmetric
    empty = SparseAdjacency(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), 4)
    assert torch.equal(empty.matmul(torch.ones(4, 3)), torch.zeros(4, 3))


@pytest.mark.parametrize("threads", [1, 2])
def test_the_product_keeps_torch_thread_count(threads: int) -> None:
    """numba's OpenMP layer may share torch's runtime: the product must leave torch's thread count as it was."""
    torch.set_num_threads(threads)  # the one_thread fixture restores it
    adjacency = SparseAdjacency(directed_graph(), torch.rand(150), 40)
    for width in (3, 2048, 3):  # a serial product, one over SERIAL_MULTIPLY_ADDS (parallel), a serial one again
        assert (adjacency.matrix.values.size * width >= SERIAL_MULTIPLY_ADDS) == (width == 2048)
        x = torch.randn(40, width)
        torch.testing.assert_close(adjacency.matmul(x)[:, :3], adjacency.matmul(x[:, :3].contiguous()))
        assert torch.get_num_threads() == threads


def test_csr_rows_have_sorted_columns_and_sum_duplicates() -> None:
    rows, cols = torch.tensor([2, 0, 2, 2, 0]).numpy(), torch.tensor([1, 2, 0, 1, 0]).numpy()
    matrix = CSRMatrix.from_coo(rows, cols, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).numpy(), (3, 3))
    assert matrix.pointer.tolist() == [0, 2, 2, 5]
    assert matrix.columns.tolist() == [0, 2, 0, 1, 1]
    assert matrix.values.tolist() == [5.0, 2.0, 3.0, 1.0, 4.0]  # equal columns keep their order
    out = matrix.matmul(torch.eye(3))
    torch.testing.assert_close(out, torch.tensor([[5.0, 0.0, 2.0], [0.0, 0.0, 0.0], [3.0, 5.0, 0.0]]))


def test_bad_arguments_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="propagation"):
        DeepGCN(4, 8, 2, 2, propagation="dense")
    with pytest.raises(ValueError, match="checkpoint_layers"):
        DeepGCN(4, 8, 2, 2, checkpoint_layers="yes")
    with pytest.raises(ValueError, match="outside"):
        SparseAdjacency(torch.tensor([[0, 5], [1, 0]]), torch.ones(2), 5)
    with pytest.raises(ValueError, match=r"\[2, E\]"):
        SparseAdjacency(torch.tensor([0, 1]), torch.ones(2), 5)
    with pytest.raises(ValueError, match="floating point"):
        SparseAdjacency(torch.tensor([[0], [1]]), torch.ones(1, dtype=torch.long), 5)
    with pytest.raises(ValueError, match=r"x must be \[5, C\]"):
        SparseAdjacency(torch.tensor([[0], [1]]), torch.ones(1), 5).matmul(torch.ones(4, 2))
    model = DeepGCN(4, 8, 2, 2, propagation="sparse")
    with pytest.raises(ValueError, match="edge_index"):
        model(torch.randn(3, 4), torch.tensor([[0, 7], [1, 0]]))
    assert DeepGCN(4, 8, 2, 2).propagation_for(torch.randn(3, 4)) == "pyg"  # the default: small graphs keep PyG's
