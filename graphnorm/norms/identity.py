"""The identity norm: the "no normalization" baseline."""

from __future__ import annotations

from torch import Tensor, nn

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import check_batch, check_features


@register_norm("none")
class Identity(nn.Module):
    r"""No normalization: :math:`\mathbf{x}' = \mathbf{x}`. Accepts (and ignores) every norm argument."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        check_features(x, self.channels, "none")
        check_batch(x, batch, "none")
        return x

    def extra_repr(self) -> str:
        return f"{self.channels}"
