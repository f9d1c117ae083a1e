"""The identity norm: the "no normalization" baseline."""

from __future__ import annotations

from torch import Tensor

from graphnorm.norms.base import NormBase
from graphnorm.norms.registry import register_norm


@register_norm("none")
class Identity(NormBase):
    r"""No normalization, the baseline: :math:`\mathbf{x}' = \mathbf{x}` (``x`` itself is returned). Its inputs are
    checked like every norm's, and the other norm arguments are ignored.

    Args:
        channels: features per node.
    """

    computes_in_float32 = False  # x itself is the output, in any dtype

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        return x

    def extra_repr(self) -> str:
        return f"{self.channels}"
