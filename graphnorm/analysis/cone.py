"""Exact cone angle of a set of vectors: the smallest circular cone (apex at the origin) containing them.

Definition. For the non-zero rows x_i of X, the cone half-angle is

    theta* = min_{||u|| = 1} max_i angle(u, x_i).

Reduction to a min-norm-point problem. Let u_i = x_i / ||x_i|| and p* the point of the convex hull
conv{u_i} closest to the origin. If ||p*|| > 0 then theta* < 90 degrees, the optimal axis is p* / ||p*||
and cos(theta*) = ||p*||. (For any unit u, min_i <u, u_i> = min_{y in hull} <u, y> <= ||p*|| with equality
at u = p*/||p*|| by the optimality condition <p*, u_i> >= ||p*||^2 for all i.) If 0 lies in the hull, every
axis leaves some row at >= 90 degrees: we return 90.0, read "at least 90" (a hemisphere is no longer a cone
that says anything about collapse).

Algorithm. Wolfe's min-norm-point algorithm (Wolfe 1976, "Finding the nearest point in a polytope",
Math. Programming 11), an active-set method that is finite in exact arithmetic. Each major cycle costs one
O(n d) product plus a small (k+1) x (k+1) solve over the k <= d+1 active points.

Stop criterion in degrees. At any iterate p in the hull, ||p|| >= ||p*|| gives a lower bound
acos(||p||) <= theta*, and the axis p/||p|| is feasible, giving the upper bound acos(min_i <p, u_i>/||p||)
>= theta*. We stop when (upper, clipped at 90) - lower <= tol_deg and return the upper bound: the half-angle
of a cone that really contains every row, within tol_deg of the optimum.

Early exit at 90 degrees. Before the first cycle two points of the hull are checked for free: the mean of the
unit rows and sum_i x_i / sum_i ||x_i|| (the unit rows weighted by their norms; zero for column-centered rows,
e.g. after BatchNorm or PairNorm). If either has norm <= sin(tol_deg), the lower bound acos(||p||) is within
tol_deg of 90 and the answer is 90 ("at least 90") by the same stop criterion, without any Wolfe cycle.

Robust variant (:func:`robust_cone_angle`). The exact angle is a maximum, so a few outlier rows decide it (PairNorm
at 32 layers on Cora: effective rank 1.03, mean cosine 0.96, yet an exact cone of ~50 degrees). The robust cone
of level q in (0, 1] is the smallest cone of the fraction q of the rows closest in angle to their mean direction:

    c = sum_i u_i / ||sum_i u_i||                 (mean direction of the m non-zero unit rows u_i)
    k = ceil(q m),  t = k-th largest <u_i, c>,    S_q = {i : <u_i, c> >= t}   (ties at t all kept)
    theta_q = theta*(S_q)                          (the exact cone above, of the rows in S_q)

so the cone holds at least q m rows, theta_q <= theta* (a subset needs no wider cone), theta_q grows with q and
theta_1 = theta* (S_1 is every row). It depends on the rows only through their directions (scaling a row changes
nothing) and not on their order. One outlier moves c by O(1/m) and is left out of S_q once q < 1 - 1/m. Cost: one
O(m d) product, a selection and the exact cone of S_q. When ||sum_i u_i|| <= m sin(tol_deg) the rows have no
mean direction: 90.0 ("at least 90"; the exact angle is 90 by the certificate above).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import lapack
from torch import Tensor

from graphnorm.analysis.magnitude import check_not_too_large

__all__ = ["ConeAngle", "cone_angle", "cone_angle_info", "robust_cone_angle", "ROBUST_CONE_LEVEL"]

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
    if isinstance(x, Tensor):
        if x.dim() != 2:
            raise ValueError(f"{name}: x must have shape [n, d], got shape {tuple(x.shape)}")
        if x.is_complex():
            raise TypeError(f"{name}: x must be a real tensor, got {x.dtype}")
        array = x.detach().to(device="cpu", dtype=torch.float64).numpy()
    else:
        array = np.asarray(x, dtype=np.float64)
        if array.ndim != 2:
            raise ValueError(f"{name}: x must have shape [n, d], got shape {array.shape}")
    if array.shape[1] == 0:
        raise ValueError(f"{name}: x has no columns (shape {array.shape})")
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: x contains NaN or Inf ({int((~np.isfinite(array)).sum())} entries)")
    with np.errstate(over="ignore"):  # an overflowing sum is what the check reports
        squared_sum = float(np.square(array).sum())
    check_not_too_large(squared_sum, array.shape[0], name)
    return array


def _bounds_deg(norm_p: float, min_inner: float) -> tuple[float, float]:
    """(upper, lower) bounds on theta* in degrees from an iterate p of norm norm_p and min_i <p, u_i>."""
    lower = math.degrees(math.acos(min(norm_p, 1.0)))
    if norm_p == 0.0:
        return 180.0, lower
    return math.degrees(math.acos(max(-1.0, min(1.0, min_inner / norm_p)))), lower


def _solve_affine(corral: np.ndarray) -> np.ndarray:
    """Weights (summing to 1) of the min-norm point of the affine hull of the rows of ``corral``."""
    k = corral.shape[0]
    bordered = np.empty((k + 1, k + 1))
    bordered[:k, :k] = corral @ corral.T
    bordered[:k, k] = 1.0
    bordered[k, :k] = 1.0
    bordered[k, k] = 0.0
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    _, _, solution, info = lapack.dgesv(bordered, rhs)  # LAPACK gesv as np.linalg.solve, without its overhead
    if info != 0:
        return np.linalg.lstsq(bordered, rhs, rcond=None)[0][:k]
    return solution[:k]


def _sorted_union(num_points: int, *indices: np.ndarray | list[int]) -> np.ndarray:
    """``np.union1d`` of row indices below ``num_points`` through a boolean mask: the same sorted unique indices,
    without the hashing and sorting (measured ~0.2 ms a call on Cora's 2,708 rows, several calls per cone)."""
    mask = np.zeros(num_points, dtype=bool)
    for index in indices:
        mask[index] = True
    return np.flatnonzero(mask)


# "Zero weight" threshold of the active-set weights, which live on the simplex.
_WEIGHT_EPS = 1e-12


def _wolfe_min_norm_point(
    points: np.ndarray, tol_deg: float, max_iter: int, working_size: int = 256, points_sum: np.ndarray | None = None
) -> tuple[np.ndarray, float, float, int, bool]:
    """Min-norm point of conv(points) for unit rows; returns (p, upper_deg, lower_deg, iterations, converged).

    Speed: the O(n d) search for the most violating row dominates, so each major cycle searches only a
    working set of rows (at first those pointing furthest from the mean direction). When the stop criterion
    holds on the working set, all rows are checked once; violators join the working set and the iteration
    continues from the same state. Only the all-rows check yields the returned (certified) upper bound.
    ``points_sum``: ``points.sum(axis=0)`` when the caller has it.
    """
    num_points = points.shape[0]
    if points_sum is None:
        points_sum = points.sum(axis=0)
    alignment = points @ points_sum  # alignment with the mean direction (all zero if it vanishes)
    # Start at the row closest to the mean direction: usually already near the final axis.
    start = int(np.argmax(alignment))
    working, working_points = _initial_working_set(points, alignment, start, working_size)
    active = [start]  # indices into points
    weights = np.array([1.0])
    p = points[start].copy()
    best_upper, lower = 180.0, 0.0
    for iteration in range(1, max_iter + 1):
        norm_p = math.sqrt(float(p @ p))
        inner = working_points @ p
        position = int(inner.argmin())
        upper, lower = _bounds_deg(norm_p, float(inner[position]))
        candidate = int(working[position])
        if min(upper, 90.0) - lower <= tol_deg or candidate in active:
            # Converged on the working set (a candidate already active means p is optimal there up to
            # round-off): check every row.
            known = inner if working.size == num_points and working_points is points else None
            all_inner, best_upper, lower = _all_rows_bounds(points, p, norm_p, best_upper, known)
            if min(best_upper, 90.0) - lower <= tol_deg or working.size == num_points:
                return _solver_result(p, best_upper, lower, iteration, tol_deg)
            working, working_points = _grow_working_set(points, working, all_inner, working_size)
            candidate = int(all_inner.argmin())
            if candidate in active:
                return _solver_result(p, best_upper, lower, iteration, tol_deg)
        active, weights = _minor_cycles(points, active + [candidate], np.concatenate([weights, [0.0]]))
        new_p = weights @ points[active]
        if math.sqrt(float(new_p @ new_p)) >= norm_p * (1.0 - 1e-14):
            # Wolfe decreases ||p|| strictly in exact arithmetic; no progress means round-off has taken over.
            _, best_upper, lower = _all_rows_bounds(points, p, norm_p, best_upper)
            return _solver_result(p, best_upper, lower, iteration, tol_deg)
        p = new_p
    _, best_upper, lower = _all_rows_bounds(points, p, math.sqrt(float(p @ p)), best_upper)
    return _solver_result(p, best_upper, lower, max_iter, tol_deg)


def _initial_working_set(
    points: np.ndarray, alignment: np.ndarray, start: int, working_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """First rows searched, as (indices, rows): every row when there are few, else the ``working_size`` least
    aligned with the mean direction (the likeliest violators) and the start row."""
    num_points = points.shape[0]
    if num_points <= 2 * working_size:
        return np.arange(num_points), points
    working = _sorted_union(num_points, np.argpartition(alignment, working_size)[:working_size], [start])
    return working, points[working]


def _grow_working_set(
    points: np.ndarray, working: np.ndarray, all_inner: np.ndarray, working_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """The working set joined by the ``working_size`` rows of smallest ``<u_i, p>`` (every row if no more)."""
    num_points = points.shape[0]
    if num_points > working_size:
        violators = np.argpartition(all_inner, working_size)[:working_size]
    else:
        violators = np.arange(num_points)
    working = _sorted_union(num_points, working, violators)
    return working, points[working]


def _all_rows_bounds(
    points: np.ndarray, p: np.ndarray, norm_p: float, best_upper: float, all_inner: np.ndarray | None = None
) -> tuple[np.ndarray, float, float]:
    """Certified bounds from every row: (``points @ p``, best upper bound so far, lower bound) in degrees.

    ``all_inner``: ``points @ p`` when the caller has it (the working set was every row).
    """
    if all_inner is None:
        all_inner = points @ p
    upper, lower = _bounds_deg(norm_p, float(all_inner.min()))
    return all_inner, min(best_upper, upper), lower


def _solver_result(
    p: np.ndarray, best_upper: float, lower: float, iterations: int, tol_deg: float
) -> tuple[np.ndarray, float, float, int, bool]:
    """The solver's return tuple; converged when the gap (upper bound clipped at 90) is within ``tol_deg``."""
    return p, best_upper, lower, iterations, min(best_upper, 90.0) - lower <= tol_deg


def _minor_cycles(points: np.ndarray, active: list[int], weights: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Wolfe's minor cycles: project onto the affine hull of the active rows, and while that point leaves the
    simplex step back to its boundary and drop the rows whose weight vanished. Returns (active, weights)."""
    while True:
        affine = _solve_affine(points[active])
        if (affine > _WEIGHT_EPS).all():
            return active, affine
        negative = affine <= _WEIGHT_EPS
        denominators = weights[negative] - affine[negative]
        safe = np.where(denominators > 0, denominators, 1.0)
        ratios = np.where(denominators > 0, weights[negative] / safe, 0.0)
        step = float(ratios.min()) if ratios.size else 0.0
        weights = step * affine + (1.0 - step) * weights
        keep = weights > _WEIGHT_EPS
        if keep.all():  # numerical tie: drop the smallest so the corral shrinks and the loop terminates
            keep[int(np.argmin(weights))] = False
        active = [index for index, kept in zip(active, keep) if kept]
        weights = weights[keep]
        weights /= weights.sum()
        if len(active) == 1:
            return active, weights


def cone_from_unit_rows(
    units: np.ndarray, norms: np.ndarray, tol_deg: float, max_iter: int = 10_000, units_sum: np.ndarray | None = None
) -> tuple[float, np.ndarray | None, float, int, bool]:
    """Cone of non-empty unit rows ``units`` [m, d] (float64, rows of norm 1) whose original rows had ``norms``.

    Returns (angle_deg, axis or None, gap_deg, iterations, converged): the shared core of
    :func:`cone_angle_info` and of the collapse probe, which passes unit rows it has already computed (and their
    sum ``units.sum(axis=0)``, shared with the robust cone: the same numbers without another pass over the rows).
    """
    if units_sum is None:
        units_sum = units.sum(axis=0)
    # Certificate for 90 degrees: two hull points that are (near) zero when the rows surround the origin.
    threshold = math.sin(math.radians(tol_deg))
    mean_unit = units_sum / units.shape[0]  # = units.mean(axis=0), bit for bit
    weighted = (norms @ units) / norms.sum()
    smallest = min(math.sqrt(float(mean_unit @ mean_unit)), math.sqrt(float(weighted @ weighted)))
    if smallest <= threshold:
        return 90.0, None, 90.0 - math.degrees(math.acos(min(smallest, 1.0))), 0, True
    p, upper, lower, iterations, converged = _wolfe_min_norm_point(units, tol_deg, max_iter, points_sum=units_sum)
    norm_p = math.sqrt(float(p @ p))
    if upper >= 90.0 or norm_p == 0.0:
        return 90.0, None, max(0.0, 90.0 - lower), iterations, converged
    return upper, p / norm_p, upper - lower, iterations, converged


def cone_angle_info(x: Tensor | np.ndarray, tol_deg: float = 1e-4, max_iter: int = 10_000) -> ConeAngle:
    """Smallest enclosing cone of the non-zero rows of ``x`` [n, d]; see the module docstring.

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
    for their count). NaN when no row is non-zero. Source of the reduction: see the module docstring.
    """
    return cone_angle_info(x, tol_deg=tol_deg).angle_deg


def robust_cone_from_unit_rows(
    units: np.ndarray, norms: np.ndarray, q: float, tol_deg: float, units_sum: np.ndarray | None = None
) -> float:
    """Robust cone half-angle of level ``q`` of non-empty unit rows ``units`` [m, d] (float64) whose original rows
    had ``norms`` (see the module docstring): the exact cone of the ceil(q m) rows closest to the mean direction.
    ``units_sum``: ``units.sum(axis=0)`` when the caller has it."""
    m = units.shape[0]
    total = units.sum(axis=0) if units_sum is None else units_sum
    total_norm = math.sqrt(float(total @ total))
    if total_norm <= m * math.sin(math.radians(tol_deg)):
        return 90.0
    cosines = units @ (total / total_norm)
    k = math.ceil(q * m - 1e-9)  # guard q * m landing a hair above an integer
    if k < m:
        threshold = np.partition(cosines, m - k)[m - k]  # k-th largest cosine
        keep = cosines >= threshold
        return cone_from_unit_rows(units[keep], norms[keep], tol_deg)[0]
    return cone_from_unit_rows(units, norms, tol_deg, units_sum=total)[0]


def robust_cone_angle(x: Tensor | np.ndarray, q: float = ROBUST_CONE_LEVEL, tol_deg: float = 1e-4) -> float:
    """Half-angle in degrees of the smallest cone holding the fraction ``q`` of the non-zero rows of ``x`` closest
    in angle to their mean direction (ties kept); see the module docstring for the formula and its properties.

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
