"""LearnableScaler: a per-channel affine map proposed as a normalization-free replacement for LayerNorm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphnorm.checks import check_choice
from graphnorm.norms.ops.input_checks import check_norm_inputs
from graphnorm.norms.ops.precision import cast, compute_dtype, upcast
from graphnorm.norms.registry import register_norm

LEARNABLE_SCALER_INITS = ("ones", "normal")


@register_norm("learnable_scaler")
class LearnableScaler(nn.Module):
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

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_norm_inputs(x, batch, batch_size, self.channels, "learnable_scaler")
        dtype = compute_dtype(x)
        # one fused kernel: b + x * a (float32 for half input, so only the result is rounded)
        return torch.addcmul(cast(self.bias, dtype), upcast(x), cast(self.weight, dtype)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, init={self.init!r}"
