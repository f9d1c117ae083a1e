"""The float64 Gram matrices of the collapse probe (``metrics.gram_matrix``: one compiled BLAS product) and what
their summation order does to the spectrum.

An eigenvalue of X^T X computed in float64 carries an absolute error of about eps * s_1^2 whatever the order of the
sums, so a singular value ratio s_i / s_1 is known to about eps / (s_i / s_1) and a zero singular value reads anywhere
up to sqrt(eps) ~ 1.5e-8. These tests pin that floor for the probe's Gram route against an SVD of the same float64
rows, and check that the probe's batched Gram matrices are those of the one-matrix reference (within rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphnorm.analysis.collapse import collapse_records_layers
from graphnorm.analysis.collapse.sets import _grams
from graphnorm.analysis.metrics import _gram_f64, effective_rank, singular_values

EPS = float(np.finfo(np.float64).eps)


def _spectrum_layers(generator: torch.Generator) -> list[torch.Tensor]:
    """Tall float32 layers with singular values spread over 1 .. 1e-6, one rank-deficient, one collapsed."""
    layers = []
    for decay in (1.0, 1e-3, 1e-6):
        left = torch.linalg.qr(torch.randn(400, 16, generator=generator, dtype=torch.float64))[0]
        right = torch.linalg.qr(torch.randn(16, 16, generator=generator, dtype=torch.float64))[0]
        sigma = torch.logspace(0, float(np.log10(decay)), 16, dtype=torch.float64)
        layers.append((left * sigma) @ right.T)
    rank_deficient = torch.randn(400, 3, generator=generator, dtype=torch.float64) @ torch.randn(
        3, 16, generator=generator, dtype=torch.float64
    )
    collapsed = torch.randn(400, 1, generator=generator).repeat(1, 16)
    collapsed = collapsed + 1e-7 * torch.randn(400, 16, generator=generator)
    return [layer.float() for layer in [*layers, rank_deficient, collapsed.double()]]


def test_batched_grams_are_the_reference_grams_within_rounding():
    generator = torch.Generator().manual_seed(0)
    stacked = torch.stack([layer.double() for layer in _spectrum_layers(generator)])
    grams = _grams(stacked)
    for layer, gram in zip(stacked, grams):
        # Another compiled caller of the same product (a slice of the stack, maybe at another alignment, for which
        # BLAS may pick another kernel): within a float64 sum's rounding, n * eps * |x_i| |x_j| per entry.
        column_norms = torch.linalg.vector_norm(layer, dim=0)
        bound = layer.size(0) * EPS * torch.outer(column_norms, column_norms)
        assert ((gram - _gram_f64(layer)).abs() <= bound).all()
        assert torch.equal(gram, gram.T)  # the lower triangle is set from the upper one


def test_gram_is_the_float64_product_within_rounding():
    """Every entry within d * eps * |x_i| |x_j| of the products summed in exact (long double where the platform has
    it) arithmetic: another order of the same float64 sums, not another precision."""
    generator = torch.Generator().manual_seed(1)
    for layer in _spectrum_layers(generator):
        x = layer.double()
        exact = (x.numpy().astype(np.longdouble).T @ x.numpy().astype(np.longdouble)).astype(np.float64)
        column_norms = np.linalg.norm(x.numpy(), axis=0)
        bound = x.size(0) * EPS * np.outer(column_norms, column_norms)
        assert (np.abs(_gram_f64(x).numpy() - exact) <= bound).all()


def test_probe_spectrum_is_within_the_gram_floor_of_an_svd():
    """The probe's sv_i (s_i / s_1) and effective rank against LAPACK's SVD of the same float64 rows: each ratio within
    8 eps / ratio + 8 eps absolute, capped at 2 sqrt(eps) (the Gram route's floor; measured here up to 4 eps / ratio),
    the effective rank within 1e-6 relative. The reference functions effective_rank and singular_values take the
    Gram route too, through other calls: within a few float64 round-offs of the probe (another CPU's kernels round
    the last bit differently)."""
    generator = torch.Generator().manual_seed(2)
    xs = _spectrum_layers(generator)
    per_layer = collapse_records_layers(xs, num_singular_values=16)
    for x, records in zip(xs, per_layer):
        values = {record["metric"]: record["value"] for record in records}
        svd = torch.linalg.svdvals(x.double())
        ratios = (svd / svd[0]).numpy()
        for index, ratio in enumerate(ratios):
            floor = min(2 * np.sqrt(EPS), 8 * EPS / max(ratio, 1e-300)) + 8 * EPS
            assert abs(values[f"sv_{index:03d}"] - ratio) <= floor, (index, values[f"sv_{index:03d}"], ratio)
        p = svd / svd.sum()
        svd_rank = float(torch.exp(-(p[p > 0] * p[p > 0].log()).sum()))
        assert values["effective_rank"] == pytest.approx(svd_rank, rel=1e-6)
        assert values["effective_rank"] == pytest.approx(effective_rank(x), rel=64 * EPS)
        reference = singular_values(x, normalize="max").tolist()
        probed = [values[f"sv_{index:03d}"] for index in range(16)]
        assert probed == pytest.approx(reference, rel=64 * EPS, abs=64 * EPS)
