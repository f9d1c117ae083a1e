"""The edge-free metrics of one set of rows, per layer: a small :class:`_SetSummary` of each stacked layer (singular
values, cones, unit rows' sum) kept while the layers stream by, then the metrics of every layer at once
(effective and stable rank, spectrum, mean cosine, MAD, cones, zero rows)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from graphnorm.analysis.collapse.kernels import _stacked_grams, _stacked_spectra
from graphnorm.analysis.collapse.metric_names import spectrum_metric_name
from graphnorm.analysis.collapse.staging import _LayerStack
from graphnorm.analysis.cone import ROBUST_CONE_LEVEL, stacked_cones


def _grams(x: Tensor) -> Tensor:
    """X^T X of every [m, d] matrix of ``x`` [L, m, d] as float64 [L, d, d], each as
    :func:`graphnorm.analysis.metrics.gram_matrix` computes it, in one compiled call (:func:`_stacked_grams`).
    Float32 rows are widened first (exactly): a float32 Gram matrix would carry an error of ~1e-7 * s_1^2 in every
    eigenvalue, which moves the effective rank of a layer with small singular values far beyond 1e-5."""
    return torch.from_numpy(_stacked_grams(x.numpy()))


def _singular_values_from(grams: Tensor | None, xs: Tensor | None) -> Tensor:
    """Descending singular values of every layer [L, min(m, d)] (float64): from the stacked d x d Gram matrices
    ``grams`` [L, d, d] (one compiled call) when the layers are tall (m > 2d), as
    :func:`graphnorm.analysis.metrics._singular_values_f64` does for one matrix; else one batched SVD of the (small)
    layers ``xs`` [L, m, d]."""
    if grams is not None:
        return torch.from_numpy(_stacked_spectra(grams.numpy()))
    return torch.linalg.svdvals(xs)


def _ranks(sigma: Tensor) -> tuple[Tensor, Tensor]:
    """Effective rank exp(H(sigma / sum sigma)) (0 log 0 = 0) and stable rank sum sigma^2 / sigma_1^2 over the
    last dimension; 0 for an all-zero spectrum. Its test oracles are the one-matrix
    ``graphnorm.analysis.metrics.effective_rank`` and ``stable_rank`` (kept separate on purpose)."""
    total = sigma.sum(-1)
    positive = total > 0
    p = sigma / torch.where(positive, total, 1.0).unsqueeze(-1)
    entropy = -torch.where(p > 0, p * torch.where(p > 0, p, 1.0).log(), 0.0).sum(-1)
    effective = torch.where(positive, entropy.exp(), 0.0)
    top = sigma[..., 0] if sigma.size(-1) else torch.zeros(sigma.shape[:-1], dtype=sigma.dtype)
    stable = torch.where(top > 0, sigma.square().sum(-1) / torch.where(top > 0, top, 1.0).square(), 0.0)
    return effective, stable


@dataclass
class _SetSummary:
    """What the edge-free metrics of one row set need from each layer, small enough to keep for every layer."""

    sigma: Tensor  # [min(m, d)] singular values, descending
    units_sum: Tensor  # [d]
    num_nonzero: int
    num_rows: int
    cone: float
    cone_q90: float


def _set_summaries_of_stack(stack: _LayerStack, cone_tol_deg: float) -> list[_SetSummary]:
    """The :class:`_SetSummary` of every stacked layer: singular values from one batched eigvalsh of the Gram
    matrices when tall, else one batched SVD; both cones, the unit rows' sums and the non-zero rows' counts from one
    compiled call (:func:`graphnorm.analysis.cone.stacked_cones`)."""
    num_rows, width = stack.x.shape[1:]
    if num_rows > 2 * width:
        sigma = _singular_values_from(_grams(stack.x), None)
    else:
        sigma = _singular_values_from(None, stack.x.double())
    exact, robust, units_sums, counts = stacked_cones(
        stack.units.numpy(), stack.norms.numpy(), ROBUST_CONE_LEVEL, cone_tol_deg
    )
    return [
        _SetSummary(sigma=s, units_sum=u, num_nonzero=c, num_rows=num_rows, cone=e, cone_q90=r)
        for s, u, c, e, r in zip(
            sigma.unbind(0), torch.from_numpy(units_sums).unbind(0), counts.tolist(), exact.tolist(), robust.tolist()
        )
    ]


def _set_metrics(summaries: list[_SetSummary], num_singular_values: int) -> list[dict[str, float]]:
    """Edge-free metrics of one set of rows for every layer, batched over layers."""
    sigma = torch.stack([s.sigma for s in summaries])
    effective, stable = _ranks(sigma)
    m = torch.tensor([s.num_nonzero for s in summaries], dtype=torch.float64)
    units_sum = torch.stack([s.units_sum for s in summaries])
    mean_cos = torch.where(m >= 2, (units_sum.square().sum(1) - m) / (m * (m - 1)).clamp_min(1.0), torch.nan)
    top = sigma[:, 0] if sigma.size(1) else torch.zeros(len(summaries), dtype=torch.float64)
    count = min(num_singular_values, sigma.size(1)) if num_singular_values > 0 else 0
    spectrum = torch.where((top > 0)[:, None], sigma[:, :count] / torch.where(top > 0, top, 1.0)[:, None], 0.0).tolist()
    result = []
    for layer, (summary, erank, srank, cosine) in enumerate(
        zip(summaries, effective.tolist(), stable.tolist(), mean_cos.tolist())
    ):
        values = {
            "effective_rank": erank,
            "stable_rank": srank,
            "mean_cosine": cosine,
            "cone_angle": summary.cone,
            "cone_angle_q90": summary.cone_q90,
            "mad": 1.0 - cosine,
            "zero_row_fraction": 1.0 - summary.num_nonzero / summary.num_rows,
        }
        values.update({spectrum_metric_name(index): value for index, value in enumerate(spectrum[layer])})
        result.append(values)
    return result
