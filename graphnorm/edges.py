"""Edge lists as the kernels need them: whether a pair set is symmetric (:func:`is_symmetric`,
:func:`symmetric_upward_keys`) and a sparse CSR matrix from ``(row, column, value)`` entries (:func:`csr_from_edges`).

A pair ``(r, c)`` of ``n`` nodes has the key ``r * n + c``: sorting keys sorts pairs row-major, and a pair set is
symmetric when the keys of its upward pairs (``r < c``) are the keys of its downward ones reversed.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch_geometric.utils import coalesce

__all__ = ["csr_from_edges", "is_symmetric", "symmetric_upward_keys"]


def symmetric_upward_keys(source: Tensor, target: Tensor, num_nodes: int) -> Tensor | None:
    """For pairs ``(source[k], target[k])`` of distinct nodes (no self-loops): when they are symmetric as a multiset
    (each pair as often as its reverse), the sorted keys ``source * num_nodes + target`` of the upward pairs
    (``source < target``), one per pair and its reverse; None otherwise, and for no pairs. Two sorts of half the
    pairs each."""
    upward = source < target
    if not source.numel() or 2 * int(upward.sum()) != source.numel():
        return None
    upward_keys = (source[upward] * num_nodes + target[upward]).sort().values
    downward_keys = (target[~upward] * num_nodes + source[~upward]).sort().values
    return upward_keys if torch.equal(upward_keys, downward_keys) else None


def is_symmetric(rows: Tensor | None, cols: Tensor | None, num_nodes: int) -> bool:
    """Whether the pair set ``{(rows[k], cols[k])}`` equals its transpose (repeated pairs count once; self-loops are
    their own transposes; no pairs, or None, are symmetric)."""
    if rows is None or rows.numel() == 0:
        return True
    keys = torch.unique(rows * num_nodes + cols)
    rows, cols = keys // num_nodes, keys % num_nodes
    off_diagonal = rows != cols
    if not bool(off_diagonal.any()):
        return True
    return symmetric_upward_keys(rows[off_diagonal], cols[off_diagonal], num_nodes) is not None


def csr_from_edges(
    rows: Tensor,
    cols: Tensor,
    values: Tensor,
    shape: tuple[int, int],
    *,
    presorted: bool = False,
    sum_repeats: bool = False,
) -> Tensor:
    """The sparse CSR ``shape`` matrix with entries ``values[k]`` at ``(rows[k], cols[k])`` (int64 indices),
    columns ascending within a row.

    Repeated pairs stay separate entries in their given order (a product sums each: the sort is stable), or with
    ``sum_repeats`` become one entry holding their sum (PyG's ``coalesce``, as its ``to_torch_csr_tensor``; square
    ``shape`` only). ``presorted``: the pairs are row-major sorted already (no sort). torch's one-time "beta" note
    about sparse CSR is silenced: the kernels used here are stable."""
    num_rows, num_cols = shape
    rows, cols = rows.long(), cols.long()
    if sum_repeats:
        (rows, cols), values = coalesce(torch.stack([rows, cols]), values, max(shape))
    elif not presorted:
        order = torch.sort(rows * num_cols + cols, stable=True).indices
        cols, values = cols[order], values[order]
    pointer = torch.zeros(num_rows + 1, dtype=torch.long, device=rows.device)
    pointer[1:] = torch.bincount(rows, minlength=num_rows).cumsum(0)  # the counts per row: in any order
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly", category=UserWarning)
        return torch.sparse_csr_tensor(pointer, cols, values, shape, check_invariants=False)
