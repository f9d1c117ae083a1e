"""``graphnorm.threads.shared_pool``: one pool of worker threads per process, kept across calls, grown when a caller
needs more workers, made again in a forked child; the kernels that split work over threads use it."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from graphnorm import threads
from graphnorm.threads import shared_pool


def test_the_pool_is_kept_and_grown_only_when_more_workers_are_needed():
    first = shared_pool(2)
    assert shared_pool(2) is first and shared_pool(1) is first  # a smaller need takes the larger pool
    larger = shared_pool(3)
    assert larger is not first and shared_pool(2) is larger
    assert larger.submit(os.getpid).result() == os.getpid()  # threads of this process


def test_workers_below_one_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        shared_pool(0)


def _child_pool(queue: multiprocessing.Queue) -> None:
    inherited = threads._pool
    pool = shared_pool(1)
    queue.put((inherited is None, pool.submit(lambda: 7).result()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_makes_its_own_pool():
    shared_pool(2).submit(int).result()  # the parent's pool has started threads
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_pool, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert queue.get(timeout=10) == (True, 7)


def test_the_kernels_take_their_threads_from_the_shared_pool():
    from graphnorm.models import propagation
    from graphnorm.norms.ops import contranorm_symmetric_tiles

    assert propagation.shared_pool is shared_pool
    assert contranorm_symmetric_tiles.shared_pool is shared_pool
