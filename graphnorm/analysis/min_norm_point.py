"""Wolfe's min-norm-point algorithm for the unit rows of a cone problem, compiled with numba.

Wolfe 1976, "Finding the nearest point in a polytope", Math. Programming 11: an active-set method, finite in exact
arithmetic, for the point p* of conv{u_i} closest to the origin. Each major cycle finds the row most violating the
optimality condition <p, u_i> >= ||p||^2 (one O(n d) product), adds it to the corral, and runs minor cycles
(:func:`_minor_cycles`). It stops on the bounds in degrees of :func:`graphnorm.analysis.cone.cone_from_unit_rows`,
which turns p* into the cone angle. Compiled because a cone needs many small operations, whose per-call overhead as
NumPy calls would cost more than their arithmetic; the functions are compiled on first use (a one-time wait) and
cached beside this file (``__pycache__``). Entry point: :func:`wolfe_min_norm_point`.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def _bounds_deg(norm_p: float, min_inner: float) -> tuple[float, float]:
    """(upper, lower) bounds on theta* in degrees from an iterate p of norm norm_p and min_i <p, u_i>."""
    lower = math.degrees(math.acos(min(norm_p, 1.0)))
    if norm_p == 0.0:
        return 180.0, lower
    return math.degrees(math.acos(max(-1.0, min(1.0, min_inner / norm_p)))), lower


@numba.njit(cache=True)
def _lu_solve(matrix: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, bool]:
    """Solution of ``matrix @ s = rhs`` by LU with partial pivoting (LAPACK gesv's method, on a copy); False when a
    pivot is exactly zero (gesv's info > 0)."""
    a, b = matrix.copy(), rhs.copy()
    size = b.size
    for column in range(size):
        pivot = column + np.argmax(np.abs(a[column:, column]))
        if a[pivot, column] == 0.0:
            return b, False
        if pivot != column:
            for j in range(size):
                a[column, j], a[pivot, j] = a[pivot, j], a[column, j]
            b[column], b[pivot] = b[pivot], b[column]
        for row in range(column + 1, size):
            factor = a[row, column] / a[column, column]
            a[row, column] = factor
            for j in range(column + 1, size):
                a[row, j] -= factor * a[column, j]
            b[row] -= factor * b[column]
    for row in range(size - 1, -1, -1):
        total = b[row]
        for j in range(row + 1, size):
            total -= a[row, j] * b[j]
        b[row] = total / a[row, row]
    return b, True


@numba.njit(cache=True)
def _solve_affine(corral: np.ndarray) -> np.ndarray:
    """Weights (summing to 1) of the min-norm point of the affine hull of the rows of ``corral`` [k, d]."""
    k = corral.shape[0]
    bordered = np.empty((k + 1, k + 1))
    bordered[:k, :k] = corral @ corral.T
    bordered[:k, k] = 1.0
    bordered[k, :k] = 1.0
    bordered[k, k] = 0.0
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    solution, solved = _lu_solve(bordered, rhs)
    if not solved:  # singular (rows repeated in the corral): NumPy's least squares, as rare as it is slow to compile
        with numba.objmode(solution="float64[:]"):
            solution = np.linalg.lstsq(bordered, rhs, rcond=None)[0]
    return solution[:k]


WORKING_SIZE = 256  # rows searched per major cycle before all rows are checked (see wolfe_min_norm_point)
# "Zero weight" threshold of the active-set weights, which live on the simplex.
_WEIGHT_EPS = 1e-12


@numba.njit(cache=True)
def _minor_cycles(points: np.ndarray, active: np.ndarray, weights: np.ndarray, count: int) -> int:
    """Wolfe's minor cycles on the corral ``active[:count]`` with ``weights[:count]`` (updated in place): project onto
    the affine hull of the active rows, and while that point leaves the simplex step back to its boundary and drop
    the rows whose weight vanished. Returns the new count."""
    while True:
        affine = _solve_affine(points[active[:count]])
        if (affine > _WEIGHT_EPS).all():
            weights[:count] = affine
            return count
        step = np.inf
        for i in range(count):
            if affine[i] <= _WEIGHT_EPS:
                denominator = weights[i] - affine[i]
                step = min(step, weights[i] / denominator if denominator > 0 else 0.0)
        mixed = step * affine + (1.0 - step) * weights[:count]
        keep = mixed > _WEIGHT_EPS
        if keep.all():  # numerical tie: drop the smallest so the corral shrinks and the loop terminates
            keep[np.argmin(mixed)] = False
        kept = 0
        for i in range(count):
            if keep[i]:
                active[kept], weights[kept] = active[i], mixed[i]
                kept += 1
        count = kept
        weights[:count] /= weights[:count].sum()
        if count == 1:
            return count


@numba.njit(cache=True)
def _smallest(values: np.ndarray, count: int) -> np.ndarray:
    """Indices of ``count`` smallest values: NumPy's ``argpartition`` (run by the interpreter, so ties at the border
    are broken exactly as NumPy does)."""
    with numba.objmode(indices="intp[:]"):
        indices = np.argpartition(values, count)[:count]
    return indices


@numba.njit(cache=True)
def _with_rows(num_points: int, working: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """Sorted union of two sets of row indices below ``num_points``, through a mask."""
    mask = np.zeros(num_points, dtype=np.bool_)
    mask[working] = True
    mask[extra] = True
    return np.flatnonzero(mask)


@numba.njit(cache=True)
def wolfe_min_norm_point(
    points: np.ndarray, points_sum: np.ndarray, tol_deg: float, max_iter: int, working_size: int
) -> tuple[np.ndarray, float, float, int]:
    """Min-norm point of conv(points) for unit rows [n, d] (C-contiguous) with sum ``points_sum``; returns
    (p, certified upper bound in degrees, lower bound, major cycles).

    Working set: the O(n d) search for the most violating row dominates, so each major cycle searches only a
    working set of rows (at first the ``working_size`` pointing furthest from the mean direction, and the start).
    When the stop criterion holds on the working set, all rows are checked once; violators join the working set and
    the iteration continues from the same state. Only the all-rows check yields the returned (certified) upper bound.
    """
    num_points = points.shape[0]
    alignment = points @ points_sum  # alignment with the mean direction (all zero if it vanishes)
    # Start at the row closest to the mean direction: usually already near the final axis.
    start = np.argmax(alignment)
    everything = num_points <= 2 * working_size
    working = np.arange(num_points)
    if not everything:
        working = _with_rows(num_points, _smallest(alignment, working_size), np.array([start]))
    working_points = points if everything else points[working]
    active, weights = np.empty(num_points, dtype=np.intp), np.empty(num_points)
    active[0], weights[0], count = start, 1.0, 1
    p = points[start].copy()
    best_upper, lower = 180.0, 0.0
    for iteration in range(1, max_iter + 1):
        norm_p = math.sqrt(p @ p)
        inner = working_points @ p
        position = np.argmin(inner)
        upper, lower = _bounds_deg(norm_p, inner[position])
        candidate = working[position]
        if min(upper, 90.0) - lower <= tol_deg or (active[:count] == candidate).any():
            # Converged on the working set (a candidate already active means p is optimal there up to
            # round-off): check every row.
            all_inner = inner if everything else points @ p
            upper, lower = _bounds_deg(norm_p, all_inner.min())
            best_upper = min(best_upper, upper)
            if min(best_upper, 90.0) - lower <= tol_deg or working.size == num_points:
                return p, best_upper, lower, iteration
            # Here num_points > 2 * working_size (else the working set was every row and the solver returned).
            working = _with_rows(num_points, working, _smallest(all_inner, working_size))
            everything, working_points = False, points[working]
            candidate = np.argmin(all_inner)
            if (active[:count] == candidate).any():
                return p, best_upper, lower, iteration
        active[count], weights[count] = candidate, 0.0
        count = _minor_cycles(points, active, weights, count + 1)
        new_p = weights[:count] @ points[active[:count]]
        if math.sqrt(new_p @ new_p) >= norm_p * (1.0 - 1e-14):
            # Wolfe decreases ||p|| strictly in exact arithmetic; no progress means round-off has taken over.
            upper, lower = _bounds_deg(norm_p, (points @ p).min())
            return p, min(best_upper, upper), lower, iteration
        p = new_p
    upper, lower = _bounds_deg(math.sqrt(p @ p), (points @ p).min())
    return p, min(best_upper, upper), lower, max_iter
