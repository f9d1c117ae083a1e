"""The overflow guard shared by every collapse metric: inputs whose float64 sums of squares overflow are rejected.

Every metric sums squares of entries (row norms, Gram matrices, Dirichlet differences) in float64. Entries near
1e154 or larger overflow those sums to Inf and the metrics then return silent garbage (a cone of 90 degrees, an
infinite energy, a Python ``OverflowError``). They are rejected with a ``ValueError`` instead, like NaN and Inf,
by the metrics that depend on scale; the scale-invariant ones rescale such input first (:func:`rescale_for_invariant`).
"""

from __future__ import annotations

import math
import sys

import torch


def check_not_too_large(squared_sum: float, num_rows: int, name: str) -> None:
    """``ValueError`` unless ``4 * num_rows * squared_sum`` is finite in float64.

    ``squared_sum`` is the sum of the squares of every entry (||x||_F^2, computed in float64). The factor covers
    the largest sums the metrics form: a Gram entry is at most ||x||_F^2 and the Dirichlet sum over the edges of a
    simple graph at most 4 n ||x||_F^2.
    """
    if not squared_sum * 4.0 * max(num_rows, 1) < sys.float_info.max:
        raise ValueError(
            f"{name}: x is too large for float64 sums of squares (sum of squared entries {squared_sum:.3g} with "
            f"{num_rows} rows overflows); rescale x (e.g. divide by its largest entry)"
        )


# Entries at most this far from 1 (in powers of two) leave the sums of squares and products of the metrics normal
# numbers, so such input is used as it is; only input past them is rescaled (see :func:`rescale_for_invariant`).
SAFE_EXPONENT = 200


def invariant_shift(largest: float) -> int:
    """``k`` such that ``2**k * largest`` lies in ``[0.5, 1)`` when ``largest`` (the largest absolute entry, finite)
    is beyond ``2**±200``; 0 otherwise (ordinary input is used as it is) and for 0."""
    exponent = math.frexp(largest)[1]
    return 0 if largest == 0.0 or abs(exponent) <= SAFE_EXPONENT else -exponent


def scale_by_power_of_two(x64: torch.Tensor, shift: int) -> torch.Tensor:
    """``x64 * 2**shift``, exact for normal numbers (in two factors: ``2**shift`` itself may not be a float64)."""
    if shift == 0:
        return x64
    return x64 * 2.0 ** (shift // 2) * 2.0 ** (shift - shift // 2)


def rescale_for_invariant(x64: torch.Tensor) -> torch.Tensor:
    """``x64`` (float64, finite) scaled by a power of two that brings its largest absolute entry into ``[0.5, 1)``,
    for metrics that do not change when ``x`` is scaled (ranks, cosines, cones): their squares and products would
    underflow to zero (rows read as zero rows) or overflow otherwise. Input whose largest entry lies within
    ``2**±200`` is returned as it is (:func:`invariant_shift`), so ordinary input gives the same numbers as ever."""
    largest = float(x64.abs().max()) if x64.numel() else 0.0
    return scale_by_power_of_two(x64, invariant_shift(largest))
