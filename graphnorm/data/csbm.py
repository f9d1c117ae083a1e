r"""Contextual stochastic block model (CSBM) graphs: node classification whose best possible accuracy is known.

The model the theory of oversmoothing is written on (Deshpande et al., NeurIPS 2018). ``load_dataset("csbm", ...)``
draws one graph: ``C`` balanced classes, an undirected block model of expected degree ``average_degree`` and edge
homophily ``homophily``, Gaussian features around centred orthogonal class means ``feature_snr`` apart, a per-class
split; one seeded generator draws everything. The task carries :func:`reference_accuracy`, the Bayes-optimal accuracy
from a node's own features alone, and in ``stats`` the realised homophily and degrees.

The exact model, its parameters and the reference accuracy: docs/concepts/csbm.md.
"""

from __future__ import annotations

import math
import operator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from graphnorm.checks import check_count
from graphnorm.data.registry import DatasetSpec, register_dataset
from graphnorm.data.task import GraphTask
from graphnorm.memory import check_fits

QUADRATURE_POINTS = 8001  # trapezoid nodes on [-QUADRATURE_HALF_WIDTH, +QUADRATURE_HALF_WIDTH]
QUADRATURE_HALF_WIDTH = 12.0  # the standard normal density beyond 12 is below 1e-31


def check_csbm_options(
    num_nodes: int = 2000,
    num_classes: int = 2,
    average_degree: float = 10.0,
    homophily: float = 0.8,
    feature_snr: float = 1.0,
    num_features: int = 16,
    seed: int = 0,
    train_fraction: float = 0.2,
    val_fraction: float = 0.2,
) -> None:
    """``ValueError`` naming the first option out of range: sizes, a homophily outside [0, 1], a degree that no
    block model of this size reaches (an edge probability above 1), a negative SNR, fewer features than classes, or a
    split that leaves a class without a training, validation or test node."""
    num_nodes = check_count(num_nodes, "num_nodes", "csbm", 2)
    num_classes = check_count(num_classes, "num_classes", "csbm", 2)
    needed = f"an integer >= num_classes = {num_classes} (one mean direction per class)"
    check_count(num_features, "num_features", "csbm", num_classes, needed)
    check_count(seed, "seed", "csbm", 0, "a non-negative integer")
    if num_nodes < 3 * num_classes:
        raise ValueError(f"csbm: num_nodes = {num_nodes} is too small for {num_classes} classes of >= 3 nodes")
    _check_number("homophily", homophily, 0.0, 1.0)
    _check_number("feature_snr", feature_snr, 0.0, math.inf)
    _check_number("average_degree", average_degree, 0.0, math.inf, open_low=True)
    if average_degree >= num_nodes - 1:
        raise ValueError(
            f"csbm: average_degree = {average_degree} must be below num_nodes - 1 = {num_nodes - 1} (no self loops)"
        )
    p_in, p_out = edge_probabilities(num_nodes, num_classes, average_degree, homophily)
    for what, probability in (("within", p_in), ("across", p_out)):
        if probability > 1.0:
            raise ValueError(
                f"csbm: average_degree = {average_degree} with homophily = {homophily} needs an edge probability "
                f"{what} classes of {probability:.3g} > 1; lower the degree or move homophily away from "
                f"{'1' if what == 'within' else '0'}"
            )
    _check_number("train_fraction", train_fraction, 0.0, 1.0, open_low=True)
    _check_number("val_fraction", val_fraction, 0.0, 1.0, open_low=True)
    smallest = num_nodes // num_classes
    train, val = round(train_fraction * smallest), round(val_fraction * smallest)
    if train < 1 or val < 1 or smallest - train - val < 1:
        raise ValueError(
            f"csbm: train_fraction = {train_fraction} and val_fraction = {val_fraction} give the smallest class "
            f"({smallest} nodes) {train} training, {val} validation and {smallest - train - val} test nodes; each "
            "split needs at least one node per class"
        )


def _check_number(name: str, value: Any, low: float, high: float, open_low: bool = False) -> None:
    """``value`` is a finite real number in ``[low, high]`` (``(low, high]`` with ``open_low``)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > low if open_low else value >= low) and value <= high
    if not ok:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{']' if math.isfinite(high) else ')'}"
        raise ValueError(f"csbm: {name} must be a finite number in {interval}, got {value!r}")


def graph_bytes(num_nodes: int, num_classes: int, average_degree: float, num_features: int) -> int:
    """About the most memory :func:`csbm_graph` holds at once: the float32 features with the noise and class means
    they are summed from (12 bytes per entry), the float64 means and their float32 copy, the labels and their
    permutation, and 64 bytes per expected undirected edge (the edges while sampled and sorted, and both directions
    of ``edge_index``)."""
    expected_edges = math.ceil(num_nodes * average_degree / 2)
    return 12 * num_nodes * num_features + 12 * num_classes * num_features + 24 * num_nodes + 64 * expected_edges


def class_sizes(num_nodes: int, num_classes: int) -> np.ndarray:
    """Balanced class sizes ``[num_classes]``: ``num_nodes // C`` each, the first ``num_nodes mod C`` one more."""
    sizes = np.full(num_classes, num_nodes // num_classes, dtype=np.int64)
    sizes[: num_nodes % num_classes] += 1
    return sizes


def pair_counts(num_nodes: int, num_classes: int) -> tuple[int, int]:
    """(pairs of distinct nodes inside a class, pairs across classes), for :func:`class_sizes`."""
    sizes = class_sizes(num_nodes, num_classes)
    inside = int((sizes * (sizes - 1) // 2).sum())
    return inside, num_nodes * (num_nodes - 1) // 2 - inside


def edge_probabilities(num_nodes: int, num_classes: int, average_degree: float, homophily: float) -> tuple[float, ...]:
    """(p, q): the edge probability of a pair inside a class and across classes (docs/concepts/csbm.md)."""
    edges = num_nodes * average_degree / 2
    inside, across = pair_counts(num_nodes, num_classes)
    return homophily * edges / inside, (1.0 - homophily) * edges / across


def class_means(num_classes: int, num_features: int, feature_snr: float) -> np.ndarray:
    """The centred orthogonal class means ``[C, num_features]``, every pair ``feature_snr`` apart."""
    means = np.zeros((num_classes, num_features))
    means[:, :num_classes] = np.eye(num_classes) - 1.0 / num_classes
    return means * (feature_snr / math.sqrt(2.0))


def reference_accuracy(feature_snr: float, num_classes: int = 2) -> float:
    r"""The Bayes-optimal accuracy of classifying a node from its own features alone (equal class priors).

    With the means of :func:`class_means` and noise :math:`N(0, I)`, the posterior is largest for the class whose
    axis coordinate is largest, and a node of class 0 is classified correctly when
    :math:`a + z_0 > \max_{j \ge 1} z_j` with :math:`a = s/\sqrt 2` and independent standard normal :math:`z_j`:

    .. math:: \mathrm{acc} = \int \varphi(z)\, \Phi(z + a)^{C - 1}\, dz

    For two classes this is :math:`\Phi(s / 2)` in closed form. For more, the integral is computed by the trapezoid
    rule on 8,001 nodes over :math:`[-12, 12]`: the integrand is smooth and its tails beyond are below
    :math:`10^{-31}`, so the error is below :math:`10^{-12}` (the test compares it with the closed form and with a
    Monte-Carlo estimate).

    Raises:
        ValueError: ``feature_snr`` negative or not finite, ``num_classes`` not an integer >= 2.
    """
    _check_number("feature_snr", feature_snr, 0.0, math.inf)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"csbm: num_classes must be an integer >= 2, got {num_classes!r}")
    if num_classes == 2:
        return 0.5 * (1.0 + math.erf(feature_snr / 2.0 / math.sqrt(2.0)))
    return simplex_accuracy_integral(feature_snr, num_classes)


def simplex_accuracy_integral(feature_snr: float, num_classes: int) -> float:
    r""":math:`\int \varphi(z) \Phi(z + s/\sqrt 2)^{C-1} dz` by the trapezoid rule (:func:`reference_accuracy`)."""
    a = feature_snr / math.sqrt(2.0)
    z = torch.linspace(-QUADRATURE_HALF_WIDTH, QUADRATURE_HALF_WIDTH, QUADRATURE_POINTS, dtype=torch.float64)
    density = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    integrand = density * torch.special.ndtr(z + a) ** (num_classes - 1)
    return float(torch.trapezoid(integrand, z))


def sample_block(rng: np.random.Generator, rows: int, cols: int | None, count: int) -> tuple[np.ndarray, ...]:
    """``count`` distinct pairs, uniformly: of distinct nodes of one class of ``rows`` nodes (``cols`` None,
    unordered pairs ``u < v``), or of a node of a class of ``rows`` and one of a class of ``cols`` nodes. Local ids."""
    width = rows if cols is None else cols
    keys = np.empty(0, dtype=np.int64)
    while keys.size < count:
        missing = count - keys.size
        u = rng.integers(0, rows, missing, dtype=np.int64)
        if cols is None:
            v = rng.integers(0, rows - 1, missing, dtype=np.int64)
            v += v >= u  # uniform over the other rows - 1 nodes of the class
            u, v = np.minimum(u, v), np.maximum(u, v)
        else:
            v = rng.integers(0, cols, missing, dtype=np.int64)
        keys = np.concatenate([keys, u * width + v])
        keys.sort()
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]  # drop repeats (a sort, not a hash table)
    return np.divmod(keys, width)


def sample_csbm_edges(rng: np.random.Generator, labels: np.ndarray, p_in: float, p_out: float) -> np.ndarray:
    """The undirected edges ``[2, E]`` (each once, global ids) of the block model on ``labels``."""
    num_classes = int(labels.max()) + 1
    members = [np.flatnonzero(labels == c) for c in range(num_classes)]
    sources, targets = [], []
    for a in range(num_classes):
        for b in range(a, num_classes):
            rows, cols = members[a].size, members[b].size
            pairs = rows * (rows - 1) // 2 if a == b else rows * cols
            count = int(rng.binomial(pairs, p_in if a == b else p_out))
            u, v = sample_block(rng, rows, None if a == b else cols, count)
            sources.append(members[a][u])
            targets.append(members[b][v])
    return np.stack([np.concatenate(sources), np.concatenate(targets)])


def both_directions(edges: np.ndarray, num_nodes: int) -> torch.Tensor:
    """``edge_index`` int64 ``[2, 2E]``: every undirected edge both ways, sorted by (source, target)."""
    keys = np.concatenate([edges[0] * num_nodes + edges[1], edges[1] * num_nodes + edges[0]])
    keys.sort()
    edge_index = np.empty((2, keys.size), dtype=np.int64)
    np.divmod(keys, num_nodes, out=(edge_index[0], edge_index[1]))
    return torch.from_numpy(edge_index)


def split_masks(rng: np.random.Generator, labels: np.ndarray, train_fraction: float, val_fraction: float):
    """Boolean train / val / test masks ``[N]``: per class a random ``round(fraction * size)`` train and val nodes,
    the rest test."""
    masks = [np.zeros(labels.size, dtype=bool) for _ in range(3)]
    for c in range(int(labels.max()) + 1):
        nodes = rng.permutation(np.flatnonzero(labels == c))
        train, val = round(train_fraction * nodes.size), round(val_fraction * nodes.size)
        masks[0][nodes[:train]] = True
        masks[1][nodes[train : train + val]] = True
        masks[2][nodes[train + val :]] = True
    return [torch.from_numpy(mask) for mask in masks]


def csbm_graph(
    num_nodes: int = 2000,
    num_classes: int = 2,
    average_degree: float = 10.0,
    homophily: float = 0.8,
    feature_snr: float = 1.0,
    num_features: int = 16,
    seed: int = 0,
    train_fraction: float = 0.2,
    val_fraction: float = 0.2,
) -> Data:
    """One CSBM graph (docs/concepts/csbm.md): ``x`` float32 ``[N, num_features]``, ``y`` int64 ``[N]``, ``edge_index``
    int64 ``[2, 2E]``, boolean ``train_mask``/``val_mask``/``test_mask``. ``ValueError`` for options out of range
    (:func:`check_csbm_options`), :class:`graphnorm.memory.InsufficientMemoryError` (a ``ValueError`` too) for a
    graph larger than the memory available, before anything is allocated."""
    options = dict(num_nodes=num_nodes, num_classes=num_classes, average_degree=average_degree, homophily=homophily)
    check_csbm_options(
        **options, feature_snr=feature_snr, num_features=num_features, seed=seed,
        train_fraction=train_fraction, val_fraction=val_fraction,
    )  # fmt: skip
    # NumPy integers passed the checks: Python ints from here on
    num_nodes, num_classes, num_features, seed = (
        operator.index(v) for v in (num_nodes, num_classes, num_features, seed)
    )
    options = dict(num_nodes=num_nodes, num_classes=num_classes, average_degree=average_degree, homophily=homophily)
    check_fits(
        graph_bytes(num_nodes, num_classes, average_degree, num_features),
        f"csbm: a graph of num_nodes={num_nodes} with num_features={num_features}, average_degree={average_degree} "
        f"and num_classes={num_classes}",
        "lower num_nodes, num_features or average_degree",
    )
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(num_nodes, dtype=np.int64) % num_classes)  # balanced, shuffled
    p_in, p_out = edge_probabilities(**options)
    edges = sample_csbm_edges(rng, labels, p_in, p_out)
    noise = rng.standard_normal((num_nodes, num_features), dtype=np.float32)
    x = noise + class_means(num_classes, num_features, feature_snr).astype(np.float32)[labels]
    train_mask, val_mask, test_mask = split_masks(rng, labels, train_fraction, val_fraction)
    return Data(
        x=torch.from_numpy(x),
        y=torch.from_numpy(labels),
        edge_index=both_directions(edges, num_nodes),
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        num_nodes=num_nodes,
    )


def graph_statistics(data: Data) -> dict[str, float]:
    """Realised edge homophily (fraction of edges inside a class), degree mean and standard deviation, and the
    number of undirected edges of a graph whose ``edge_index`` holds both directions."""
    source, target = data.edge_index
    degree = torch.bincount(source, minlength=data.num_nodes).double()
    same = data.y[source] == data.y[target]
    return {
        "realised_homophily": float(same.double().mean()) if same.numel() else math.nan,
        "degree_mean": float(degree.mean()),
        "degree_std": float(degree.std()),
        "num_edges": int(source.numel() // 2),
    }


@register_dataset("csbm", level="node", task_type="multiclass", metric="acc", check_options=check_csbm_options)
def load_csbm(
    spec: DatasetSpec,
    root: Path,
    *,
    num_nodes: int = 2000,
    num_classes: int = 2,
    average_degree: float = 10.0,
    homophily: float = 0.8,
    feature_snr: float = 1.0,
    num_features: int = 16,
    seed: int = 0,
    train_fraction: float = 0.2,
    val_fraction: float = 0.2,
) -> GraphTask:
    """A generated CSBM graph (docs/concepts/csbm.md) as a node-classification task; ``root`` is not used (nothing is
    read or written). The task's ``reference_accuracy`` and ``stats`` hold the ground truth and realised
    statistics."""
    data = csbm_graph(
        num_nodes, num_classes, average_degree, homophily, feature_snr, num_features, seed, train_fraction,
        val_fraction,
    )  # fmt: skip
    reference = reference_accuracy(feature_snr, num_classes)
    stats = {
        "reference_accuracy": reference,
        **graph_statistics(data),
        "homophily": float(homophily),
        "feature_snr": float(feature_snr),
    }
    return spec.task(
        num_features=num_features, num_outputs=num_classes, data=data, reference_accuracy=reference, stats=stats
    )
