"""``collapse.single_thread``: torch and NumPy's BLAS on one thread inside, the settings restored after, nested blocks
free, and the thread count changes no number."""

from __future__ import annotations

import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from graphnorm.analysis.collapse import collapse_records, single_thread


def _blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_single_thread_limits_torch_and_blas_and_restores():
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with threadpool_limits(2, user_api="blas"):
            assert _blas_threads() and set(_blas_threads()) == {2}
            with single_thread():
                assert torch.get_num_threads() == 1 and set(_blas_threads()) == {1}
                with single_thread():
                    assert torch.get_num_threads() == 1
                assert torch.get_num_threads() == 1 and set(_blas_threads()) == {1}  # the inner block kept them
            assert torch.get_num_threads() == 2 and set(_blas_threads()) == {2}
            with pytest.raises(KeyError), single_thread():
                raise KeyError("restored on error too")
            assert torch.get_num_threads() == 2 and set(_blas_threads()) == {2}
    finally:
        torch.set_num_threads(previous)


def test_blas_threads_change_no_number():
    """Records computed with NumPy's BLAS on two threads (outside single_thread) equal those on one."""
    from graphnorm.analysis import cone

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3000, 64, generator=generator) + 0.5  # rows enough for OpenBLAS to split products
    edges = torch.randint(0, 3000, (2, 9000), generator=generator)
    records = collapse_records(x, edge_index=edges)
    x64 = x.double()
    norms = torch.linalg.vector_norm(x64, dim=-1)
    units, norms = (x64 / norms.unsqueeze(-1)).numpy(), norms.numpy()
    with threadpool_limits(2, user_api="blas"):
        two = cone.cone_from_unit_rows(units, norms, 1e-3)[0]
    with threadpool_limits(1, user_api="blas"):
        one = cone.cone_from_unit_rows(units, norms, 1e-3)[0]
    assert one == two
    # The probe's unit rows come from its own compiled pass (row norms summed in another order): the same cone up to
    # round-off.
    assert {r["metric"]: r["value"] for r in records}["cone_angle"] == pytest.approx(one, rel=1e-12)
