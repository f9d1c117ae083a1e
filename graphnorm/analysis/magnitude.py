"""The overflow guard shared by every collapse metric: inputs whose float64 sums of squares overflow are rejected.

Every metric sums squares of entries (row norms, Gram matrices, Dirichlet differences) in float64. Entries near
1e154 or larger overflow those sums to Inf and the metrics then return silent garbage (a cone of 90 degrees, an
infinite energy, a Python ``OverflowError``). They are rejected with a ``ValueError`` instead, like NaN and Inf.
"""

from __future__ import annotations

import sys


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
