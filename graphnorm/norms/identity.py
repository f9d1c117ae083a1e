"""The identity norm: the "no normalization" baseline."""

from __future__ import annotations

from torch import Tensor, nn

from graphnorm.norms.ops.input_checks import check_norm_inputs
from graphnorm.norms.registry import register_norm


@register_norm("none")
class Identity(nn.Module):
    r"""No normalization, the baseline: :math:`\mathbf{x}' = \mathbf{x}` (``x`` itself is returned). Its inputs are
    checked like every norm's, and the other norm arguments are ignored.

    Args:
        channels: features per node.
    """

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
        check_norm_inputs(x, batch, batch_size, self.channels, "none")
        return x

    def extra_repr(self) -> str:
        return f"{self.channels}"
