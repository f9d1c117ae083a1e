"""BatchNorm (Ioffe & Szegedy, 2015) over all nodes of a mini-batch."""

from __future__ import annotations

from torch import Tensor
from torch_geometric.nn.norm import BatchNorm as PyGBatchNorm

from graphnorm.checks import check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.precision import call_in_dtype
from graphnorm.norms.registry import register_norm


@register_norm("batchnorm")
class BatchNorm(NormBase):
    r"""Batch normalization over every node of the mini-batch, from `"Batch Normalization: Accelerating Deep
    Network Training by Reducing Internal Covariate Shift" <https://arxiv.org/abs/1502.03167>`_ (Ioffe & Szegedy, 2015):

    .. math::
        \mathbf{x}'_{i} = \boldsymbol\gamma \odot \frac{\mathbf{x}_i - \boldsymbol\mu_{\mathcal{B}}}
        {\sqrt{\boldsymbol\sigma^2_{\mathcal{B}} + \epsilon}} + \boldsymbol\beta,
        \qquad \boldsymbol\mu_{\mathcal{B}} = \frac{1}{N}\sum_{j=1}^{N} \mathbf{x}_j,\;
        \boldsymbol\sigma^2_{\mathcal{B}} = \frac{1}{N}\sum_{j=1}^{N} (\mathbf{x}_j - \boldsymbol\mu_{\mathcal{B}})^2

    over all :math:`N` rows of the batch (the statistics span graphs). Training mode uses the batch statistics and
    updates running estimates (unbiased variance); eval mode uses the running estimates. Wraps
    :class:`torch_geometric.nn.norm.BatchNorm`. A training batch of one row has no batch variance (e.g. the token rows
    of :class:`SepNorm` when a batch holds one graph): that row is normalized with the running statistics, which stay
    unchanged, as in eval mode (PyG's ``allow_single_element``). An empty input leaves the running statistics alone.
    Updated running statistics are stored back in the module's dtype.

    Args:
        channels: features per node.
        eps: added to the variance (default 1e-5).
        momentum: weight of a new batch in the running estimates, in ``[0, 1]`` (default 0.1).
        affine: learn the gain :math:`\boldsymbol\gamma` (init 1) and bias :math:`\boldsymbol\beta` (init 0)
            (default True).

    Raises:
        ValueError: ``eps`` is not a finite number > 0, or ``momentum`` is outside ``[0, 1]``.
    """

    def __init__(self, channels: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True) -> None:
        super().__init__()
        self.channels = channels
        check_positive(eps, "eps", "batchnorm")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"batchnorm: momentum must be in [0, 1], got {momentum!r}")
        self.module = PyGBatchNorm(
            channels, eps=eps, momentum=momentum, affine=affine, track_running_stats=True, allow_single_element=True
        )

    def reset_parameters(self) -> None:
        self.module.reset_parameters()

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        if self.module.module.running_mean.dtype == x.dtype:  # the usual case: no parameter to cast
            return self.module(x)
        return call_in_dtype(self.module, x.dtype, x)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.module.module.eps}, momentum={self.module.module.momentum}"
