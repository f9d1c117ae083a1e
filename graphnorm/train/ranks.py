"""Which of the training processes this one is: :class:`Ranks` from torchrun's environment (:func:`launched_ranks`),
without importing torch, so that a command decides which process checks and writes its outputs before torch loads.
The process group itself: :mod:`graphnorm.train.distributed`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class DataParallelError(ValueError):
    """A run that cannot train data-parallel as configured; the one-line message says why and what to do."""


@dataclass(frozen=True)
class Ranks:
    """This process's place among the training processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        """Whether several processes train together."""
        return self.world_size > 1

    @property
    def writes(self) -> bool:
        """Whether this process writes the run's files (records, checkpoints, progress): rank 0 only."""
        return self.rank == 0


def launched_ranks() -> Ranks:
    """The ranks torchrun hands this process in ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (one process without)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as error:
        raise DataParallelError(f"torchrun's RANK / WORLD_SIZE / LOCAL_RANK are not integers ({error})") from None
    if world < 1 or not 0 <= rank < world:
        raise DataParallelError(f"RANK={rank} is not a rank of WORLD_SIZE={world}")
    return Ranks(rank, world, local)
