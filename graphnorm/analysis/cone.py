"""Cone angles of a set of vectors: the half-angle of the smallest circular cone (apex at the origin) holding every
non-zero row, exact (:func:`cone_angle`, :func:`cone_angle_info`) or robust to a few outlier rows
(:func:`robust_cone_angle`).

The exact angle reduces to the point of the convex hull of the unit rows closest to the origin
(:func:`cone_from_unit_rows` gives the reduction and its certified stop criterion), found by Wolfe's algorithm in
:mod:`graphnorm.analysis.min_norm_point`. The collapse probe (:mod:`graphnorm.analysis.collapse`) records both
angles of every layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from graphnorm.analysis.magnitude import check_not_too_large, rescale_for_invariant
from graphnorm.analysis.min_norm_point import WORKING_SIZE, wolfe_min_norm_point
from graphnorm.numba_kernels import kernel

__all__ = [
    "ConeAngle",
    "cone_angle",
    "cone_angle_info",
    "robust_cone_angle",
    "exact_and_robust_cones",
    "stacked_cones",
    "layer_cones",
    "ROBUST_CONE_LEVEL",
]

ROBUST_CONE_LEVEL = 0.9  # default q of the robust cone: the collapse probe records it as metric cone_angle_q90


@dataclass(frozen=True)
class ConeAngle:
    """Result of :func:`cone_angle_info`.

    angle_deg: half-angle in degrees (90.0 means "at least 90"; NaN when there is no non-zero row).
    axis: unit axis of the cone (None when angle is 90 or undefined).
    gap_deg: certified upper - lower bound on the optimum at termination.
    num_rows / num_zero_rows: rows given / rows excluded because they are zero (no direction).
    iterations: Wolfe major cycles.
    converged: whether the gap reached the tolerance within ``max_iter``.
    """

    angle_deg: float
    axis: np.ndarray | None
    gap_deg: float
    num_rows: int
    num_zero_rows: int
    iterations: int
    converged: bool


def _as_float64_rows(x: Tensor | np.ndarray, name: str) -> np.ndarray:
    """``x`` [n, d] as a float64 NumPy array, rescaled by a power of two when its entries are extreme (the cone does
    not depend on scale); ``ValueError`` / ``TypeError`` for a wrong shape, no columns, a complex or meta tensor, or
    NaN / Inf."""
    if isinstance(x, Tensor):
        if x.dim() != 2:
            raise ValueError(f"{name}: x must have shape [n, d], got shape {tuple(x.shape)}")
        if x.is_complex():
            raise TypeError(f"{name}: x must be a real tensor, got {x.dtype}")
        if x.device.type == "meta":
            raise ValueError(f"{name}: x is on the meta device (it has no values); pass a CPU or GPU tensor")
        array = x.detach().to(device="cpu", dtype=torch.float64).numpy()
    else:
        array = np.asarray(x, dtype=np.float64)
        if array.ndim != 2:
            raise ValueError(f"{name}: x must have shape [n, d], got shape {array.shape}")
    if array.shape[1] == 0:
        raise ValueError(f"{name}: x has no columns (shape {array.shape})")
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: x contains NaN or Inf ({int((~np.isfinite(array)).sum())} entries)")
    array = rescale_for_invariant(torch.from_numpy(array)).numpy()  # the cone does not depend on scale
    with np.errstate(over="ignore"):  # an overflowing sum is what the check reports
        squared_sum = float(np.square(array).sum())
    check_not_too_large(squared_sum, array.shape[0], name)
    return array


def cone_from_unit_rows(
    units: np.ndarray,
    norms: np.ndarray,
    tol_deg: float,
    max_iter: int = 10_000,
    units_sum: np.ndarray | None = None,
    rows: np.ndarray | None = None,
    weighted_sum: np.ndarray | None = None,
) -> tuple[float, np.ndarray | None, float, int, bool]:
    """Cone of non-empty unit rows ``units`` [m, d] (float64, rows of norm 1) whose original rows had ``norms``.

    The half-angle is theta* = min_{||u|| = 1} max_i angle(u, u_i). With p* the point of conv{u_i} closest to the
    origin: if ||p*|| > 0 then theta* < 90 degrees, the optimal axis is p* / ||p*|| and cos(theta*) = ||p*|| (for
    any unit u, min_i <u, u_i> = min_{y in hull} <u, y> <= ||p*||, with equality at u = p* / ||p*|| by the optimality
    condition <p*, u_i> >= ||p*||^2). If 0 lies in the hull, every axis leaves some row at >= 90 degrees: 90.0, read
    "at least 90". p* comes from Wolfe's min-norm-point algorithm (Wolfe 1976, "Finding the nearest point in a
    polytope", Math. Programming 11; :func:`graphnorm.analysis.min_norm_point.wolfe_min_norm_point`).

    Stop criterion in degrees: an iterate p of the hull gives the lower bound acos(||p||) <= theta* (as
    ||p|| >= ||p*||) and the feasible axis p / ||p||, whose angle acos(min_i <p, u_i> / ||p||) >= theta* is the
    upper bound. The solver stops when (upper, clipped at 90) - lower <= ``tol_deg`` and the upper bound is
    returned: the half-angle of a cone that really holds every row, within ``tol_deg`` of the optimum. Before any
    cycle, two hull points are checked: the mean of the unit rows and sum_i x_i / sum_i ||x_i|| (zero for
    column-centered rows, e.g. after BatchNorm or PairNorm); if either has norm <= sin(tol_deg), the answer is 90
    by the same criterion.

    Returns (angle_deg, axis or None, gap_deg, iterations, converged): the shared core of :func:`cone_angle_info`
    and of the collapse probe, which passes unit rows it has already computed (and their sum ``units_sum`` and
    norm-weighted sum ``weighted_sum`` = ``norms @ units``, shared with the robust cone: no other pass over the rows).
    ``rows``: indices of the rows of ``units`` / ``norms`` that form the set (default all; a subset is not copied,
    and the sums given are then the subset's).
    """
    units = np.ascontiguousarray(units, dtype=np.float64)
    norms = np.ascontiguousarray(norms, dtype=np.float64)
    rows = np.arange(units.shape[0]) if rows is None else np.asarray(rows, dtype=np.intp)
    if units_sum is None or weighted_sum is None:
        set_units = units[rows]
        units_sum = set_units.sum(axis=0) if units_sum is None else units_sum
        weighted_sum = norms[rows] @ set_units if weighted_sum is None else weighted_sum
    angle, axis, gap, iterations, converged = _cone_of_rows(
        units, norms, rows, np.ascontiguousarray(units_sum), np.ascontiguousarray(weighted_sum), tol_deg, max_iter
    )
    return angle, (axis if axis.size else None), gap, iterations, converged


@kernel(nogil=True)
def _cone_of_rows(
    units: np.ndarray,
    norms: np.ndarray,
    rows: np.ndarray,
    units_sum: np.ndarray,
    weighted_sum: np.ndarray,
    tol_deg: float,
    max_iter: int,
) -> tuple[float, np.ndarray, float, int, bool]:
    """:func:`cone_from_unit_rows` compiled, all arguments given (an empty axis stands for None)."""
    no_start = np.empty(0, dtype=np.intp)
    angle, axis, gap, iterations, converged, _, _ = _cone_from_start(
        units, norms, rows, units_sum, weighted_sum, tol_deg, max_iter, no_start, np.empty(0)
    )
    return angle, axis, gap, iterations, converged


@kernel(nogil=True)
def _cone_from_start(
    units: np.ndarray,
    norms: np.ndarray,
    rows: np.ndarray,
    units_sum: np.ndarray,
    weighted_sum: np.ndarray,
    tol_deg: float,
    max_iter: int,
    start_rows: np.ndarray,
    start_weights: np.ndarray,
) -> tuple[float, np.ndarray, float, int, bool, np.ndarray, np.ndarray]:
    """:func:`_cone_of_rows` with Wolfe started from the corral ``start_rows`` / ``start_weights`` (empty: the
    solver's own start, see :func:`graphnorm.analysis.min_norm_point.wolfe_min_norm_point`): the certificate for
    90 degrees, then Wolfe's algorithm. Also returns the final corral's rows and weights (empty when the
    certificate answered without a solve)."""
    threshold = math.sin(math.radians(tol_deg))
    norm_total = 0.0
    for row in rows:
        norm_total += norms[row]
    mean_square, weighted_square = 0.0, 0.0
    for k in range(units_sum.size):
        mean, weighted = units_sum[k] / rows.size, weighted_sum[k] / norm_total
        mean_square += mean * mean
        weighted_square += weighted * weighted
    smallest = min(math.sqrt(mean_square), math.sqrt(weighted_square))
    if smallest <= threshold:
        gap = 90.0 - math.degrees(math.acos(min(smallest, 1.0)))
        return 90.0, np.empty(0), gap, 0, True, np.empty(0, dtype=np.intp), np.empty(0)
    p, upper, lower, iterations, corral, weights = wolfe_min_norm_point(
        units, rows, units_sum, tol_deg, max_iter, WORKING_SIZE, start_rows, start_weights
    )
    converged = min(upper, 90.0) - lower <= tol_deg
    norm_p = math.sqrt(p @ p)
    if upper >= 90.0 or norm_p == 0.0:
        return 90.0, np.empty(0), max(0.0, 90.0 - lower), iterations, converged, corral, weights
    return upper, p / norm_p, upper - lower, iterations, converged, corral, weights


def cone_angle_info(x: Tensor | np.ndarray, tol_deg: float = 1e-4, max_iter: int = 10_000) -> ConeAngle:
    """Smallest enclosing cone of the non-zero rows of ``x`` [n, d] (:func:`cone_from_unit_rows`).

    Computed in float64 whatever the input dtype. Zero rows (exactly zero) are excluded and counted in
    ``num_zero_rows``. No non-zero row: angle NaN. ``ValueError`` for no rows, no columns, NaN / Inf, or entries
    too large for float64 sums of squares (see :mod:`graphnorm.analysis.magnitude`). ``tol_deg`` bounds
    |returned - optimal| in degrees.
    """
    rows = _as_float64_rows(x, "cone_angle")
    if tol_deg <= 0:
        raise ValueError(f"cone_angle: tol_deg must be > 0, got {tol_deg}")
    num_rows = rows.shape[0]
    if num_rows == 0:
        raise ValueError("cone_angle: x has no rows")
    norms = np.linalg.norm(rows, axis=1)
    nonzero = norms > 0
    num_zero = int(num_rows - nonzero.sum())
    if not nonzero.any():
        return ConeAngle(math.nan, None, 0.0, num_rows, num_zero, 0, True)
    units = rows[nonzero] / norms[nonzero, None]
    angle, axis, gap, iterations, converged = cone_from_unit_rows(units, norms[nonzero], tol_deg, max_iter)
    return ConeAngle(angle, axis, gap, num_rows, num_zero, iterations, converged)


def cone_angle(x: Tensor | np.ndarray, tol_deg: float = 1e-4) -> float:
    """Half-angle in degrees of the smallest cone (apex at 0) containing every non-zero row of ``x``.

    min over unit u of max_i angle(u, x_i); exact to ``tol_deg`` below 90, and 90.0 meaning ">= 90" when the
    origin is in the convex hull of the normalized rows. Zero rows are ignored (see :func:`cone_angle_info`
    for their count). NaN when no row is non-zero. The reduction and its source: :func:`cone_from_unit_rows`.
    """
    return cone_angle_info(x, tol_deg=tol_deg).angle_deg


def robust_cone_from_unit_rows(
    units: np.ndarray,
    norms: np.ndarray,
    q: float,
    tol_deg: float,
    units_sum: np.ndarray | None = None,
    weighted_sum: np.ndarray | None = None,
) -> float:
    """Robust cone half-angle of level ``q`` of non-empty unit rows ``units`` [m, d] (float64) whose original rows
    had ``norms``: the exact cone (:func:`cone_from_unit_rows`) of the fraction q of the rows closest in angle to
    their mean direction::

        c = sum_i u_i / ||sum_i u_i||                 (mean direction of the m non-zero unit rows u_i)
        k = ceil(q m),  t = k-th largest <u_i, c>,    S_q = {i : <u_i, c> >= t}   (ties at t all kept)
        theta_q = theta*(S_q)                          (the exact cone of the rows in S_q)

    So the cone holds at least q m rows, theta_q <= theta* (a subset needs no wider cone), theta_q grows with q and
    theta_1 = theta* (S_1 is every row). It depends on the rows only through their directions and not on their
    order; one outlier moves c by O(1/m) and is left out of S_q once q < 1 - 1/m. When ||sum_i u_i|| <=
    m sin(tol_deg) the rows have no mean direction: 90.0 ("at least 90"). ``units_sum`` and ``weighted_sum``:
    ``units.sum(axis=0)`` and ``norms @ units`` when the caller has them (the subset's sums are then these minus the
    left-out rows', a pass over a tenth of the rows instead of a copy of the rest).

    Computed as in :func:`exact_and_robust_cones`, whose numbers it gives: the solve on S_q starts from the exact
    cone's final corral, so the exact cone of all the rows is solved first.
    """
    units = np.ascontiguousarray(units, dtype=np.float64)
    norms = np.ascontiguousarray(norms, dtype=np.float64)
    units_sum = units.sum(axis=0) if units_sum is None else np.ascontiguousarray(units_sum)
    weighted_sum = norms @ units if weighted_sum is None else np.ascontiguousarray(weighted_sum)
    return _both_cones(units, norms, np.arange(units.shape[0]), units_sum, weighted_sum, q, tol_deg)[1]


@kernel()
def _inner_products_in_order(units: np.ndarray, rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``units[rows] @ vector``, each sum added in column order (so a tie between rows stays a tie whatever the
    rows' order), four rows at a time: four independent sums keep the floating-point adder busy where one sum waits
    on each previous addition."""
    m, width = rows.size, vector.size
    out = np.empty(m)
    for first in range(0, m - 3, 4):
        a, b, c, e = units[rows[first]], units[rows[first + 1]], units[rows[first + 2]], units[rows[first + 3]]
        total_a, total_b, total_c, total_e = 0.0, 0.0, 0.0, 0.0
        for column in range(width):
            total_a += a[column] * vector[column]
            total_b += b[column] * vector[column]
            total_c += c[column] * vector[column]
            total_e += e[column] * vector[column]
        out[first], out[first + 1], out[first + 2], out[first + 3] = total_a, total_b, total_c, total_e
    for i in range(m - m % 4, m):
        unit, total = units[rows[i]], 0.0
        for column in range(width):
            total += unit[column] * vector[column]
        out[i] = total
    return out


@kernel(nogil=True)
def _robust_cone_of_rows(
    units: np.ndarray,
    norms: np.ndarray,
    rows: np.ndarray,
    units_sum: np.ndarray,
    weighted_sum: np.ndarray,
    q: float,
    tol_deg: float,
    exact: float,
    corral: np.ndarray,
    corral_weights: np.ndarray,
) -> tuple[float, int]:
    """:func:`robust_cone_from_unit_rows` compiled, of the rows ``rows`` of ``units`` (their sums given), from the
    exact cone of those rows: its angle ``exact`` (the answer when S_q is every row) and its final corral
    ``corral`` / ``corral_weights``. Wolfe on S_q starts from the corral's rows that are in S_q, their weights
    scaled to sum 1 (its own start when none is): the exact cone's outliers left out, the rest of its corral is
    usually near S_q's. Returns (angle, Wolfe major cycles on S_q)."""
    m, width = rows.size, units_sum.size
    total_norm = math.sqrt(units_sum @ units_sum)
    if total_norm <= m * math.sin(math.radians(tol_deg)):
        return 90.0, 0
    k = math.ceil(q * m - 1e-9)  # guard q * m landing a hair above an integer
    if k >= m:
        return exact, 0
    cosines = _inner_products_in_order(units, rows, units_sum / total_norm)
    threshold = np.partition(cosines, m - k)[m - k]  # k-th largest cosine
    kept = np.empty(m, dtype=rows.dtype)
    in_subset = np.zeros(units.shape[0], dtype=np.bool_)
    left_sum, left_weighted = np.zeros(width), np.zeros(width)
    count = 0
    for i in range(m):
        row = rows[i]
        if cosines[i] >= threshold:
            kept[count] = row
            in_subset[row] = True
            count += 1
        else:  # the subset's sums are the set's minus the left-out rows' (a tenth of the rows)
            for column in range(width):
                left_sum[column] += units[row, column]
                left_weighted[column] += norms[row] * units[row, column]
    start_rows, start_weights = np.empty(corral.size, dtype=np.intp), np.empty(corral.size)
    starts = 0
    for j in range(corral.size):
        if in_subset[corral[j]]:
            start_rows[starts], start_weights[starts] = corral[j], corral_weights[j]
            starts += 1
    angle, _, _, iterations, _, _, _ = _cone_from_start(
        units,
        norms,
        kept[:count],
        units_sum - left_sum,
        weighted_sum - left_weighted,
        tol_deg,
        10_000,
        start_rows[:starts],
        start_weights[:starts],
    )
    return angle, iterations


@kernel(nogil=True)
def _both_cones(
    units: np.ndarray,
    norms: np.ndarray,
    rows: np.ndarray,
    units_sum: np.ndarray,
    weighted_sum: np.ndarray,
    q: float,
    tol_deg: float,
) -> tuple[float, float, int, int]:
    """The exact cone of the rows ``rows`` of ``units`` (their sums given), then the robust cone of level ``q``
    started from the exact cone's final corral; (exact, robust, major cycles of each)."""
    no_start = np.empty(0, dtype=np.intp)
    exact, _, _, exact_iterations, _, corral, weights = _cone_from_start(
        units, norms, rows, units_sum, weighted_sum, tol_deg, 10_000, no_start, np.empty(0)
    )
    robust, robust_iterations = _robust_cone_of_rows(
        units, norms, rows, units_sum, weighted_sum, q, tol_deg, exact, corral, weights
    )
    return exact, robust, exact_iterations, robust_iterations


@kernel(nogil=True)
def exact_and_robust_cones(
    units: np.ndarray, norms: np.ndarray, rows: np.ndarray, q: float, tol_deg: float
) -> tuple[float, float, np.ndarray]:
    """The exact cone (:func:`cone_from_unit_rows`) and the robust cone of level ``q``
    (:func:`robust_cone_from_unit_rows`) of the rows ``rows`` of ``units`` [n, d] (unit rows, C-contiguous, whose
    original rows had ``norms``), and the rows' sum; one compiled call (the collapse probe's, per layer), which
    computes the sums both cones share once and starts the robust cone's solve from the exact cone's corral."""
    width = units.shape[1]
    units_sum, weighted_sum = np.zeros(width), np.zeros(width)
    for row in rows:
        for column in range(width):
            units_sum[column] += units[row, column]
            weighted_sum[column] += norms[row] * units[row, column]
    exact, robust, _, _ = _both_cones(units, norms, rows, units_sum, weighted_sum, q, tol_deg)
    return exact, robust, units_sum


@kernel(nogil=True)
def layer_cones(
    units: np.ndarray,
    norms: np.ndarray,
    q: float,
    tol_deg: float,
    layer: int,
    exact: np.ndarray,
    robust: np.ndarray,
    sums: np.ndarray,
    counts: np.ndarray,
) -> None:
    """:func:`exact_and_robust_cones` of the non-zero rows of one layer's unit rows ``units`` [m, d] (zero rows where
    ``norms`` [m] is 0) into entry ``layer`` of ``exact``, ``robust`` (NaN without a non-zero row), ``sums`` [., d]
    and ``counts``: :func:`stacked_cones`'s step, and the collapse probe's per layer."""
    rows = np.flatnonzero(norms > 0.0)
    counts[layer] = rows.size
    if rows.size:
        exact[layer], robust[layer], sums[layer] = exact_and_robust_cones(units, norms, rows, q, tol_deg)
    else:
        exact[layer], robust[layer] = np.nan, np.nan
        sums[layer] = 0.0


@kernel(nogil=True)
def stacked_cones(
    units: np.ndarray, norms: np.ndarray, q: float, tol_deg: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`exact_and_robust_cones` of the non-zero rows of every layer of ``units`` [L, m, d] (unit rows, zero
    rows where ``norms`` [L, m] is 0), in one compiled call that holds no lock a Python thread waits for (the
    collapse probe measures on a second thread beside the forward pass, whose Python would otherwise wait on every
    short call). Returns the exact and robust angles [L] (NaN for a layer without a non-zero row), the sums of the
    unit rows [L, d] and the number of non-zero rows [L]."""
    num_layers, _, width = units.shape
    exact, robust = np.empty(num_layers), np.empty(num_layers)
    sums, counts = np.empty((num_layers, width)), np.empty(num_layers, dtype=np.int64)
    for layer in range(num_layers):
        layer_cones(units[layer], norms[layer], q, tol_deg, layer, exact, robust, sums, counts)
    return exact, robust, sums, counts


def robust_cone_angle(x: Tensor | np.ndarray, q: float = ROBUST_CONE_LEVEL, tol_deg: float = 1e-4) -> float:
    """Half-angle in degrees of the smallest cone holding the fraction ``q`` of the non-zero rows of ``x`` closest
    in angle to their mean direction (ties kept); :func:`robust_cone_from_unit_rows` gives the formula and its
    properties. The exact angle is a maximum, so a few outlier rows decide it: a layer whose other rows have all but
    collapsed onto one direction can still have a wide exact cone; this one leaves those rows out.

    ``q=1`` gives :func:`cone_angle`. 90.0 means "at least 90" (also when the rows have no mean direction); NaN when
    no row is non-zero. Zero rows are ignored. ``ValueError`` for q outside (0, 1] and the inputs
    :func:`cone_angle_info` rejects.
    """
    rows = _as_float64_rows(x, "robust_cone_angle")
    if not 0.0 < q <= 1.0:
        raise ValueError(f"robust_cone_angle: q must be in (0, 1], got {q}")
    if tol_deg <= 0:
        raise ValueError(f"robust_cone_angle: tol_deg must be > 0, got {tol_deg}")
    if rows.shape[0] == 0:
        raise ValueError("robust_cone_angle: x has no rows")
    norms = np.linalg.norm(rows, axis=1)
    nonzero = norms > 0
    if not nonzero.any():
        return math.nan
    units = rows[nonzero] / norms[nonzero, None]
    return robust_cone_from_unit_rows(units, norms[nonzero], q, tol_deg)
