"""LearnableScaler: a per-channel affine map proposed as a normalization-free replacement for LayerNorm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphnorm.checks import check_choice
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.precision import cast
from graphnorm.norms.registry import register_norm

LEARNABLE_SCALER_INITS = ("ones", "normal")


@register_norm("learnable_scaler")
class LearnableScaler(NormBase):
    r"""LearnableScaler (https://github.com/nghiemtuan/LearnableScaler), proposed as a normalization-free replacement
    for LayerNorm: a per-channel affine map with no statistics,

    .. math::
        \mathbf{x}'_i = \mathbf{a} \odot \mathbf{x}_i + \mathbf{b}

    with :math:`\mathbf{b}` starting at 0.

    Args:
        channels: features per node.
        init: :math:`\mathbf{a}`'s start. ``"ones"`` (default): :math:`\mathbf{a} = \mathbf{1}`, so the layer starts
            as the identity (a fair baseline: no random sign flips or near-zero channels at initialization).
            ``"normal"``: :math:`a_c \sim \mathcal{N}(0, 1)`, what the reference code does
            (``nn.init.normal_(torch.ones(C))`` overwrites the ones with standard-normal draws).

    Raises:
        ValueError: an unknown ``init``.
    """

    def __init__(self, channels: int, init: str = "ones") -> None:
        super().__init__()
        self.channels = channels
        self.init = check_choice(init, LEARNABLE_SCALER_INITS, "init", "learnable_scaler")
        self.weight = nn.Parameter(torch.empty(channels))
        self.bias = nn.Parameter(torch.empty(channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.init == "ones":
            nn.init.ones_(self.weight)
        else:
            nn.init.normal_(self.weight)
        nn.init.zeros_(self.bias)

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        # one fused kernel: b + x * a (float32 for half input, so only the result is rounded)
        return torch.addcmul(cast(self.bias, x.dtype), x, cast(self.weight, x.dtype))

    def extra_repr(self) -> str:
        return f"{self.channels}, init={self.init!r}"
