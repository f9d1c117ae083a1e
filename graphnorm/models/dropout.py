"""Dropout whose Bernoulli mask costs a third of the random draws on CPU: :func:`fast_dropout` and its module
:class:`FastDropout`, with ``F.dropout``'s distribution (the keep probability rounded to a multiple of ``2^-16``).

PyTorch's CPU generator (a serial Mersenne twister) draws one number per mask entry, which is a noticeable share of a
Graphormer training step on a small machine while the other cores wait; :func:`keep_mask` gets three mask entries
from each 64-bit draw. Graphormer (:mod:`graphnorm.models.graphormer`) uses it.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["FastDropout", "fast_dropout", "keep_mask"]

_LEVELS = 1 << 16  # a 16-bit number per mask entry


def keep_mask(
    shape: torch.Size | tuple[int, ...], drop_levels: int, generator: torch.Generator | None = None
) -> Tensor:
    """Boolean CPU mask of ``shape``, each entry True with probability ``1 - drop_levels / 2^16``, independently.

    One 64-bit draw (``random_`` on ``int64``: 63 uniform bits) gives three uniform 16-bit numbers, and an entry is
    kept when its number is at least ``drop_levels``. Little-endian hosts only (see :func:`fast_dropout`).
    """
    count = math.prod(shape)
    words = torch.empty((count + 2) // 3, dtype=torch.int64).random_(generator=generator)  # [0, 2^63)
    # Little-endian: an int64 viewed as four int16 is low .. high; the highest holds bit 63, always 0: skipped.
    numbers = words.view(torch.int16).view(-1, 4)[:, :3].reshape(-1)[:count]  # uniform on [-2^15, 2^15)
    return (numbers >= drop_levels - _LEVELS // 2).view(shape)


def fast_dropout(x: Tensor, p: float, training: bool = True, generator: torch.Generator | None = None) -> Tensor:
    """``F.dropout(x, p, training)`` in distribution, with the mask of :func:`keep_mask`.

    :math:`y = x \\odot m / q` with :math:`m_i \\sim \\text{Bernoulli}(q)` independently, :math:`q = 1 - p`
    (Srivastava et al., JMLR 2014, https://jmlr.org/papers/v15/srivastava14a.html). The drop probability is ``p``
    rounded to a multiple of ``2^-16`` (``p = 0.1``: keep probability 0.899994 instead of 0.9) and the scale is
    ``1 / q`` for that exact ``q``, so ``E[y] = x``. The draws come from the default (or a given) generator, so a seed
    fixes them; the stream differs from ``F.dropout``'s. Off the CPU (where the device's own dropout is fast) and on
    big-endian hosts this is ``F.dropout``. ``ValueError`` for ``p`` outside [0, 1].
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or sys.byteorder != "little":
        return F.dropout(x, p, training)
    drop_levels = round(p * _LEVELS)
    if drop_levels == 0:
        return x
    if drop_levels == _LEVELS:
        return x * 0.0
    scale = _LEVELS / (_LEVELS - drop_levels)  # 1 / (exact keep probability)
    return x * keep_mask(x.shape, drop_levels, generator).to(x.dtype).mul_(scale)


class FastDropout(nn.Module):
    """``nn.Dropout`` drawing its mask with :func:`fast_dropout` (a third of the random draws on CPU)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return fast_dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
