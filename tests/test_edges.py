"""``graphnorm.edges``: the symmetric-pair tests (a set, and a multiset of distinct-node pairs with its upward keys)
and the CSR builder (stable order, repeats kept or summed, presorted input) against direct references."""

from __future__ import annotations

import warnings

import torch

from graphnorm.edges import csr_from_edges, is_symmetric, symmetric_upward_keys


def _set_reference(rows: torch.Tensor, cols: torch.Tensor, n: int) -> bool:
    """The pair set equals its transpose, by the keys of both sides."""
    forward = torch.unique(rows * n + cols)
    backward = torch.unique(cols * n + rows)
    return forward.numel() == backward.numel() and bool(torch.equal(forward, backward))


def _random_pairs(generator: torch.Generator, n: int, count: int, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.randint(0, n, (count,), generator=generator)
    cols = torch.randint(0, n, (count,), generator=generator)
    if symmetric:
        rows, cols = torch.cat([rows, cols]), torch.cat([cols, rows])
    order = torch.randperm(rows.numel(), generator=generator)
    return rows[order], cols[order]


def test_is_symmetric_is_the_set_test():
    generator = torch.Generator().manual_seed(0)
    for case in range(60):
        n = int(torch.randint(1, 9, (1,), generator=generator))
        rows, cols = _random_pairs(generator, n, int(torch.randint(1, 12, (1,), generator=generator)), case % 2 == 0)
        assert is_symmetric(rows, cols, n) == _set_reference(rows, cols, n)
    rows, cols = torch.tensor([0, 1, 1, 2, 2]), torch.tensor([1, 0, 2, 1, 2])
    assert is_symmetric(rows, cols, 3)
    assert is_symmetric(torch.cat([rows, rows[:1]]), torch.cat([cols, cols[:1]]), 3)  # a repeated pair counts once
    assert not is_symmetric(rows[:-2], cols[:-2], 3)
    assert is_symmetric(None, None, 3) and is_symmetric(torch.tensor([2]), torch.tensor([2]), 3)


def test_symmetric_upward_keys_counts_repeats():
    source, target = torch.tensor([0, 1, 0, 2, 1]), torch.tensor([1, 0, 2, 0, 0])
    assert symmetric_upward_keys(source[:4], target[:4], 3).tolist() == [1, 2]  # (0, 1) and (0, 2), sorted
    assert symmetric_upward_keys(source, target, 3) is None  # (1, 0) twice, (0, 1) once
    assert symmetric_upward_keys(source[:3], target[:3], 3) is None
    assert symmetric_upward_keys(source[:0], target[:0], 3) is None


def test_csr_keeps_repeats_in_order_and_columns_ascending():
    rows, cols = torch.tensor([2, 0, 2, 0, 2]), torch.tensor([1, 2, 0, 2, 1])
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    matrix = csr_from_edges(rows, cols, values, (3, 4))
    assert matrix.layout == torch.sparse_csr and matrix.shape == (3, 4)
    assert matrix.crow_indices().tolist() == [0, 2, 2, 5]
    assert matrix.col_indices().tolist() == [2, 2, 0, 1, 1]
    assert matrix.values().tolist() == [2.0, 4.0, 3.0, 1.0, 5.0]  # a repeated pair keeps its given order
    dense = torch.zeros(3, 4).index_put_((rows, cols), values, accumulate=True)
    assert torch.equal(matrix.to_dense(), dense)


def test_csr_sums_repeats_as_pyg_and_takes_presorted_pairs():
    from torch_geometric.utils import to_torch_csr_tensor

    generator = torch.Generator().manual_seed(1)
    rows, cols = _random_pairs(generator, 6, 20, symmetric=False)
    values = torch.rand(rows.numel(), generator=generator, dtype=torch.float64)
    summed = csr_from_edges(rows, cols, values, (6, 6), sum_repeats=True)
    with warnings.catch_warnings():  # torch's beta note on sparse CSR, which the builder silences
        warnings.simplefilter("ignore", UserWarning)
        pyg = to_torch_csr_tensor(torch.stack([rows, cols]), values, (6, 6))
    for ours, theirs in zip(
        (summed.crow_indices(), summed.col_indices(), summed.values()),
        (pyg.crow_indices(), pyg.col_indices(), pyg.values()),
    ):
        assert torch.equal(ours, theirs)  # the same coalesce, the same sums
    keys = torch.unique(rows * 6 + cols)
    presorted = csr_from_edges(keys // 6, keys % 6, torch.ones(keys.numel()), (6, 6), presorted=True)
    assert torch.equal(presorted.to_dense(), (pyg.to_dense() != 0).float())
