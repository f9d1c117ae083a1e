"""BatchNorm (Ioffe & Szegedy, 2015) over all nodes of a mini-batch."""

from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn.norm import BatchNorm as PyGBatchNorm

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import call_in_dtype, check_batch, check_features, check_positive, upcast


@register_norm("batchnorm")
class BatchNorm(nn.Module):
    r"""Batch normalization over every node of the mini-batch, from `"Batch Normalization: Accelerating Deep
    Network Training by Reducing Internal Covariate Shift" <https://arxiv.org/abs/1502.03167>`_:

    .. math::
        \mathbf{x}'_{i} = \boldsymbol\gamma \odot \frac{\mathbf{x}_i - \boldsymbol\mu_{\mathcal{B}}}
        {\sqrt{\boldsymbol\sigma^2_{\mathcal{B}} + \epsilon}} + \boldsymbol\beta,
        \qquad \boldsymbol\mu_{\mathcal{B}} = \frac{1}{N}\sum_{j=1}^{N} \mathbf{x}_j,\;
        \boldsymbol\sigma^2_{\mathcal{B}} = \frac{1}{N}\sum_{j=1}^{N} (\mathbf{x}_j - \boldsymbol\mu_{\mathcal{B}})^2

    over all :math:`N` rows of the batch (the one norm here whose statistics span graphs). Training mode uses the
    batch statistics and updates running estimates (unbiased variance, ``momentum``); eval mode uses the running
    estimates. Wraps :class:`torch_geometric.nn.norm.BatchNorm`.

    A training batch with a single row has no batch variance (torch raises "Expected more than 1 value per
    channel"); this layer then normalizes that row with the running statistics and leaves them unchanged, exactly
    as in eval mode (PyG's ``allow_single_element``). This happens e.g. to the graph-token rows of :class:`SepNorm`
    when a batch holds one graph. An empty input returns an empty tensor and does not touch the running statistics.

    float16 / bfloat16 input is normalized in float32 (parameters and running statistics too, whatever their
    dtype; updated running statistics are stored back in the module's dtype) and returned in its own dtype.
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

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_features(x, self.channels, "batchnorm")
        check_batch(x, batch, "batchnorm")
        if x.size(0) == 0:
            return x.clone()
        wide = upcast(x)
        if self.module.module.running_mean.dtype == wide.dtype:  # the usual case: no parameter to cast
            return self.module(wide).to(x.dtype)
        return call_in_dtype(self.module, wide.dtype, wide).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.module.module.eps}, momentum={self.module.module.momentum}"
