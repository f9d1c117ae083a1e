"""The scale-invariant metrics give the same numbers over the whole float64 range: rows scaled by 1e-200 or 1e200
(whose squares underflow or overflow) read as the unscaled rows, not as zero rows or an overflow error."""

from __future__ import annotations

import math

import pytest
import torch

from graphnorm.analysis import (
    collapse_metrics,
    cone_angle,
    effective_rank,
    mad,
    mean_cosine_similarity,
    singular_values,
    stable_rank,
)
from graphnorm.analysis.cone import robust_cone_angle

SCALES = [1e-200, 1e200, 2.0**-1000, 1e-310, 1e300]
SCALE_INVARIANT = {
    "cone_angle": cone_angle,
    "robust_cone_angle": robust_cone_angle,
    "mean_cosine_similarity": mean_cosine_similarity,
    "effective_rank": effective_rank,
    "centered_effective_rank": lambda x: effective_rank(x, center=True),
    "stable_rank": stable_rank,
    "mad": mad,
}


def _rows(n: int = 30, d: int = 5) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=generator, dtype=torch.float64) + 0.5
    x[3] = 0.0  # a zero row stays a zero row at every scale
    return x


def _edges(n: int = 30) -> torch.Tensor:
    rows = torch.arange(n)
    return torch.stack([rows, (rows + 1) % n])


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("name", sorted(SCALE_INVARIANT))
def test_scale_invariant_metrics_hold_over_the_float64_range(name, scale) -> None:
    metric = SCALE_INVARIANT[name]
    x = _rows()
    expected = metric(x)
    got = metric(x * scale)
    assert not math.isnan(got)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("scale", SCALES)
def test_mad_over_edges_and_singular_values_hold_over_the_float64_range(scale) -> None:
    x = _rows()
    assert mad(x * scale, _edges()) == pytest.approx(mad(x, _edges()), rel=1e-9)
    for normalize in ("max", "sum"):
        torch.testing.assert_close(
            singular_values(x * scale, normalize=normalize), singular_values(x, normalize=normalize)
        )


def _assert_invariant_entries_match(got: dict, expected: dict, where: str) -> None:
    for key, value in expected.items():
        if key.startswith("dirichlet_energy") and not key.startswith("dirichlet_energy_normalized"):
            continue  # not scale-invariant
        if math.isnan(value):
            assert math.isnan(got[key]), (key, where)
        else:
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), (key, where)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("batched", [False, True])
def test_collapse_metrics_scale_invariant_entries_hold_over_the_float64_range(scale, batched) -> None:
    """Every collapse metric but the Dirichlet energy is scale-invariant; the energy is exact (0 where its value
    underflows float64) or, where it would overflow, a one-line error, as ``dirichlet_energy`` gives."""
    x = _rows()
    kwargs = {"batch": torch.tensor([0] * 15 + [1] * 15)} if batched else {}
    _assert_invariant_entries_match(collapse_metrics(x * scale, **kwargs), collapse_metrics(x, **kwargs), "no edges")
    expected = collapse_metrics(x, _edges(), **kwargs)
    if scale > 1:
        with pytest.raises(ValueError, match="collapse_metrics: x is too large for its Dirichlet energy"):
            collapse_metrics(x * scale, _edges(), **kwargs)
        return
    got = collapse_metrics(x * scale, _edges(), **kwargs)
    _assert_invariant_entries_match(got, expected, "edges")
    assert got["dirichlet_energy"] == pytest.approx(expected["dirichlet_energy"] * scale**2, rel=1e-6, abs=1e-320)
