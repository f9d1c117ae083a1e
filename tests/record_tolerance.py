"""How far two routes to the same collapse record may differ: round-off, never a changed formula.

Two routes (a stacked chunk and one layer alone, a background thread and inline, one BLAS thread and two, a kernel
compiled for another CPU) sum the same float64 terms in other orders. Every field but ``value`` must match exactly; a
value within :func:`value_tolerance` of the other, and NaN (or None) only where the other is NaN (or None).
"""

from __future__ import annotations

import math

EPS = 2.220446049250313e-16  # float64 machine epsilon


def value_tolerance(metric: str, expected: float) -> float:
    """Allowed |got - expected| for ``metric``.

    Singular value ratios come from the eigenvalues of X^T X, which another summation order moves by ~eps * s_1^2:
    a ratio near zero by ~sqrt(eps) = 1.5e-8 (1e-7 allows a condition factor of ~40). The effective rank reads those
    tiny ratios through an entropy (1e-6 relative). A cone angle near 0 is an arccos near 1, which turns eps into
    sqrt(2 eps) rad ~ 1.2e-6 degrees (1e-5 allowed). Every other value is a float64 sum of at most ~1e6 terms:
    n * eps ~ 2e-10 relative (1e-9 allowed), plus 1e-12 absolute for values that cancel to about zero.
    """
    if metric.startswith("sv_"):
        return 1e-7
    if metric.startswith("cone_angle"):
        return 1e-5
    if metric == "effective_rank":
        return 1e-6 * abs(expected)
    return 1e-9 * abs(expected) + 1e-12


def assert_close_records(got: list[dict], expected: list[dict], context: object = None) -> None:
    """``got`` and ``expected`` are the same records: fields equal, values within :func:`value_tolerance`."""
    assert len(got) == len(expected), (context, len(got), len(expected))
    for record, reference in zip(got, expected):
        assert {k: v for k, v in record.items() if k != "value"} == {
            k: v for k, v in reference.items() if k != "value"
        }, (context, record, reference)
        value, wanted = record["value"], reference["value"]
        if wanted is None or math.isnan(wanted):
            assert value is None or math.isnan(value), (context, record, reference)
            continue
        assert value is not None and not math.isnan(value), (context, record, reference)
        assert abs(value - wanted) <= value_tolerance(record["metric"], wanted), (context, record, wanted)
