"""NodeNorm (Zhou et al., 2021): each node scaled by a root of its own standard deviation."""

from __future__ import annotations

from torch import Tensor, nn

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import check_batch, check_features, check_positive, row_mean_var, upcast


@register_norm("nodenorm")
class NodeNorm(nn.Module):
    r"""NodeNorm from `"Understanding and Resolving Performance Degradation in Deep Graph Convolutional Networks"
    <https://arxiv.org/abs/2006.07107>`_ (Zhou et al., CIKM 2021):

    .. math::
        \mathbf{x}'_i = \frac{\mathbf{x}_i}{\sigma_i^{1/p}}, \qquad
        \sigma_i = \sqrt{\frac{1}{C}\sum_c (x_{ic} - \mu_i)^2 + \epsilon}

    No centering, population variance, no learnable parameters; ``eps`` (1e-5) inside the root as in the authors'
    code. ``p`` (default 2, the ``power_root`` default of the authors' code, its ``"pr"`` variant) tempers the
    rescaling: ``p=1`` divides by the full std (their ``"v"`` variant); larger ``p`` normalizes less.

    float16 / bfloat16 input is computed in float32 and returned in its own dtype.
    """

    def __init__(self, channels: int, p: float = 2.0, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.p = check_positive(p, "p", "nodenorm")
        self.eps = check_positive(eps, "eps", "nodenorm")

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_features(x, self.channels, "nodenorm")
        check_batch(x, batch, "nodenorm")
        if x.size(0) == 0:
            return x.clone()
        wide = upcast(x)  # float32 for half precision: a half sum of squares overflows past 65504
        _, var = row_mean_var(wide)  # [num_nodes, 1]
        # sigma^(1/p) = (var + eps)^(1/(2p))
        return (wide * (var + self.eps).pow(-0.5 / self.p)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, p={self.p}, eps={self.eps}"
