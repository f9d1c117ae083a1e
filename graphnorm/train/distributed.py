"""Data-parallel training of graph-level runs under ``torchrun --nproc-per-node W``: the process group from torchrun's
environment (gloo on the CPU, NCCL on CUDA), the training graphs shared out among the processes, the model in
DistributedDataParallel, and the few values the processes agree on (the epoch's loss sums, rank 0's evaluation, the
time budget's stop, every rank's random state for the checkpoint). Rank 0 alone writes.

The seed fixes the run for a given W. Every rank builds the same initial model and draws the same permutation of the
training graphs, the one a single process draws from the seed; step k's global batch is the next ``W * batch_size``
graphs of it, and rank r takes every W-th of them (:class:`ShardSampler`). So W processes of ``batch_size`` B see
the batches of one process of ``batch_size`` W*B. Randomness inside the model (dropout) draws from ``seed + rank``.
Norms under several processes: :mod:`graphnorm.train.sync_norms`; a run in W processes from one call (sweeps):
:mod:`graphnorm.train.launch`.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Sampler

from graphnorm.train.ranks import DataParallelError, Ranks, launched_ranks

if TYPE_CHECKING:
    from graphnorm.config import RunConfig


def current_ranks() -> Ranks:
    """The ranks of the running process group (one process when none is running)."""
    if dist.is_available() and dist.is_initialized():
        return Ranks(dist.get_rank(), dist.get_world_size(), launched_ranks().local_rank)
    return Ranks()


@contextlib.contextmanager
def process_group(device: str = "auto") -> Iterator[Ranks]:
    """Inside: the process group of a torchrun launch (``WORLD_SIZE`` > 1), started here and ended on leaving,
    unless one is already running; one process outside torchrun. ``device``: the config's; NCCL where it is CUDA."""
    launched = launched_ranks()
    if not launched.active or (dist.is_available() and dist.is_initialized()):
        yield current_ranks()
        return
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(launched.local_rank)  # before NCCL starts: each rank its own GPU
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        yield current_ranks()
    finally:
        dist.destroy_process_group()


def rank_device(device: torch.device, ranks: Ranks) -> torch.device:
    """The device of this rank: its own GPU (``cuda:<LOCAL_RANK>``) when the run is on CUDA."""
    if ranks.active and device.type == "cuda":
        return torch.device("cuda", ranks.local_rank)
    return device


def check_data_parallel(config: RunConfig, level: str, ranks: Ranks) -> None:
    """:class:`DataParallelError` for a run that several processes cannot train: a node-level task (one graph), or
    Graphormer's size-bucketed batches (whole batches drawn at once)."""
    if not ranks.active:
        return
    if level != "graph":
        raise DataParallelError(
            f"dataset {config.dataset!r} is a node-level task (one graph): data-parallel training shares out the "
            "graphs of a graph-level dataset; run it in one process, without torchrun"
        )
    if getattr(config, "bucket_batches", 1) > 1:
        raise DataParallelError(
            f"bucket_batches={config.bucket_batches} draws whole size-bucketed batches, which are not shared out "
            "among processes: set bucket_batches: 1 under torchrun"
        )


class ShardSampler(Sampler[int]):
    """Rank ``ranks.rank``'s share of the order ``order`` yields (the shuffled order one process would train in, drawn
    from the run's generator on every rank alike): the order padded at its end with its own first indices to a
    multiple of W (as torch's ``DistributedSampler`` pads, so every rank runs as many steps), then every W-th index
    from position ``rank``. Each epoch draws a new order from the generator, which the checkpoint carries, so no
    ``set_epoch`` is needed and a resumed run continues the same sequence of orders."""

    def __init__(self, order: Sampler[int], ranks: Ranks) -> None:
        self.order, self.ranks = order, ranks

    def __len__(self) -> int:
        return math.ceil(len(self.order) / self.ranks.world_size)

    def __iter__(self) -> Iterator[int]:
        indices = list(self.order)
        total = len(self) * self.ranks.world_size
        while indices and len(indices) < total:
            indices += indices[: total - len(indices)]
        return iter(indices[self.ranks.rank : total : self.ranks.world_size])


def data_parallel(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` in DistributedDataParallel: gradients averaged over the processes after every backward. Buffers are
    not broadcast: BatchNorm's running statistics are kept equal by :mod:`graphnorm.train.sync_norms`, and a model
    with other statistics across graphs is refused there."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    # (newer torch names the option forward_sync_buffers; both still sync the buffers once, at the start)
    newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    no_sync = {"forward_sync_buffers": False} if newer else {"broadcast_buffers": False}
    return DistributedDataParallel(model, device_ids=ids, **no_sync)


def _collective_device() -> torch.device:
    """Where the small tensors of a collective live: the GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sum_across(values: Sequence[float]) -> list[float]:
    """Each of ``values`` summed over the processes (float64; the values themselves in one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [float(v) for v in values]
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor)
    return tensor.tolist()


def from_rank0(values: Sequence[float]) -> list[float]:
    """Rank 0's ``values`` on every process (float64, exact; the values themselves in one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [float(v) for v in values]
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_collective_device())
    dist.broadcast(tensor, src=0)
    return tensor.tolist()


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` holds on some process: a decision every process then takes together."""
    return sum_across([1.0 if flag else 0.0])[0] > 0


def gather_objects(value: Any) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order, on every process (``[value]`` in one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def barrier() -> None:
    """Wait for every process (nothing in one process)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
