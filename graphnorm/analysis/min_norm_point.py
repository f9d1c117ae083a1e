"""Wolfe's min-norm-point algorithm for the unit rows of a cone problem, compiled with numba.

Wolfe 1976, "Finding the nearest point in a polytope", Math. Programming 11: an active-set method, finite in exact
arithmetic, for the point p* of conv{u_i} closest to the origin. Each major cycle finds the row most violating the
optimality condition <p, u_i> >= ||p||^2 (one O(n d) product), adds it to the corral, and runs minor cycles
(:func:`_minor_cycles`), whose affine projections solve with a Cholesky factor of the corral's Gram matrix updated
as rows join and leave (O(k^2) per change for k corral rows, not O(k^3) per projection). It stops on the bounds in
degrees of :func:`graphnorm.analysis.cone.cone_from_unit_rows`, which turns p* into the cone angle. Compiled because a
cone needs many small operations, whose per-call overhead as NumPy calls would cost more than their arithmetic; the
functions are compiled on first use (a one-time wait, see :func:`graphnorm.analysis.collapse.warm_kernels`) and
cached beside this file (``__pycache__``). Entry point: :func:`wolfe_min_norm_point`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from graphnorm.numba_kernels import kernel


@kernel()
def _bounds_deg(norm_p: float, min_inner: float) -> tuple[float, float]:
    """(upper, lower) bounds on theta* in degrees from an iterate p of norm norm_p and min_i <p, u_i>."""
    lower = math.degrees(math.acos(min(norm_p, 1.0)))
    if norm_p == 0.0:
        return 180.0, lower
    return math.degrees(math.acos(max(-1.0, min(1.0, min_inner / norm_p)))), lower


@kernel()
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


@kernel()
def _solve_affine_gram(gram: np.ndarray) -> np.ndarray:
    """Weights (summing to 1) of the min-norm point of the affine hull of k rows whose inner products are ``gram``
    [k, k]: the bordered system [[G, 1], [1^T, 0]] [w, mu] = [0, 1]."""
    k = gram.shape[0]
    bordered = np.empty((k + 1, k + 1))
    bordered[:k, :k] = gram
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


@kernel()
def _solve_affine(corral: np.ndarray) -> np.ndarray:
    """Weights (summing to 1) of the min-norm point of the affine hull of the rows of ``corral`` [k, d]."""
    return _solve_affine_gram(corral @ corral.T)


# A new corral row whose squared distance to the affine hull of the others is below this share of its squared
# norm (+1) counts as affinely dependent: the factor is then not used until the corral is independent again.
_DEPENDENT = 1e-13


@kernel()
def _factor_append(factor: np.ndarray, count: int, column: np.ndarray, diagonal: float) -> bool:
    """Extend the upper-triangular Cholesky factor ``factor[:count, :count]`` of H by a row and column (``column``
    [count] and ``diagonal`` of H's new column): R^T c = column by forward substitution, then the new diagonal entry
    sqrt(diagonal - c.c). O(k^2). False (factor unusable) when that square is not clearly positive."""
    for i in range(count):
        total = column[i]
        for j in range(i):
            total -= factor[j, i] * factor[j, count]
        factor[i, count] = total / factor[i, i]
    rest = diagonal
    for i in range(count):
        rest -= factor[i, count] * factor[i, count]
    if not rest > _DEPENDENT * diagonal:
        return False
    factor[count, count] = math.sqrt(rest)
    return True


@kernel()
def _factor_delete(factor: np.ndarray, count: int, position: int) -> None:
    """Remove row and column ``position`` of H from its upper-triangular factor ``factor[:count, :count]``: drop
    the column, then restore the triangle with Givens rotations of neighbouring rows. O(k^2)."""
    for column in range(position, count - 1):
        for row in range(column + 2):
            factor[row, column] = factor[row, column + 1]
    for column in range(position, count - 1):
        a, b = factor[column, column], factor[column + 1, column]
        radius = math.hypot(a, b)
        cosine, sine = (a / radius, b / radius) if radius > 0.0 else (1.0, 0.0)
        factor[column, column], factor[column + 1, column] = radius, 0.0
        for later in range(column + 1, count - 1):
            upper, lower = factor[column, later], factor[column + 1, later]
            factor[column, later] = cosine * upper + sine * lower
            factor[column + 1, later] = cosine * lower - sine * upper


@kernel()
def _refactor(gram: np.ndarray, factor: np.ndarray, count: int) -> bool:
    """Cholesky factor of H = G + 1 1^T from the corral's inner products ``gram[:count, :count]``; False when the
    corral is affinely dependent."""
    for k in range(count):  # noqa: SIM110 (a loop numba compiles; all() of a generator it does not)
        if not _factor_append(factor, k, gram[k, :k] + 1.0, gram[k, k] + 1.0):
            return False
    return True


@kernel()
def _solve_factored(factor: np.ndarray, count: int) -> np.ndarray:
    """Affine min-norm weights from the factor of H = G + 1 1^T: on sum(w) = 1, w^T H w = w^T G w + 1, so the
    minimizer is H^{-1} 1 / (1^T H^{-1} 1) (two triangular solves, O(k^2))."""
    y = np.empty(count)
    for i in range(count):
        total = 1.0
        for j in range(i):
            total -= factor[j, i] * y[j]
        y[i] = total / factor[i, i]
    for i in range(count - 1, -1, -1):
        total = y[i]
        for j in range(i + 1, count):
            total -= factor[i, j] * y[j]
        y[i] = total / factor[i, i]
    return y / y.sum()


@kernel()
def _join_corral(
    points: np.ndarray, active: np.ndarray, count: int, gram: np.ndarray, factor: np.ndarray, factored: bool, row: int
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Put point ``row`` in the corral at ``active[count]``: its inner products with the corral's rows into ``gram``
    and the factor of H = G + 1 1^T extended (both grown when full). O(k d + k^2) per new row."""
    if count == gram.shape[0]:
        grown, grown_factor = np.zeros((2 * count, 2 * count)), np.zeros((2 * count, 2 * count))
        grown[:count, :count], grown_factor[:count, :count] = gram[:count, :count], factor[:count, :count]
        gram, factor = grown, grown_factor
    new = points[row]
    # Four inner products at a time: each still adds in column order (the same sums bit for bit), but four
    # independent sums keep the floating-point adder busy where one sum waits on each previous addition.
    for first in range(0, count - 3, 4):
        a, b, c, e = (
            points[active[first]],
            points[active[first + 1]],
            points[active[first + 2]],
            points[active[first + 3]],
        )
        total_a, total_b, total_c, total_e = 0.0, 0.0, 0.0, 0.0
        for k in range(new.size):
            total_a += new[k] * a[k]
            total_b += new[k] * b[k]
            total_c += new[k] * c[k]
            total_e += new[k] * e[k]
        gram[count, first], gram[count, first + 1] = total_a, total_b
        gram[count, first + 2], gram[count, first + 3] = total_c, total_e
    for j in range(count - count % 4, count + 1):  # the rest, and the new row itself
        other = points[active[j]] if j < count else new
        total = 0.0
        for k in range(new.size):
            total += new[k] * other[k]
        gram[count, j] = total
    for j in range(count):
        gram[j, count] = gram[count, j]
    active[count] = row
    if factored:
        factored = _factor_append(factor, count, gram[count, :count] + 1.0, gram[count, count] + 1.0)
    return gram, factor, factored


WORKING_SIZE = 256  # rows searched per major cycle before all rows are checked (see wolfe_min_norm_point)
# "Zero weight" threshold of the active-set weights, which live on the simplex.
_WEIGHT_EPS = 1e-12


@kernel()
def _minor_cycles(
    active: np.ndarray, weights: np.ndarray, count: int, gram: np.ndarray, factor: np.ndarray, factored: bool
) -> tuple[int, bool]:
    """Wolfe's minor cycles on the corral ``active[:count]`` with ``weights[:count]`` (updated in place), its inner
    products ``gram[:count, :count]`` and the Cholesky factor of G + 1 1^T when ``factored`` (both kept in step):
    project onto the affine hull of the active rows, and while that point leaves the simplex step back to its
    boundary and drop the rows whose weight vanished. Returns the new count and whether the factor is usable."""
    while True:
        affine = _solve_factored(factor, count) if factored else _solve_affine_gram(gram[:count, :count])
        if (affine > _WEIGHT_EPS).all():
            weights[:count] = affine
            return count, factored
        step = np.inf
        for i in range(count):
            if affine[i] <= _WEIGHT_EPS:
                denominator = weights[i] - affine[i]
                step = min(step, weights[i] / denominator if denominator > 0 else 0.0)
        mixed = step * affine + (1.0 - step) * weights[:count]
        keep = mixed > _WEIGHT_EPS
        if keep.all():  # numerical tie: drop the smallest so the corral shrinks and the loop terminates
            keep[np.argmin(mixed)] = False
        if factored:
            for position in range(count - 1, -1, -1):  # from the end: earlier positions stay where they are
                if not keep[position]:
                    _factor_delete(factor, count, position)
        kept_from = np.flatnonzero(keep)
        kept = kept_from.size
        for i in range(kept):
            active[i], weights[i] = active[kept_from[i]], mixed[kept_from[i]]
        # In place: entry (a, b) is read from (kept_from[a], kept_from[b]) >= (a, b), not yet overwritten.
        for a in range(kept):
            for b in range(kept):
                gram[a, b] = gram[kept_from[a], kept_from[b]]
        count = kept
        if not factored:
            factored = _refactor(gram, factor, count)
        weights[:count] /= weights[:count].sum()
        if count == 1:
            return count, factored


@kernel()
def _smallest(values: np.ndarray, count: int) -> np.ndarray:
    """Indices of ``count`` smallest values (``argpartition``: which of equal values at the border is taken does not
    matter, every row is checked before the solver stops)."""
    return np.argpartition(values, count)[:count]


@kernel()
def _with_rows(num_points: int, working: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """Sorted union of two sets of row indices below ``num_points``, through a mask."""
    mask = np.zeros(num_points, dtype=np.bool_)
    mask[working] = True
    mask[extra] = True
    return np.flatnonzero(mask)


@kernel(fastmath={"reassoc", "contract"})
def _products(rows: np.ndarray, p: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``rows @ p`` into ``out`` [len(rows)]: a loop the compiler vectorizes, without BLAS's call overhead, which
    dominates for the working set's few hundred rows. The sums may run in any order (round-off only)."""
    for i in range(rows.shape[0]):
        row = rows[i]
        total = 0.0
        for k in range(row.size):
            total += row[k] * p[k]
        out[i] = total
    return out


@kernel(fastmath={"reassoc", "contract"})
def _products_of(points: np.ndarray, rows: np.ndarray, p: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``points[rows] @ p`` into ``out`` [len(rows)] without gathering the rows."""
    for i in range(rows.size):
        row = points[rows[i]]
        total = 0.0
        for k in range(row.size):
            total += row[k] * p[k]
        out[i] = total
    return out


@kernel()
def _in_corral(active: np.ndarray, count: int, row: int) -> bool:
    """Whether point ``row`` is one of ``active[:count]``."""
    for i in range(count):  # noqa: SIM110 (a loop numba compiles; any() of a generator it does not)
        if active[i] == row:
            return True
    return False


@kernel(fastmath={"reassoc", "contract"})
def _combination(points: np.ndarray, active: np.ndarray, weights: np.ndarray, count: int, out: np.ndarray) -> None:
    """The corral's point sum_j weights[j] points[active[j]] into ``out`` [d]."""
    out[:] = 0.0
    for j in range(count):
        row, weight = points[active[j]], weights[j]
        for k in range(out.size):
            out[k] += weight * row[k]


@kernel(nogil=True)
def wolfe_min_norm_point(
    points: np.ndarray,
    rows: np.ndarray,
    points_sum: np.ndarray,
    tol_deg: float,
    max_iter: int,
    working_size: int,
    start_rows: np.ndarray,
    start_weights: np.ndarray,
) -> tuple[np.ndarray, float, float, int, np.ndarray, np.ndarray]:
    """Min-norm point of conv(points[rows]) for unit rows ``points`` [n, d] (C-contiguous), the set's rows given by
    index ``rows`` (a subset is not copied) with sum ``points_sum``; returns (p, certified upper bound in degrees,
    lower bound, major cycles, the final corral's rows and weights).

    Start: the corral ``start_rows`` (distinct rows of the set) with ``start_weights`` (positive; scaled to sum 1),
    first brought to the min-norm point of its own hull by minor cycles, e.g. the final corral of a superset's
    solve restricted to this set; when ``start_rows`` is empty, the row closest to the mean direction, usually
    already near the final axis. The start only changes the path: the stop criterion and the all-rows check below
    are the same, so the bounds returned are certified either way.

    Working set: the O(n d) search for the most violating row dominates, so each major cycle searches only a
    working set of rows (at first the ``working_size`` pointing furthest from the mean direction, and the start).
    When the stop criterion holds on the working set, all rows are checked once; violators join the working set and
    the iteration continues from the same state. Only the all-rows check yields the returned (certified) upper bound.
    """
    num_points, width = rows.size, points.shape[1]
    all_inner = _products_of(points, rows, points_sum, np.empty(num_points))  # alignment with the mean direction
    cold = start_rows.size == 0
    start = np.array([rows[np.argmax(all_inner)]]) if cold else start_rows
    everything = num_points <= 2 * working_size
    working = rows
    if not everything:
        working = _with_rows(points.shape[0], rows[_smallest(all_inner, working_size)], start)
    working_points = points[working]
    inner = np.empty(working.size)
    active, weights = np.empty(num_points, dtype=np.intp), np.empty(num_points)
    # The corral's inner products and the Cholesky factor of G + 1 1^T (affinely independent: at most d + 1 rows).
    gram, factor = np.zeros((width + 2, width + 2)), np.zeros((width + 2, width + 2))
    factored = True
    for j in range(start.size):
        gram, factor, factored = _join_corral(points, active, j, gram, factor, factored, start[j])
    count = start.size
    if cold:
        weights[0] = 1.0
    else:
        weights[:count] = start_weights / start_weights.sum()
        count, factored = _minor_cycles(active, weights, count, gram, factor, factored)
    p, new_p = np.empty(width), np.empty(width)
    _combination(points, active, weights, count, p)
    best_upper, lower = 180.0, 0.0
    for iteration in range(1, max_iter + 1):
        norm_p = math.sqrt(p @ p)
        _products(working_points, p, inner)
        position = np.argmin(inner)
        upper, lower = _bounds_deg(norm_p, inner[position])
        candidate = working[position]
        if min(upper, 90.0) - lower <= tol_deg or _in_corral(active, count, candidate):
            # Converged on the working set (a candidate already active means p is optimal there up to
            # round-off): check every row.
            if everything:
                all_inner = inner
            else:
                _products_of(points, rows, p, all_inner)
            upper, lower = _bounds_deg(norm_p, all_inner.min())
            best_upper = min(best_upper, upper)
            if min(best_upper, 90.0) - lower <= tol_deg or working.size == num_points:
                return p, best_upper, lower, iteration, active[:count].copy(), weights[:count].copy()
            # Here num_points > 2 * working_size (else the working set was every row and the solver returned).
            working = _with_rows(points.shape[0], working, rows[_smallest(all_inner, working_size)])
            working_points, inner = points[working], np.empty(working.size)
            candidate = rows[np.argmin(all_inner)]
            if _in_corral(active, count, candidate):
                return p, best_upper, lower, iteration, active[:count].copy(), weights[:count].copy()
        gram, factor, factored = _join_corral(points, active, count, gram, factor, factored, candidate)
        weights[count] = 0.0
        count, factored = _minor_cycles(active, weights, count + 1, gram, factor, factored)
        _combination(points, active, weights, count, new_p)
        if math.sqrt(new_p @ new_p) >= norm_p * (1.0 - 1e-14):
            # Wolfe decreases ||p|| strictly in exact arithmetic; no progress means round-off has taken over (the
            # corral returned is the last one, whose point is as near the origin as p up to round-off).
            upper, lower = _bounds_deg(norm_p, _products_of(points, rows, p, np.empty(num_points)).min())
            return p, min(best_upper, upper), lower, iteration, active[:count].copy(), weights[:count].copy()
        p, new_p = new_p, p
    upper, lower = _bounds_deg(math.sqrt(p @ p), _products_of(points, rows, p, np.empty(num_points)).min())
    return p, min(best_upper, upper), lower, max_iter, active[:count].copy(), weights[:count].copy()
