"""One layer's rows loaded into a stack's buffers: widened to float64 (or kept float32) with their float64 norms and
unit rows in one compiled pass, checked (NaN, Inf, too large), and scaled by a power of two when their entries are
extreme, the Dirichlet energy scaled back after (every other metric is scale-invariant)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from graphnorm.analysis.collapse.kernels import _ordinary_largest, _widen_rows
from graphnorm.analysis.magnitude import check_not_too_large, invariant_shift, scale_by_power_of_two


def _load_rows(x: Tensor, rows: Tensor | None, out_x: Tensor, out_norms: Tensor, out_units: Tensor) -> int:
    """Copy the given rows of ``x`` into ``out_x`` [m, d] (float64, or float32 for ``precision="float32"``), their
    float64 norms into ``out_norms`` [m] and their unit rows into ``out_units`` [m, d] (one compiled pass,
    :func:`_widen_rows`); rejects NaN / Inf. Returns ``k`` where the rows were scaled by ``2**k`` (0 unless their
    entries are extreme: every metric but the Dirichlet energy is scale-invariant, and the energy is scaled back, see
    :func:`graphnorm.analysis.magnitude.rescale_for_invariant`).

    Validation costs little: the compiled pass also returns the largest norm, whether every norm is finite and the
    sum of squared norms; only a non-finite norm (a NaN or Inf entry: then the element-wise check names the count) or
    an extreme largest norm takes the slower path."""
    if x.device.type == "meta":
        raise ValueError("collapse_metrics: x is on the meta device (it has no values); pass a CPU or GPU tensor")
    x = x.detach().to("cpu")
    if rows is not None:
        x = x.index_select(0, rows)
    if x.dtype not in (torch.float32, torch.float64):  # halves and integers: widened exactly (NumPy has no bfloat16)
        x = x.to(out_x.dtype)
    largest, squared_sum, finite = _widen_rows(
        x.contiguous().numpy(), out_x.numpy(), out_norms.numpy(), out_units.numpy()
    )
    if finite and (out_norms.numel() == 0 or _ordinary_largest(largest)):
        check_not_too_large(squared_sum, out_x.size(0), "collapse_metrics")
        return 0
    return _rescale_or_reject(x, out_x, out_norms, out_units)


def _rescale_or_reject(x: Tensor, out_x: Tensor, out_norms: Tensor, out_units: Tensor) -> int:
    """The slower path of :func:`_load_rows` for rows ``x`` loaded into ``out_x``, ``out_norms``, ``out_units``:
    rows of extreme scale rescaled in place (returns ``k`` as :func:`_load_rows`), a NaN or Inf rejected."""
    norms = out_norms
    shift = 0
    if not _ordinary_scale(norms):  # only then look at every entry: the common case costs one pass over the norms
        shift = _rescale_in_place(out_x)
        if shift:
            _row_norms(out_x, out_norms)
            _unit_rows(out_x, out_norms, out=out_units)
    if not bool(torch.isfinite(norms).all()):
        finite = torch.isfinite(out_x)
        if out_x.dtype != x.dtype and bool(torch.isfinite(x).all()):
            raise ValueError(
                "collapse_metrics: x has entries beyond float32's range (about 3.4e38), which precision='float32' "
                "cannot hold; use precision='float64'"
            )
        if not bool(finite.all()):
            raise ValueError(
                f"collapse_metrics: x contains NaN or Inf ({int((~finite).sum())} of {out_x.numel()} entries)"
            )
    check_not_too_large(float(norms.square().sum()), out_x.size(0), "collapse_metrics")
    return shift


def _row_norms(x: Tensor, out: Tensor) -> Tensor:
    """Float64 row norms of ``x`` [m, d] (float64 or float32 rows) into ``out`` [m]: float32 rows are widened
    before their squares are summed, so their norms are those of the same values in float64."""
    if x.dtype == torch.float64:
        return torch.linalg.vector_norm(x, dim=-1, out=out)
    return torch.linalg.vector_norm(x, dim=-1, dtype=torch.float64, out=out)


def _ordinary_scale(norms: Tensor) -> bool:
    """:func:`_ordinary_largest` of the largest of ``norms`` (True for none)."""
    return norms.numel() == 0 or _ordinary_largest(float(norms.max()))


def _rescale_in_place(out_x: Tensor) -> int:
    """Scale ``out_x`` by ``2**k`` in place as :func:`~graphnorm.analysis.magnitude.rescale_for_invariant` does
    (``k = 0`` for ordinary input, and when a NaN or Inf is there for the caller's check) and return ``k``."""
    if out_x.numel() == 0:
        return 0
    low, high = torch.aminmax(out_x)
    largest = max(-float(low), float(high))
    shift = invariant_shift(largest) if math.isfinite(largest) else 0
    if shift != 0:
        out_x.copy_(scale_by_power_of_two(out_x, shift))
    return shift


def _unit_rows(x: Tensor, norms: Tensor, out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Non-zero mask and unit rows of ``x`` [..., m, d] with row norms ``norms`` [..., m] (zero rows stay zero).
    Its test oracle is the one-matrix ``graphnorm.analysis.metrics._unit_rows`` (kept separate on purpose)."""
    nonzero = norms > 0
    return nonzero, torch.div(x, torch.where(nonzero, norms, 1.0).unsqueeze(-1), out=out)


def _unscaled_energy(energy: np.ndarray, shifts: list[int]) -> np.ndarray:
    """The Dirichlet energies [L, G] of layers scaled by ``2**shifts`` [L] scaled back by ``4**-shift`` (the energy
    is not scale-invariant: E(cX) = c^2 E(X)); ``ValueError`` when one overflows float64 (entries ~1e150 and up)."""
    if not any(shifts):
        return energy
    with np.errstate(over="ignore"):
        energy = np.stack([scale_by_power_of_two(torch.from_numpy(e), -2 * k).numpy() for e, k in zip(energy, shifts)])
    if not np.isfinite(energy).all():
        raise ValueError(
            "collapse_metrics: x is too large for its Dirichlet energy in float64 (entries of about 1e150 and up "
            "overflow it); rescale x (e.g. divide by its largest entry)"
        )
    return energy
