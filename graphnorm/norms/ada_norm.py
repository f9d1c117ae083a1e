"""AdaNorm (Xu et al., 2019)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from graphnorm.checks import check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.registry import register_norm


@register_norm("adanorm")
class AdaNorm(NormBase):
    r"""AdaNorm, per node, from `"Understanding and Improving Layer Normalization"
    <https://arxiv.org/abs/1911.07013>`_ (Xu et al., NeurIPS 2019), Eq. (11)-(12):

    .. math::
        \mathbf{y}_i = \frac{\mathbf{x}_i - \mu_i}{\sigma_i}, \qquad
        \mathbf{z}_i = C\, \big[\mathbf{1} - k\,\mathbf{y}_i\big]_{\text{detach}} \odot \mathbf{y}_i

    with :math:`\mu_i, \sigma_i` the mean and standard deviation over the channels of node :math:`i`; the factor
    :math:`(1 - k\mathbf{y})` is a constant in back-propagation (the paper's gradient-stability argument). No gain or
    bias. Unlike the authors' code (https://github.com/lancopku/AdaNorm: unbiased std, ``eps`` added to it),
    :math:`\sigma = \sqrt{\sigma^2_{pop} + \epsilon}` with the population variance, as in the paper and LayerNorm.

    Args:
        channels: features per node.
        C: the scale :math:`C` (default 2.0).
        k: :math:`k \ge 0` (default 0.1, the paper's recommended :math:`1/10`).
        eps: added to the variance (default 1e-5).

    Raises:
        ValueError: ``C`` or ``eps`` is not a finite number > 0, or ``k`` is negative.
    """

    def __init__(self, channels: int, C: float = 2.0, k: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.C = check_positive(C, "C", "adanorm")
        if isinstance(k, bool) or not isinstance(k, (int, float)) or k < 0:
            raise ValueError(f"adanorm: k must be a number >= 0, got {k!r}")
        self.k = float(k)
        self.eps = check_positive(eps, "eps", "adanorm")

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        # w = C * y via the fused layer_norm (its gain is the constant C; gradients through mean and std intact).
        w = F.layer_norm(x, (self.channels,), x.new_full((self.channels,), self.C), None, self.eps)
        # z = C * (1 - k*y) * y = w - (k / C) * w * [w]_detach, one fused pass; d z / d w = 1 - k * [y]_detach.
        return torch.addcmul(w, w, w.detach(), value=-self.k / self.C)

    def extra_repr(self) -> str:
        return f"{self.channels}, C={self.C}, k={self.k}, eps={self.eps}"
