r"""What k steps of mean aggregation do to a CSBM graph's classes: the class-mean separation, the within-class
spread, the accuracy of the best linear classifier after k steps, and the depth at which smoothing turns from help
(denoising) to harm (mixing).

The smoothing is :math:`X^{(k)} = P^k X` with :math:`P = (D + I)^{-1}(A + I)` (``adjacency: row`` of the GCN, no
weights or nonlinearity) on a graph of :mod:`graphnorm.data.csbm`. Beyond the dense limit of Wu et al. (ICLR 2023),
where separation decays as :math:`\lambda^k`, this computes the finite-degree moments from lazy random walks on a
locally tree-like graph with annealed Poisson degrees, and the accuracy from them in a Gaussian approximation.

The model, the derivation and where it holds: docs/concepts/smoothing-theory.md.
"""

from __future__ import annotations

import math

import numpy as np

from graphnorm.data.csbm import reference_accuracy


def class_transition_eigenvalue(homophily: float, num_classes: int = 2) -> float:
    """:math:`\\lambda = (Ch - 1)/(C - 1)`: how much of a class-mean difference survives one step to a neighbour
    (:math:`(p - q)/(p + q)` of Wu et al. for two classes)."""
    return (num_classes * homophily - 1.0) / (num_classes - 1.0)


def self_weights(average_degree: float) -> tuple[float, float]:
    """(E[1/(D0 + 1)] for the start node, E[1/(D + 1)] for a node reached along an edge), Poisson degrees."""
    d = float(average_degree)
    return -math.expm1(-d) / d, (d - 1.0 + math.exp(-d)) / d**2


def _step(distribution: np.ndarray, stay: float, toward: float) -> np.ndarray:
    """One move of one walker: ``distribution[r]`` over the distance r to a fixed point, moved with probability
    ``stay`` of staying and ``toward`` of stepping toward it (at r = 0: ``stay``, else one step away)."""
    moved = np.zeros(distribution.size + 1)
    moved[:-1] += stay * distribution
    moved[1:] += (1.0 - stay - toward) * distribution  # away; at r = 0 the rest is away too
    moved[1] += toward * distribution[0]
    moved[:-2] += toward * distribution[1:]
    return moved


def walk_distances(steps: int, average_degree: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The distributions, for k = 0..steps, of R_k (one walk's distance from its start) and D_k (the distance between
    two independent walks from one node), on the tree with annealed Poisson degrees
    (docs/concepts/smoothing-theory.md)."""
    root, other = self_weights(average_degree)
    single, pair = [np.ones(1)], [np.ones(1)]
    for k in range(steps):
        # R_k: at distance 0 the walker is on its start node (root degrees), elsewhere on a reached node.
        r = single[-1]
        moved = _step(r, other, other)
        moved[:2] += np.array([root - other, other - root]) * r[0]  # distance 0: stay with the root's weight
        single.append(moved)
        # D_k: both walks start on the same node, so the first step moves both with the root's degree.
        weight = root if k == 0 else other
        pair.append(_step(_step(pair[-1], weight, weight), weight, weight))
    return single, pair


def smoothing_moments(steps: int, homophily: float, average_degree: float, num_classes: int = 2) -> dict:
    """``a``, ``b``, ``c``: arrays ``[steps + 1]`` of :math:`E[\\lambda^{R_k}]`, :math:`E[\\lambda^{D_k}]`,
    :math:`P(D_k = 0)` for k = 0..steps (docs/concepts/smoothing-theory.md), and ``lambda``."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must be in [0, 1], got {homophily!r}")
    if not average_degree > 0:
        raise ValueError(f"average_degree must be > 0, got {average_degree!r}")
    lam = class_transition_eigenvalue(homophily, num_classes)
    single, pair = walk_distances(steps, average_degree)
    powers = [lam ** np.arange(len(p)) for p in pair]
    return {
        "lambda": lam,
        "a": np.array([float(r @ lam ** np.arange(r.size)) for r in single]),
        "b": np.array([float(p @ w) for p, w in zip(pair, powers)]),
        "c": np.array([float(p[0]) for p in pair]),
    }


def class_mean_separation(
    steps: int, feature_snr: float, homophily: float, average_degree: float, num_classes: int = 2
) -> np.ndarray:
    """:math:`\\Delta_k = \\Delta a_k` for k = 0..steps ``[steps + 1]``: the distance between two classes' mean
    smoothed features, in units of the input noise's standard deviation (:math:`\\sigma = 1`)."""
    return feature_snr * smoothing_moments(steps, homophily, average_degree, num_classes)["a"]


def within_class_variance(
    steps: int, feature_snr: float, homophily: float, average_degree: float, num_classes: int = 2
) -> dict[str, np.ndarray]:
    """Per direction of the class-mean subspace, for k = 0..steps: ``noise`` :math:`\\sigma^2 c_k` (every other
    direction has only this), ``signal_spread`` :math:`\\Delta^2 (b_k - a_k^2)/(2C)`, and their sum ``total``."""
    moments = smoothing_moments(steps, homophily, average_degree, num_classes)
    spread = feature_snr**2 * (moments["b"] - moments["a"] ** 2) / (2 * num_classes)
    spread = np.maximum(spread, 0.0)  # b_k >= a_k^2 holds exactly; rounding can leave -1e-17
    return {"noise": moments["c"], "signal_spread": spread, "total": moments["c"] + spread}


def linear_accuracy(
    steps: int, feature_snr: float, homophily: float, average_degree: float, num_classes: int = 2
) -> np.ndarray:
    """Accuracy of the best linear classifier on :math:`P^k X`, k = 0..steps (Gaussian approximation, module
    docstring); entry 0 is :func:`graphnorm.data.csbm.reference_accuracy`."""
    separation = class_mean_separation(steps, feature_snr, homophily, average_degree, num_classes)
    spread = within_class_variance(steps, feature_snr, homophily, average_degree, num_classes)["total"]
    return np.array([reference_accuracy(float(s), num_classes) for s in separation / np.sqrt(spread)])


def predicted_best_depth(
    feature_snr: float,
    homophily: float,
    average_degree: float,
    num_classes: int = 2,
    depths: list[int] | tuple[int, ...] | None = None,
    tolerance: float = 0.0,
) -> int:
    """The smallest number of smoothing steps among ``depths`` (default 0..64) whose :func:`linear_accuracy` is
    within ``tolerance`` of the highest (``tolerance`` 0: the best, ties within 1e-12 to the smallest). A tolerance
    of half a point (0.005) makes the prediction comparable with a measured curve whose plateau is flat within its
    noise."""
    depths = list(range(65)) if depths is None else sorted(depths)
    if not depths or min(depths) < 0:
        raise ValueError(f"depths must be non-negative step counts, got {depths!r}")
    accuracy = linear_accuracy(max(depths), feature_snr, homophily, average_degree, num_classes)
    best = max(accuracy[k] for k in depths)
    return next(k for k in depths if accuracy[k] >= best - max(tolerance, 1e-12))


def mean_aggregate(x, edge_index, steps: int) -> list:
    """``[x, P x, ..., P^steps x]`` with :math:`P = (D + I)^{-1}(A + I)` for ``edge_index`` [2, E] holding both
    directions of every edge: the smoothing this module's formulas describe, for simulating them."""
    import torch

    source, target = edge_index
    degree = torch.bincount(target, minlength=x.size(0)).to(x.dtype) + 1.0  # [N], self loop included
    out = [x]
    for _ in range(steps):
        h = out[-1].clone().index_add_(0, target, out[-1][source])  # own row + sum of the neighbours' rows
        out.append(h / degree[:, None])
    return out
