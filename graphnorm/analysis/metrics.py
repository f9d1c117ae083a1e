"""Oversmoothing and dimensional-collapse metrics on a representation matrix x [n, d], one matrix per call.

Every function computes in float64 whatever the input dtype (float16 / bfloat16 values are exact there, so half
input gives the same numbers as float32 input of the same values), rejects NaN / Inf, input without rows or
without columns, and (for the metrics that depend on scale) input too large for float64 sums of squares (entries
of about 1e150 and above, see :mod:`graphnorm.analysis.magnitude`) with a ``ValueError`` naming the problem, and
treats zero rows as documented per function. The scale-invariant metrics (ranks, cosines, MAD, cones) first rescale
input whose largest entry is beyond ``2**±200`` by a power of two, so they hold over the whole float64 range; rows
below ~1e-154 times the largest entry, whose squared norm underflows, count as zero rows.
"Undefined" values (e.g. a cosine with fewer than two non-zero rows) are NaN, never an exception, so a probe
over a dead layer still yields a table. These are the definitions, and the test oracle of the batched probe path
(:mod:`graphnorm.analysis.collapse`); the cone angles are in :mod:`graphnorm.analysis.cone`.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg.cython_blas  # noqa: F401 - the compiled kernels' BLAS and LAPACK (SciPy's), loaded before any
import scipy.linalg.cython_lapack  # noqa: F401 - thread limit is set (graphnorm.threads.single_thread)
import torch
from torch import Tensor

from graphnorm.analysis.cone import cone_angle, cone_angle_info, robust_cone_angle
from graphnorm.analysis.magnitude import check_not_too_large, rescale_for_invariant
from graphnorm.checks import check_edge_index
from graphnorm.numba_kernels import kernel

__all__ = [
    "check_matrix",
    "as_float64",
    "singular_values",
    "effective_rank",
    "effective_rank_from_singular_values",
    "stable_rank",
    "mean_cosine_similarity",
    "cone_angle",
    "cone_angle_info",
    "robust_cone_angle",
    "dirichlet_energy",
    "mad",
]


def check_matrix(x: object, name: str, where: str = "") -> None:
    """``TypeError`` / ``ValueError`` naming ``name`` (``where`` ends the message: which layer, say) unless ``x`` is a
    real [n, d] tensor with at least one row and one column."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}{where}")
    if x.dim() != 2:
        raise ValueError(f"{name}: x must have shape [n, d], got shape {tuple(x.shape)}{where}")
    if x.is_complex():
        raise TypeError(f"{name}: x must be real, got {x.dtype}{where}")
    if x.size(0) == 0:
        raise ValueError(f"{name}: x has no rows (shape {tuple(x.shape)}){where}")
    if x.size(1) == 0:
        raise ValueError(f"{name}: x has no columns (shape {tuple(x.shape)}){where}")


def as_float64(x: Tensor, name: str = "metric", invariant: bool = False) -> Tensor:
    """Validate ``x`` [n, d] (real, finite, not too large, at least one row and one column) and return a detached
    float64 CPU copy; ``invariant`` (for metrics that do not change when ``x`` is scaled) rescales extreme input
    instead of rejecting it (:func:`graphnorm.analysis.magnitude.rescale_for_invariant`)."""
    check_matrix(x, name)
    if x.device.type == "meta":
        raise ValueError(f"{name}: x is on the meta device (it has no values); pass a CPU or GPU tensor")
    x64 = x.detach().to(device="cpu", dtype=torch.float64)
    if not torch.isfinite(x64).all():
        bad = int((~torch.isfinite(x64)).sum())
        raise ValueError(f"{name}: x contains NaN or Inf ({bad} of {x64.numel()} entries)")
    if invariant:
        x64 = rescale_for_invariant(x64)
    check_not_too_large(float(x64.square().sum()), x64.size(0), name)
    return x64


@kernel(nogil=True)
def gram_matrix(x: np.ndarray) -> np.ndarray:
    """X^T X of float64 rows ``x`` [n, d] as [d, d], through BLAS (dgemm), its lower triangle set from the upper one
    (symmetric by construction, whatever the BLAS kernel's blocking); compiled, so the collapse probe computes it
    inside its per-layer loop, on a layer still in cache. Its eigenvalues carry an absolute error of
    ~eps * sigma_1^2 in any summation order, which is the Gram route's floor (see :func:`_singular_values_f64`)."""
    gram = np.dot(x.T, x)
    for row in range(gram.shape[0]):
        for column in range(row):
            gram[row, column] = gram[column, row]
    return gram


@kernel(nogil=True)
def spectrum_from_gram(gram: np.ndarray) -> np.ndarray:
    """Descending singular values [d] of a matrix whose Gram matrix is ``gram`` [d, d]: the square roots of its
    eigenvalues (LAPACK's symmetric solver), negative round-off clamped to 0; compiled, like :func:`gram_matrix`."""
    eigenvalues = np.linalg.eigvalsh(gram)
    size = eigenvalues.size
    sigma = np.empty(size)
    for index in range(size):
        sigma[index] = math.sqrt(max(eigenvalues[size - 1 - index], 0.0))
    return sigma


def _gram_f64(x64: Tensor) -> Tensor:
    """X^T X of a float64 CPU matrix [n, d] as [d, d] (:func:`gram_matrix`)."""
    return torch.from_numpy(gram_matrix(x64.numpy()))


def _singular_values_f64(x64: Tensor) -> Tensor:
    """Descending singular values of a float64 matrix.

    Tall matrices (n > 2d, the usual nodes x channels case) go through the d x d Gram matrix, much cheaper than an
    SVD of the n x d matrix; singular values below ~1e-8 * sigma_max are round-off either way (they change the
    effective rank by < 1e-5). Others use LAPACK's SVD.
    """
    n, d = x64.shape
    if n > 2 * d:
        return torch.from_numpy(spectrum_from_gram(_gram_f64(x64).numpy()))
    return torch.linalg.svdvals(x64)


def singular_values(x: Tensor, center: bool = False, normalize: str | None = "max") -> Tensor:
    """Singular values of ``x`` (optionally column-centered), descending, float64.

    normalize: "max" divides by sigma_1 (spectrum plots), "sum" by sum(sigma) (the distribution p of the
    effective rank), None leaves them. A zero matrix returns zeros for every normalization.
    """
    if normalize not in ("max", "sum", None):
        raise ValueError(f"singular_values: normalize must be 'max', 'sum' or None, got {normalize!r}")
    x64 = as_float64(x, "singular_values", invariant=normalize is not None)
    if center:
        x64 = x64 - x64.mean(dim=0, keepdim=True)
    sigma = _singular_values_f64(x64)
    if normalize is None:
        return sigma
    scale = sigma[0] if normalize == "max" else sigma.sum()
    return sigma / scale if scale > 0 else torch.zeros_like(sigma)


def effective_rank_from_singular_values(sigma: Tensor) -> float:
    """exp(H(p)), p_k = sigma_k / sum(sigma), with 0 log 0 = 0; 0.0 for an all-zero spectrum.
    Test oracle of the batched ``graphnorm.analysis.collapse.sets._ranks`` (kept separate on purpose)."""
    total = float(sigma.sum())
    if total <= 0:
        return 0.0
    p = sigma / total
    positive = p[p > 0]  # 0 log 0 = 0: the ContraNorm reference code gets NaN here on rank-deficient input
    return math.exp(float(-(positive * positive.log()).sum()))


def effective_rank(x: Tensor, center: bool = False) -> float:
    """Effective rank of Roy & Vetterli (2007), "The effective rank: a measure of effective dimensionality".

    erank(X) = exp(H(p)), H(p) = -sum_k p_k log p_k, p_k = sigma_k / sum_j sigma_j over the singular values
    sigma of X (column-centered when ``center``). Convention 0 log 0 = 0, so rank-deficient input is finite
    (the ContraNorm reference implementation, Guo et al. 2023, returns NaN there). Zero matrix: 0.0.
    Ranges over [1, min(n, d)] for non-zero X.
    """
    x64 = as_float64(x, "effective_rank", invariant=True)
    if center:
        x64 = x64 - x64.mean(dim=0, keepdim=True)
    return effective_rank_from_singular_values(_singular_values_f64(x64))


def stable_rank(x: Tensor) -> float:
    """Stable (numerical) rank ||X||_F^2 / ||X||_2^2 (Rudelson & Vershynin 2007; used for collapse by
    e.g. Guo et al. 2023, ContraNorm). Lies in [1, rank(X)]; zero matrix: 0.0. The probe records it as metric
    ``stable_rank``. Test oracle of the batched ``graphnorm.analysis.collapse.sets._ranks`` (kept separate on purpose).
    """
    x64 = as_float64(x, "stable_rank", invariant=True)
    frobenius_sq = float(x64.square().sum())
    if frobenius_sq == 0:
        return 0.0
    return frobenius_sq / float(_singular_values_f64(x64)[0]) ** 2


def _unit_rows(x64: Tensor) -> tuple[Tensor, Tensor]:
    """Unit-normalized non-zero rows and the boolean mask of non-zero rows.
    Test oracle of the batched ``graphnorm.analysis.collapse.loading._unit_rows`` (kept separate on purpose)."""
    norms = x64.norm(dim=1)
    nonzero = norms > 0
    return x64[nonzero] / norms[nonzero, None], nonzero


def mean_cosine_similarity(x: Tensor) -> float:
    """Mean cosine similarity over ordered pairs i != j of non-zero rows, in O(n d).

    With unit rows u_i: sum_{i != j} u_i . u_j = ||sum_i u_i||^2 - sum_i ||u_i||^2 = ||sum_i u_i||^2 - m,
    divided by m (m - 1) for the m non-zero rows. Zero rows have no direction, so they are excluded (not
    counted as cosine 0, which would read as "less collapsed" just because some rows died). NaN when m < 2.
    1 means all rows point the same way (full oversmoothing).
    """
    units, _ = _unit_rows(as_float64(x, "mean_cosine_similarity", invariant=True))
    m = units.size(0)
    if m < 2:
        return math.nan
    total = units.sum(dim=0)
    return float((total.dot(total) - m) / (m * (m - 1)))


def dirichlet_energy(x: Tensor, edge_index: Tensor, normalized: bool = False) -> float:
    """Dirichlet energy of Rusch, Bronstein & Mishra (2023), "A survey on oversmoothing in GNNs", Def. 3.2:

        E(X) = (1/n) sum_i sum_{j in N(i)} ||x_i - x_j||^2,

    N(i) read from ``edge_index`` as given (an undirected graph stored with both directions counts each pair
    twice, exactly as the double sum does). Oversmoothing is E -> 0 (exponentially in depth).
    ``normalized=True`` evaluates it on X / ||X||_F, which removes the trivial decay from shrinking norms and
    is what the collapse plots use; a zero matrix gives 0.0 either way. A malformed ``edge_index`` raises as
    :func:`graphnorm.checks.check_edge_index` does (``TypeError`` / ``ValueError``). Not scale-invariant
    unless ``normalized`` (E(cX) = c^2 E(X)), so extreme input is rejected rather than rescaled then.
    """
    x64 = as_float64(x, "dirichlet_energy", invariant=normalized)
    check_edge_index(edge_index, x64.size(0), where="dirichlet_energy")
    edge_index = edge_index.to("cpu", torch.long)
    if normalized:
        frobenius = x64.norm()
        if frobenius == 0:
            return 0.0
        x64 = x64 / frobenius
    differences = x64[edge_index[0]] - x64[edge_index[1]]
    return float(differences.square().sum() / x64.size(0))


def mad(x: Tensor, edge_index: Tensor | None = None) -> float:
    """Mean Average Distance of Chen et al. (2020), "Measuring and relieving the over-smoothing problem for
    graph neural networks from the topological view" (AAAI), with cosine distance D_ij = 1 - cos(x_i, x_j).

    MAD = mean over nodes i (with at least one target pair) of the mean over targets j of D_ij; targets are
    all other non-zero rows (``edge_index=None``, computed in O(n d): it equals 1 - mean cosine similarity) or
    the neighbours of i in ``edge_index`` (self-loops skipped).

    Difference from the reference code: it averages only the *non-zero* distances, so under collapse (most
    D_ij = 0) it divides by a tiny count and reads high; here every target pair counts in the denominator, so
    MAD -> 0 as rows align. Zero rows have no direction and are excluded (pairs touching them dropped).
    NaN when no pair remains. Range [0, 2]. A malformed ``edge_index`` raises as
    :func:`graphnorm.checks.check_edge_index` does (``TypeError`` / ``ValueError``).
    """
    x64 = as_float64(x, "mad", invariant=True)
    if edge_index is None:
        mean_cos = mean_cosine_similarity(x64)
        return 1.0 - mean_cos if not math.isnan(mean_cos) else math.nan
    check_edge_index(edge_index, x64.size(0), where="mad")
    edge_index = edge_index.to("cpu", torch.long)
    norms = x64.norm(dim=1)
    source, target = edge_index
    keep = (source != target) & (norms[source] > 0) & (norms[target] > 0)
    source, target = source[keep], target[keep]
    if source.numel() == 0:
        return math.nan
    cosine = (x64[source] * x64[target]).sum(dim=1) / (norms[source] * norms[target])
    num_rows = x64.size(0)
    distance_sum = torch.zeros(num_rows, dtype=torch.float64).index_add_(0, source, 1.0 - cosine)
    count = torch.zeros(num_rows, dtype=torch.float64).index_add_(0, source, torch.ones_like(cosine))
    has_targets = count > 0
    return float((distance_sum[has_targets] / count[has_targets]).mean())
