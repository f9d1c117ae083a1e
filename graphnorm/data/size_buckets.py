"""Shuffled mini-batches of similar-sized graphs, for models that pad every graph of a batch to the largest one.

Graphormer's attention and attention bias are dense per batch, ``[B, heads, T, T]`` with ``T = 1 + max nodes``, so a
uniformly drawn batch of ZINC molecules computes at the size of its largest molecule, well above the mean. Grouping
graphs of similar size ("bucketing", as length-grouped batches in NLP) cuts the padding, and with it the time of a
training step: :class:`SizeBucketBatchSampler`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class SizeBucketBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices grouped by graph size; a ``batch_sampler`` for ``torch.utils.data.DataLoader``.

    Each epoch:

    1. a random permutation of all graphs (drawn from ``generator``),
    2. cut into windows of ``bucket_batches * batch_size`` graphs, each window sorted by graph size (stable) and cut
       into batches,
    3. the batches of all windows in a random order (drawn from ``generator``).

    Every graph is in exactly one batch per epoch; only the last window can leave a batch smaller than
    ``batch_size``. Larger windows pad less but make a batch's graphs more alike (of one size range), so keep them a
    small fraction of the epoch. All randomness comes from ``generator``, which a checkpoint saves, so a resumed run
    draws the same batches.

    Args:
        sizes: size of every graph (e.g. node counts), in dataset order.
        batch_size: graphs per batch.
        bucket_batches: batches per size-sorted window (``1``: no grouping).
        generator: source of the permutations (the run's seeded generator).

    Raises:
        ValueError: ``sizes`` is empty, or ``batch_size`` or ``bucket_batches`` is not a positive integer.
    """

    def __init__(self, sizes: Sequence[int], batch_size: int, bucket_batches: int, generator: torch.Generator) -> None:
        if len(sizes) == 0:
            raise ValueError("SizeBucketBatchSampler: no graphs (sizes is empty)")
        for name, value in [("batch_size", batch_size), ("bucket_batches", bucket_batches)]:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SizeBucketBatchSampler: {name} must be a positive integer, got {value!r}")
        self.sizes = torch.as_tensor(list(sizes), dtype=torch.long)
        self.batch_size = batch_size
        self.bucket_batches = bucket_batches
        self.generator = generator

    def __len__(self) -> int:
        return -(-self.sizes.numel() // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(self.sizes.numel(), generator=self.generator)
        window = self.batch_size * self.bucket_batches
        batches: list[torch.Tensor] = []
        for start in range(0, order.numel(), window):
            chunk = order[start : start + window]
            if self.bucket_batches > 1:
                chunk = chunk[torch.argsort(self.sizes[chunk], stable=True)]
            batches.extend(chunk.split(self.batch_size))
        for position in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[position].tolist()
