"""PairNorm (Zhao & Akoglu, 2020), per graph."""

from __future__ import annotations

from torch import Tensor, nn

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import (
    broadcast_to_nodes,
    check_batch,
    check_choice,
    check_features,
    check_positive,
    graph_reduce,
)

PAIRNORM_MODES = ("PN", "PN-SI", "PN-SCS")


@register_norm("pairnorm")
class PairNorm(nn.Module):
    r"""PairNorm from `"PairNorm: Tackling Oversmoothing in GNNs" <https://arxiv.org/abs/1909.12223>`_
    (Zhao & Akoglu, 2020), computed per graph :math:`g` with mean
    :math:`\boldsymbol\mu_g = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g} \mathbf{x}_j` and scale :math:`s`.

    ``PN`` (the paper's Eq. 6): center, then rescale so the mean squared row norm is :math:`s^2`:

    .. math::
        \mathbf{x}^c_i = \mathbf{x}_i - \boldsymbol\mu_g, \qquad
        \mathbf{x}'_i = s \, \frac{\mathbf{x}^c_i}{\sqrt{\epsilon + \frac{1}{|\mathcal{V}_g|}
        \sum_{j \in \mathcal{V}_g} \|\mathbf{x}^c_j\|_2^2}}

    ``PN-SI`` (scale individually):
    :math:`\mathbf{x}'_i = s\,\mathbf{x}^c_i / \sqrt{\epsilon + \|\mathbf{x}^c_i\|_2^2}`.

    ``PN-SCS`` (scale and center simultaneously, only in the official code
    https://github.com/LingxiaoShawn/PairNorm, not in the paper; PyG lacks it):

    .. math::
        \mathbf{x}'_i = s \, \frac{\mathbf{x}_i}{\sqrt{\epsilon + \|\mathbf{x}_i\|_2^2}} - \boldsymbol\mu_g

    where, as in that code, :math:`\boldsymbol\mu_g` is the mean of the *input* rows, so ``PN-SCS`` output does not in
    general have zero mean (``PN`` and ``PN-SI`` do). ``eps`` (1e-6, as the official code) sits inside the root.
    Unlike the official code (one graph), all statistics are per graph of the mini-batch.
    """

    def __init__(self, channels: int, mode: str = "PN", scale: float = 1.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.channels = channels
        self.mode = check_choice(mode, PAIRNORM_MODES, "mode", "pairnorm")
        self.scale = check_positive(scale, "scale", "pairnorm")
        self.eps = check_positive(eps, "eps", "pairnorm")

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_features(x, self.channels, "pairnorm")
        check_batch(x, batch, "pairnorm")
        if x.size(0) == 0:
            return x.clone()
        mean = broadcast_to_nodes(graph_reduce(x, batch, batch_size, "mean"), batch)  # [num_nodes or 1, C]
        if self.mode == "PN-SCS":
            row_norm = (self.eps + x.pow(2).sum(dim=1, keepdim=True)).sqrt()  # [num_nodes, 1]
            return self.scale * x / row_norm - mean
        centered = x - mean
        squared_norm = centered.pow(2).sum(dim=1, keepdim=True)  # [num_nodes, 1]
        if self.mode == "PN":
            mean_squared_norm = broadcast_to_nodes(graph_reduce(squared_norm, batch, batch_size, "mean"), batch)
            return self.scale * centered / (self.eps + mean_squared_norm).sqrt()
        return self.scale * centered / (self.eps + squared_norm).sqrt()  # PN-SI

    def extra_repr(self) -> str:
        return f"{self.channels}, mode={self.mode!r}, scale={self.scale}"
