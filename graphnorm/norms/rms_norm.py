"""RMSNorm and partial RMSNorm (Zhang & Sennrich, 2019)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphnorm.checks import check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.parameters import reset_affine
from graphnorm.norms.ops.precision import cast
from graphnorm.norms.registry import register_norm


@register_norm("rmsnorm")
class RMSNorm(NormBase):
    r"""Root-mean-square normalization, per node, from `"Root Mean Square Layer Normalization"
    <https://arxiv.org/abs/1910.07467>`_ (Zhang & Sennrich, NeurIPS 2019):

    .. math::
        \mathbf{x}'_i = \frac{\mathbf{x}_i}{\mathrm{RMS}(\mathbf{x}_i) + \epsilon} \odot \mathbf{g}
        \;(+\, \mathbf{b}), \qquad
        \mathrm{RMS}(\mathbf{x}_i) = \sqrt{\frac{1}{k}\sum_{c=1}^{k} x_{ic}^2}

    with :math:`k = C` (RMSNorm) or :math:`k = \lfloor pC \rfloor` (partial RMSNorm, pRMSNorm): the RMS of the first
    :math:`k` channels divides all of them. As in the authors' code, ``eps`` is added to the RMS, not inside the root.

    Args:
        channels: features per node.
        p: ``-1`` or ``1`` (default ``-1``) for RMSNorm, ``0 < p < 1`` for pRMSNorm.
        eps: added to the RMS (default 1e-8).
        bias: learn the bias :math:`\mathbf{b}` (init 0) besides the gain :math:`\mathbf{g}` (init 1) (default False).

    Raises:
        ValueError: ``eps`` is not a finite number > 0, ``p`` is neither ``-1`` nor in ``(0, 1]``, or ``p`` keeps no
            channel.
    """

    def __init__(self, channels: int, p: float = -1.0, eps: float = 1e-8, bias: bool = False) -> None:
        super().__init__()
        self.channels = channels
        self.eps = check_positive(eps, "eps", "rmsnorm")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (p == -1 or 0 < p <= 1):
            raise ValueError(f"rmsnorm: p must be -1 (full RMSNorm) or in (0, 1] (partial RMSNorm), got {p!r}")
        self.p = float(p)
        self.partial_size = channels if self.p == -1 else int(channels * self.p)
        if self.partial_size < 1:
            raise ValueError(f"rmsnorm: p={p} keeps int(p * channels) = 0 of {channels} channels; use a larger p")
        self.weight = nn.Parameter(torch.ones(channels))
        if bias:
            self.bias = nn.Parameter(torch.zeros(channels))
        else:
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        reset_affine(self)

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        part = x if self.partial_size == self.channels else x[:, : self.partial_size]
        rms = torch.linalg.vector_norm(part, dim=1, keepdim=True) * self.partial_size**-0.5  # [num_nodes, 1]
        out = x / (rms + self.eps) * cast(self.weight, x.dtype)
        if self.bias is not None:
            out = out + cast(self.bias, x.dtype)
        return out

    def extra_repr(self) -> str:
        return f"{self.channels}, p={self.p}, eps={self.eps}, bias={self.bias is not None}"
