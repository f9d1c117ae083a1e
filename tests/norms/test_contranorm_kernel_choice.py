"""The rule that picks ContraNorm's exact kernel (graphnorm.norms.ops.contranorm_kernel_choice), tested on any CPU
through its pure functions with made-up device types and free memory; and ContraNorm on a CPU calling it so that
its choice there is the fixed node count it always was."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from graphnorm.norms import contranorm as contranorm_module
from graphnorm.norms.ops import contranorm_kernel_choice as choice
from graphnorm.norms.ops.contranorm_kernel_choice import (
    DENSE_MAX_NODES,
    choose_contranorm_kernel,
    dense_bytes,
    dense_node_limit,
    free_device_memory,
    largest_dense_graph,
)

GIB = 1 << 30
CORA_NODES = 2708


def test_off_cuda_the_fixed_node_count_decides_whatever_the_memory() -> None:
    for device_type in ("cpu", "mps", "xpu"):
        for free in (None, 0, 1000 * GIB):
            pick = partial(
                choose_contranorm_kernel,
                channels=32,
                device_type=device_type,
                free_memory_bytes=free,
                dtype=torch.float32,
            )
            assert pick(DENSE_MAX_NODES) == "dense"
            assert pick(DENSE_MAX_NODES + 1) == "tiled"
            assert pick(DENSE_MAX_NODES + 1, tiles_apply=False) == "streaming"
            assert pick(CORA_NODES) == "tiled"
            assert pick(100, fixed_limit=50) == "tiled"


def test_on_cuda_cora_is_dense_when_memory_allows_and_streams_when_it_does_not() -> None:
    def pick(num_nodes: int, free: int | None, **kwargs) -> str:
        return choose_contranorm_kernel(num_nodes, 32, "cuda", free, torch.float32, **kwargs)

    assert pick(CORA_NODES, 139 * GIB) == "dense"  # an H200's free memory
    needed = dense_bytes(CORA_NODES, 32, torch.float32)
    assert 100e6 < needed < 160e6  # four float32 [n, n] blocks and two masks: about 18 bytes per entry
    assert pick(CORA_NODES, int(needed / choice.DENSE_MEMORY_FRACTION)) == "dense"  # exactly at the fraction
    assert pick(CORA_NODES, int(needed / choice.DENSE_MEMORY_FRACTION) - 1) == "streaming"
    # beyond the dense limit CUDA streams, even where the tiles apply: a 512-row tile is too small for a GPU
    assert pick(CORA_NODES, 10**6, tiles_apply=True) == "streaming"
    # graphs up to the CPU's limit are dense on any memory (smaller than one streaming block)
    assert pick(DENSE_MAX_NODES, 0) == "dense"
    assert pick(DENSE_MAX_NODES + 1, 0) == "streaming"
    # no memory reading: the CPU's fixed limit
    assert pick(CORA_NODES, None) == "streaming" and pick(DENSE_MAX_NODES, None) == "dense"


def test_the_users_dense_max_nodes_wins_on_every_device() -> None:
    for device_type, free in (("cpu", None), ("cuda", 139 * GIB), ("cuda", 0)):
        pick = partial(
            choose_contranorm_kernel, channels=8, device_type=device_type, free_memory_bytes=free, dtype=torch.float32
        )
        assert pick(CORA_NODES, dense_max_nodes=10**6) == "dense"
        assert pick(3, dense_max_nodes=0) in ("tiled", "streaming")
        assert pick(CORA_NODES, dense_max_nodes=CORA_NODES) == "dense"


def test_wider_dtypes_need_more_memory_and_half_counts_as_float32() -> None:
    assert dense_bytes(1000, 16, torch.float16) == dense_bytes(1000, 16, torch.float32)
    assert dense_bytes(1000, 16, torch.bfloat16) == dense_bytes(1000, 16, torch.float32)
    assert dense_bytes(1000, 16, torch.float64) > 1.7 * dense_bytes(1000, 16, torch.float32)
    free = int(dense_bytes(CORA_NODES, 32, torch.float32) / choice.DENSE_MEMORY_FRACTION)
    assert choose_contranorm_kernel(CORA_NODES, 32, "cuda", free, torch.float32) == "dense"
    assert choose_contranorm_kernel(CORA_NODES, 32, "cuda", free, torch.float64) == "streaming"


def test_the_graphs_of_one_call_share_the_memory_budget() -> None:
    """Each dense graph keeps its weights for backward, so the sum of the call's dense blocks must fit: the smaller
    graphs go dense first, up to the budget."""
    sizes = [10, 300, 1000, 1000, 2000, 5000]
    per = {n: dense_bytes(n, 16, torch.float32) for n in set(sizes)}
    fraction = choice.DENSE_MEMORY_FRACTION
    limit = partial(dense_node_limit, sizes, 16, "cuda", dtype=torch.float32)
    assert limit(free_memory_bytes=10**15) == 5000
    assert limit(free_memory_bytes=int((per[300] + 2 * per[1000] + per[2000]) / fraction)) == 2000
    # two graphs of 1000 nodes where only one fits: both stream (the limit is a node count)
    assert limit(free_memory_bytes=int((per[300] + per[1000]) / fraction)) == 300
    assert limit(free_memory_bytes=0) == DENSE_MAX_NODES
    assert dense_node_limit(sizes, 16, "cpu", 10**15, torch.float32) == DENSE_MAX_NODES


def test_largest_dense_graph_inverts_the_byte_count() -> None:
    for free in (GIB, 80 * GIB, 139 * GIB):
        n = largest_dense_graph(32, free, torch.float32)
        assert dense_bytes(n, 32, torch.float32) <= choice.DENSE_MEMORY_FRACTION * free
        assert dense_bytes(n + 1, 32, torch.float32) > choice.DENSE_MEMORY_FRACTION * free
        assert choose_contranorm_kernel(n, 32, "cuda", free, torch.float32) == "dense"
        assert choose_contranorm_kernel(n + 1, 32, "cuda", free, torch.float32) == "streaming"


def test_the_tiles_test_is_asked_only_for_a_large_graph_off_cuda() -> None:
    asked = []

    def tiles_apply() -> bool:
        asked.append(True)
        return False

    assert choose_contranorm_kernel(100, 8, "cpu", None, torch.float32, tiles_apply=tiles_apply) == "dense"
    assert choose_contranorm_kernel(5000, 8, "cuda", 0, torch.float32, tiles_apply=tiles_apply) == "streaming"
    assert not asked
    assert choose_contranorm_kernel(5000, 8, "cpu", None, torch.float32, tiles_apply=tiles_apply) == "streaming"
    assert asked == [True]


def test_no_memory_reading_off_cuda() -> None:
    assert free_device_memory(torch.device("cpu")) is None
    assert free_device_memory(torch.device("meta")) is None


@pytest.mark.parametrize("fixed_limit", [4, DENSE_MAX_NODES])
def test_contranorm_on_a_cpu_passes_its_fixed_limit_and_no_memory(monkeypatch, fixed_limit) -> None:
    """ContraNorm asks the rule with the CPU's device type, no memory reading and its module's DENSE_MAX_NODES (so
    the tests that lower it still move graphs between kernels)."""
    monkeypatch.setattr(contranorm_module, "DENSE_MAX_NODES", fixed_limit)
    seen = []

    def spy(sizes, channels, device_type, free, dtype, **kwargs):
        seen.append((list(sizes), channels, device_type, free, dtype, kwargs))
        return dense_node_limit(sizes, channels, device_type, free, dtype, **kwargs)

    monkeypatch.setattr(contranorm_module, "dense_node_limit", spy)
    norm = contranorm_module.ContraNorm(8, exclude_neighbors=False).double()
    x = torch.randn(20, 8, dtype=torch.float64)
    norm(x)
    norm(x, batch=torch.tensor([0] * 5 + [1] * 15))
    assert seen == [
        ([20], 8, "cpu", None, torch.float64, {"dense_max_nodes": None, "fixed_limit": fixed_limit}),
        ([5, 15], 8, "cpu", None, torch.float64, {"dense_max_nodes": None, "fixed_limit": fixed_limit}),
    ]


@pytest.mark.parametrize("num_nodes", [100, DENSE_MAX_NODES + 44])
@pytest.mark.parametrize("symmetric", [True, False])
def test_contranorm_on_a_cpu_runs_the_kernel_the_rule_names(monkeypatch, num_nodes, symmetric) -> None:
    """What ContraNorm runs for one graph on a CPU is what choose_contranorm_kernel names for it."""
    from graphnorm.norms.ops import contranorm_exact, contranorm_symmetric_tiles

    ran = []
    for module, name, kernel in [
        (contranorm_exact, "dense_negative_mix", "dense"),
        (contranorm_exact.StreamingNegativeMix, "apply", "streaming"),
        (contranorm_symmetric_tiles.SymmetricNegativeMix, "apply", "tiled"),
    ]:
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *args, _f=original, _k=kernel: ran.append(_k) or _f(*args))
    generator = torch.Generator().manual_seed(0)
    pairs = torch.randint(0, num_nodes, (2, 3 * num_nodes), generator=generator)
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1) if symmetric else pairs
    x = torch.randn(num_nodes, 8, generator=generator)
    contranorm_module.ContraNorm(8)(x, edge_index=edge_index)
    expected = choose_contranorm_kernel(num_nodes, 8, "cpu", None, torch.float32, tiles_apply=symmetric)
    assert ran == [expected]
