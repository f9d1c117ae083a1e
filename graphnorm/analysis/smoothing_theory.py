r"""What k steps of mean aggregation do to a CSBM graph's classes: the class-mean separation, the within-class
spread, the accuracy of the best linear classifier after k steps, and the depth at which smoothing turns from help
(denoising) to harm (mixing).

**The model.** A graph of :mod:`graphnorm.data.csbm`: ``C`` balanced classes, expected degree :math:`d`, homophily
:math:`h`, features :math:`x_i = \mu_{y_i} + \varepsilon_i`, :math:`\varepsilon_i \sim N(0, \sigma^2 I)`, every pair
of class means :math:`\Delta` = ``feature_snr`` :math:`\cdot\,\sigma` apart. The smoothing is the linear SGC-like
model without weights or nonlinearity, **with self loops**: :math:`X^{(k)} = P^k X`, :math:`P = (D + I)^{-1}(A + I)`
(each node averages itself and its neighbours: ``adjacency: row`` of the GCN in :mod:`graphnorm.models`).

**The dense limit** (Wu, Chen, Wang and Jadbabaie, "A Non-Asymptotic Analysis of Oversmoothing in Graph Neural
Networks", ICLR 2023, https://arxiv.org/abs/2212.10701): a step multiplies the class-mean separation by
:math:`\lambda = (p - q)/(p + q)`, here :math:`\lambda = (Ch - 1)/(C - 1)` (the class-transition matrix's second
eigenvalue; :math:`\lambda = h - (1 - h)` for two classes), the *mixing* effect, and shrinks the noise variance by
about the number of nodes averaged, the *denoising* effect; mixing wins after :math:`O(\log N / \log\log N)` steps.
Keriven ("Not too little, not too much: a theoretical analysis of graph (over)smoothing", NeurIPS 2022,
https://arxiv.org/abs/2205.12156) shows the same trade-off for mean aggregation: a few steps help, many hurt.

**At finite degree** (what this module computes) two effects the dense limit drops are large at :math:`d \approx
10`: a walk that returns to where it was (backtracking keeps a node's own class, so separation decays more slowly
than :math:`\lambda^k`), and the node-to-node spread of the neighbourhoods' class mix. Derivation: :math:`(P^k x)_i`
is the expectation of :math:`x_{W_k}` over a lazy random walk :math:`W` from :math:`i` (each step to a uniform one of
the node and its neighbours). On the locally tree-like graph, classes along a tree path form a Markov chain whose
centred part decays by :math:`\lambda` per edge, so for nodes :math:`u, v` at tree distance :math:`r`,
:math:`E[\langle \mu_{y_u}, \mu_{y_v} \rangle] = \|\mu\|^2 \lambda^{r}` with :math:`\|\mu\|^2 = \Delta^2 (C-1) / (2C)`
(centred class means). Hence, with :math:`R_k` the walk's distance from its start and :math:`D_k` the distance
between two independent walks from the same node:

* class-mean separation :math:`\Delta_k = \Delta\, a_k`, :math:`a_k = E[\lambda^{R_k}]`;
* noise variance per coordinate :math:`\sigma^2 c_k`, :math:`c_k = \sum_j (P^k)_{ij}^2 = P(D_k = 0)` (two walks
  meeting);
* spread of the node's own signal around its class mean, per direction of the class-mean subspace:
  :math:`\Delta^2 (b_k - a_k^2) / (2C)`, :math:`b_k = E[\lambda^{D_k}]`;
* within-class variance along the class-mean subspace
  :math:`s_k^2 = \sigma^2 c_k + \Delta^2 (b_k - a_k^2)/(2C)`.

On a tree, the distance between a walker and any other point is a birth-death chain: of the walker's :math:`D + 1`
choices exactly one steps toward the point, one stays (the self loop) and :math:`D - 1` step away (at distance 0: one
stays, :math:`D` step away). Degrees are taken as Poisson (the block model's binomial degrees at large :math:`N`),
drawn afresh at each step ("annealed"): the start node has degree :math:`D_0 \sim \mathrm{Poisson}(d)`, so
:math:`E[1/(D_0 + 1)] = (1 - e^{-d})/d`; a node reached along an edge has the size-biased degree
:math:`1 + \mathrm{Poisson}(d)`, so :math:`E[1/(D+1)] = (d - 1 + e^{-d})/d^2`. The first step is exact; later steps
are exact on a tree with those annealed degrees, which holds while the walks stay in a tree-like ball
(:math:`k \lesssim \log N / \log d`); beyond it, and on any finite graph, every quantity tends to its stationary
limit, which this tree calculation reaches only as :math:`k \to \infty`. For :math:`d \to \infty` the chain moves
away at every step, :math:`a_k = \lambda^k`, :math:`b_k = \lambda^{2k}`, :math:`c_k \to 0`: the dense limit above.

**Accuracy after k steps** (Gaussian approximation: the smoothed feature is treated as Gaussian with the moments
above, isotropic in the class-mean subspace): the best linear classifier's accuracy is the Bayes accuracy of
:func:`graphnorm.data.csbm.reference_accuracy` at the effective SNR :math:`\Delta_k / s_k`; for two classes
:math:`\Phi(\Delta_k / (2 s_k))`. At :math:`k = 0` it is the reference accuracy itself. The predicted best depth is
the :math:`k` that maximises it.
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
    two independent walks from one node), on the tree with annealed Poisson degrees (module docstring)."""
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
    :math:`P(D_k = 0)` for k = 0..steps (module docstring), and ``lambda``."""
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
