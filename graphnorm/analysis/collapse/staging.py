"""Buffers of stacked layers: a chunk of layers of one width, loaded slot by slot (or first staged as they came, to
be loaded later on the measuring thread) and reused chunk after chunk (:class:`_StackBuffers`), and the view of its
loaded layers that the metrics read (:class:`_LayerStack`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from graphnorm.analysis.collapse.loading import _load_rows

# How the rows are kept: "float64" copies them to float64 (the reference), "float32" keeps float32 rows (float64
# input is rounded to float32) and widens them in registers; both accumulate every sum in float64.
PRECISIONS = ("float64", "float32")
_ROW_DTYPES = {"float64": torch.float64, "float32": torch.float32}

# Float64 working memory per chunk of stacked layers ([layers, rows, d] a few times and the edge gathers).
_CHUNK_BYTES = 64 * 2**20


def _chunk_capacity(num_rows: int, num_edges: int, width: int) -> int:
    """Layers per chunk of stacked layers within _CHUNK_BYTES (at least one): float64 rows, unit rows and working
    copies ([rows, width] a few times) and per-edge values ([edges], a few times) of each layer."""
    return max(1, _CHUNK_BYTES // max(1, 8 * (6 * width * num_rows + 8 * num_edges)))


@dataclass
class _LayerStack:
    """Layers of equal width stacked as float64 [L, m, d] with their row norms, non-zero masks and unit rows."""

    x: Tensor
    norms: Tensor  # [L, m]
    nonzero: Tensor  # [L, m] bool
    units: Tensor  # [L, m, d]
    shifts: list[int]  # [L]: layer l was scaled by 2**shifts[l] (0 unless its entries are extreme, see _load_rows)
    # The same rows as they came (float32 for a float32 model), where the chunk has them: the edge metrics gather
    # rows at random, and half the bytes per row keep a layer in the core's own cache (float32 widens exactly).
    rows_as_given: np.ndarray | None = None


class _StackBuffers:
    """Buffers for a chunk of up to ``capacity`` layers of [m, d] rows: rows (float64, or float32 for
    ``precision="float32"``), float64 row norms and unit rows, filled layer by layer (:meth:`load`, while each layer
    is in cache) and reused by every chunk instead of fresh MB-sized tensors (and their page faults) per chunk."""

    def __init__(self, capacity: int, num_rows: int, width: int, precision: str = "float64") -> None:
        self.x = torch.empty(capacity, num_rows, width, dtype=_ROW_DTYPES[precision])
        self.norms = torch.empty(capacity, num_rows, dtype=torch.float64)
        self.units = torch.empty(capacity, num_rows, width, dtype=torch.float64)
        self.shifts = [0] * capacity  # layer ``slot`` was scaled by 2**shifts[slot] (see _load_rows)
        self.key = (capacity, num_rows, width, precision)  # what buffers of the same shapes share
        self.staging: Tensor | None = None  # [capacity, m, d]: layers copied as they came, loaded later
        self.staged = [False] * capacity  # slot holds a staged layer not loaded yet
        self.in_staging = [False] * capacity  # the staging buffer holds the slot's layer as loaded (not rescaled)

    @property
    def capacity(self) -> int:
        """Layers a chunk holds."""
        return self.x.size(0)

    def load(self, slot: int, x: Tensor, rows: Tensor | None) -> None:
        """Copy the given rows of layer ``x`` into ``slot`` with their norms and unit rows (validated as
        :func:`_load_rows` does)."""
        self.shifts[slot] = _load_rows(x, rows, self.x[slot], self.norms[slot], self.units[slot])
        self.in_staging[slot] = False

    def stage(self, slot: int, x: Tensor) -> None:
        """Copy layer ``x`` into ``slot`` of the staging buffer as it is (one memcpy), to be loaded and validated
        later by :func:`_measure_chunk`; a layer the staging buffer cannot hold as it is (not on the CPU, another dtype
        than float32 / float64 or than the layers staged before it) is loaded at once instead."""
        x = x.detach()
        plain = x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
        if not plain or (self.staging is not None and self.staging.dtype != x.dtype):
            self.load(slot, x, None)
            self.staged[slot] = False
            return
        if self.staging is None:
            self.staging = torch.empty(self.x.shape, dtype=x.dtype)
        self.staging[slot].copy_(x)
        self.shifts[slot] = 0  # as it came: a shift left by the slot's last layer would scale this one's energy
        self.staged[slot] = True
        self.in_staging[slot] = True

    def move_up(self, slot: int, count: int) -> None:
        """Drop the layer in ``slot`` of the first ``count`` slots: the later ones move up a slot."""
        for target in (self.x, self.norms, self.units, self.staging):
            if target is not None:
                target[slot : count - 1] = target[slot + 1 : count].clone()
        for flags in (self.shifts, self.staged, self.in_staging):
            flags[slot : count - 1] = flags[slot + 1 : count]

    def stack(self, count: int) -> _LayerStack:
        """The first ``count`` loaded layers (valid until the buffers are loaded again)."""
        x, norms = self.x[:count], self.norms[:count]
        # The staged rows stand for the loaded ones when they widen to them exactly (float32, or the rows' own dtype).
        exact = self.staging is not None and self.staging.dtype in (torch.float32, self.x.dtype)
        as_given = self.staging.numpy()[:count] if exact and all(self.in_staging[:count]) else None
        return _LayerStack(x, norms, norms > 0, self.units[:count], self.shifts[:count], as_given)


def _layer_stacks(
    xs: Sequence[Tensor], row_index: Tensor | None, num_rows: int, num_edges: int, precision: str = "float64"
) -> Iterator[_LayerStack]:
    """The given rows of the layers ``xs`` (one width) as float64 stacks of consecutive layers, a chunk at a time
    within _CHUNK_BYTES: rows, unit rows, per-graph working copies and the two edge gathers of each layer."""
    width = xs[0].size(1)
    capacity = min(len(xs), _chunk_capacity(num_rows, num_edges, width))
    buffers = _StackBuffers(capacity, num_rows, width, precision)
    for start in range(0, len(xs), capacity):
        chunk = xs[start : start + capacity]
        for slot, x in enumerate(chunk):
            buffers.load(slot, x, row_index)
        yield buffers.stack(len(chunk))
