"""``graphnorm.threads.single_thread``: torch and NumPy's BLAS on one thread inside, the settings restored after,
nested blocks free, threads that use it at once each limited until they leave, and the thread count changes no
number."""

from __future__ import annotations

import threading

import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from graphnorm.analysis.collapse import collapse_records
from graphnorm.threads import single_thread


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


def test_threads_inside_at_once_each_get_one_thread_until_the_last_leaves():
    """Two threads inside at once (the probe's forward and its metrics thread, or a user's): each has one torch thread
    inside, whichever entered second; BLAS stays on one thread until the last one leaves, then is restored."""
    previous = torch.get_num_threads()
    first_inside, second_inside, first_may_leave, second_may_leave = (threading.Event() for _ in range(4))
    seen: dict[str, object] = {}

    def first() -> None:
        torch.set_num_threads(2)
        with single_thread():
            seen["first"] = torch.get_num_threads()
            first_inside.set()
            first_may_leave.wait(10)
        seen["first after"] = torch.get_num_threads()

    def second() -> None:
        torch.set_num_threads(2)
        first_inside.wait(10)
        with single_thread():
            seen["second"] = torch.get_num_threads()
            second_inside.set()
            second_may_leave.wait(10)
            seen["second, first gone"] = (torch.get_num_threads(), set(_blas_threads()))
        seen["second after"] = torch.get_num_threads()

    blas_before = _blas_threads()
    try:
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        assert second_inside.wait(10)
        assert set(_blas_threads()) == {1}
        first_may_leave.set()
        threads[0].join(10)
        second_may_leave.set()
        threads[1].join(10)
        assert _blas_threads() == blas_before
    finally:
        first_may_leave.set()
        second_may_leave.set()
        torch.set_num_threads(previous)
    assert seen == {
        "first": 1,
        "second": 1,
        "second, first gone": (1, {1}),
        "first after": 2,
        "second after": 2,
    }


def test_blas_threads_change_no_number():
    """Records computed with NumPy's BLAS on two threads (outside single_thread) equal those on one, up to round-off."""
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
    # Two BLAS threads split the products into other partial sums: the same cone up to float64 round-off.
    assert two == pytest.approx(one, rel=1e-12)
    # The probe's unit rows come from its own compiled pass (row norms summed in another order): the same cone up to
    # round-off.
    assert {r["metric"]: r["value"] for r in records}["cone_angle"] == pytest.approx(one, rel=1e-12)
