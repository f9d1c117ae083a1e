"""NodeNorm (Zhou et al., 2021): each node scaled by a root of its own standard deviation."""

from __future__ import annotations

from torch import Tensor

from graphnorm.checks import check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.graph_stats import row_mean_var
from graphnorm.norms.registry import register_norm


@register_norm("nodenorm")
class NodeNorm(NormBase):
    r"""NodeNorm, from `"Understanding and Resolving Performance Degradation in Deep Graph Convolutional Networks"
    <https://arxiv.org/abs/2006.07107>`_ (Zhou et al., CIKM 2021): each node divided by a root of its own standard
    deviation,

    .. math::
        \mathbf{x}'_i = \frac{\mathbf{x}_i}{\sigma_i^{1/p}}, \qquad
        \sigma_i = \sqrt{\frac{1}{C}\sum_c (x_{ic} - \mu_i)^2 + \epsilon}

    with no centering, the population variance and no learnable parameters; ``eps`` inside the root, as in the
    authors' code.

    Args:
        channels: features per node.
        p: the root (default 2, ``power_root``'s default in the authors' code, their ``"pr"`` variant); ``p=1`` divides
            by the full std (their ``"v"`` variant), a larger ``p`` normalizes less.
        eps: added to the variance (default 1e-5).

    Raises:
        ValueError: ``p`` or ``eps`` is not a finite number > 0.
    """

    def __init__(self, channels: int, p: float = 2.0, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.p = check_positive(p, "p", "nodenorm")
        self.eps = check_positive(eps, "eps", "nodenorm")

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        _, var = row_mean_var(x)  # [num_nodes, 1]
        # sigma^(1/p) = (var + eps)^(1/(2p))
        return x * (var + self.eps).pow(-0.5 / self.p)

    def extra_repr(self) -> str:
        return f"{self.channels}, p={self.p}, eps={self.eps}"
