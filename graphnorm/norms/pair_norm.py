"""PairNorm (Zhao & Akoglu, 2020), per graph."""

from __future__ import annotations

import torch
from torch import Tensor

from graphnorm.checks import check_choice, check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.graph_stats import (
    broadcast_to_nodes,
    graph_center_scale,
    graph_centered_sq_sum,
    graph_reduce,
    graph_sizes,
)
from graphnorm.norms.registry import register_norm

PAIRNORM_MODES = ("PN", "PN-SI", "PN-SCS")


@register_norm("pairnorm")
class PairNorm(NormBase):
    r"""PairNorm, per graph, from `"PairNorm: Tackling Oversmoothing in GNNs" <https://arxiv.org/abs/1909.12223>`_
    (Zhao & Akoglu, ICLR 2020), with the graph's mean
    :math:`\boldsymbol\mu_g = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g} \mathbf{x}_j` and the scale :math:`s`.

    ``PN`` (the paper's Eq. 6): center, then rescale so that the mean squared row norm is :math:`s^2`,

    .. math::
        \mathbf{x}^c_i = \mathbf{x}_i - \boldsymbol\mu_g, \qquad
        \mathbf{x}'_i = s \, \frac{\mathbf{x}^c_i}{\sqrt{\epsilon + \frac{1}{|\mathcal{V}_g|}
        \sum_{j \in \mathcal{V}_g} \|\mathbf{x}^c_j\|_2^2}}

    ``PN-SI`` (scale individually):
    :math:`\mathbf{x}'_i = s\,\mathbf{x}^c_i / \sqrt{\epsilon + \|\mathbf{x}^c_i\|_2^2}`.
    ``PN-SCS`` (scale and center simultaneously; only in the official code https://github.com/LingxiaoShawn/PairNorm,
    not in the paper or PyG):

    .. math::
        \mathbf{x}'_i = s \, \frac{\mathbf{x}_i}{\sqrt{\epsilon + \|\mathbf{x}_i\|_2^2}} - \boldsymbol\mu_g

    where, as in that code, :math:`\boldsymbol\mu_g` is the mean of the *input* rows, so a ``PN-SCS`` output does not
    in general have zero mean (``PN`` and ``PN-SI`` do). Unlike the official code (one graph), every statistic is per
    graph of the mini-batch.

    Args:
        channels: features per node.
        mode: ``"PN"`` (default), ``"PN-SI"`` or ``"PN-SCS"``.
        scale: :math:`s` (default 1.0).
        eps: inside the root (default 1e-6, as the official code).

    Raises:
        ValueError: an unknown ``mode``, or ``scale`` or ``eps`` not a finite number > 0.
    """

    per_graph = True

    def __init__(self, channels: int, mode: str = "PN", scale: float = 1.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.channels = channels
        self.mode = check_choice(mode, PAIRNORM_MODES, "mode", "pairnorm")
        self.scale = check_positive(scale, "scale", "pairnorm")
        self.eps = check_positive(eps, "eps", "pairnorm")

    @property
    def centers_each_graph(self) -> bool:
        """PN scales the centered rows by one factor per graph; PN-SI scales each row after centering, and PN-SCS
        takes the unscaled rows' mean from the scaled rows (as the paper's code does)."""
        return self.mode == "PN"

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        mean = graph_reduce(x, batch, batch_size, "mean")  # [num_graphs, C]
        if self.mode == "PN-SCS":
            # vector_norm only reads x (x.pow(2) would allocate a full-size square)
            factor = self.scale * (self.eps + torch.linalg.vector_norm(x, dim=1, keepdim=True).square()).rsqrt()
            neg_mean = broadcast_to_nodes(-mean, batch)  # [num_nodes, C] fresh from index_select, or [1, C]
            if batch is None:
                return torch.addcmul(neg_mean, x, factor)
            return neg_mean.addcmul_(x, factor)  # in place into that fresh tensor: addcmul_ saves only x and factor
        if self.mode == "PN":
            # mean over the graph's rows of ||x_i - mu_g||^2, two-pass over row chunks (no [N, C] temporary)
            sq_sum = graph_centered_sq_sum(x, mean, batch, batch_size).sum(dim=1, keepdim=True)  # [num_graphs, 1]
            factor = self.scale * (self.eps + sq_sum / graph_sizes(x, batch, batch_size)).rsqrt()
            return graph_center_scale(x, mean, factor, batch)  # (x - mu_g) * factor_g, one allocation
        # PN-SI: x - mu_g in one allocation (index_select's fresh output, negated and x added in place: neither
        # in-place op needs saved values), row norms by vector_norm (reads only), then one product.
        centered = -mean + x if batch is None else mean.index_select(0, batch).neg_().add_(x)
        squared_norm = torch.linalg.vector_norm(centered, dim=1, keepdim=True).square()  # [num_nodes, 1]
        return centered * (self.scale * (self.eps + squared_norm).rsqrt())

    def extra_repr(self) -> str:
        return f"{self.channels}, mode={self.mode!r}, scale={self.scale}"
