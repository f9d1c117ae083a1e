"""SizeBucketBatchSampler: every graph once per epoch, less padding, seeded, and wired into Graphormer training."""

from __future__ import annotations

import pytest
import torch

from graphnorm.config import RunConfig
from graphnorm.data.size_buckets import SizeBucketBatchSampler


def sizes_like_zinc(count: int = 1000, seed: int = 0) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(9, 38, (count,), generator=generator).tolist()


def mean_padded_size(batches: list[list[int]], sizes: list[int]) -> float:
    return sum(max(sizes[i] for i in batch) for batch in batches) / len(batches)


@pytest.mark.parametrize("bucket_batches", [1, 4, 40])
def test_every_graph_once_per_epoch_in_full_batches(bucket_batches: int) -> None:
    sizes = sizes_like_zinc(1001)
    sampler = SizeBucketBatchSampler(sizes, 64, bucket_batches, torch.Generator().manual_seed(0))
    epochs = [list(sampler) for _ in range(2)]
    assert epochs[0] != epochs[1]  # a new order every epoch
    for batches in epochs:
        assert len(batches) == len(sampler) == 16
        assert sorted(i for batch in batches for i in batch) == list(range(1001))
        assert sorted(len(batch) for batch in batches)[1:] == [64] * 15  # one short batch: 1001 = 15 * 64 + 41


def test_grouping_cuts_padding_and_keeps_batches_sorted_within_windows() -> None:
    sizes = sizes_like_zinc(2560)
    plain = list(SizeBucketBatchSampler(sizes, 64, 1, torch.Generator().manual_seed(0)))
    grouped = list(SizeBucketBatchSampler(sizes, 64, 40, torch.Generator().manual_seed(0)))
    assert mean_padded_size(grouped, sizes) < 0.8 * mean_padded_size(plain, sizes)
    for batch in grouped:  # a window is sorted before it is cut, so each batch is sorted by size
        assert [sizes[i] for i in batch] == sorted(sizes[i] for i in batch)
    # and the batch order is shuffled, not smallest first
    first_sizes = [sizes[batch[0]] for batch in grouped]
    assert first_sizes != sorted(first_sizes)


def test_same_seed_same_batches_different_seed_different_batches() -> None:
    sizes = sizes_like_zinc(500)

    def epochs(seed: int) -> list[list[list[int]]]:
        sampler = SizeBucketBatchSampler(sizes, 32, 4, torch.Generator().manual_seed(seed))
        return [list(sampler) for _ in range(2)]

    assert epochs(3) == epochs(3)
    assert epochs(3) != epochs(4)


def test_bad_arguments_raise_clear_errors() -> None:
    generator = torch.Generator()
    with pytest.raises(ValueError, match="sizes is empty"):
        SizeBucketBatchSampler([], 8, 2, generator)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        SizeBucketBatchSampler([3, 4], 0, 2, generator)
    with pytest.raises(ValueError, match="bucket_batches must be a positive integer"):
        SizeBucketBatchSampler([3, 4], 8, 1.5, generator)
    with pytest.raises(ValueError, match="bucket_batches must be a positive integer"):
        RunConfig.from_dict({"dataset": "zinc", "model": "graphormer", "bucket_batches": 0})
    with pytest.raises(ValueError, match="set model=graphormer"):
        RunConfig.from_dict({"dataset": "zinc", "bucket_batches": 8})
