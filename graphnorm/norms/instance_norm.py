"""InstanceNorm (Ulyanov et al., 2016) per graph and channel."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn.norm import InstanceNorm as PyGInstanceNorm

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import check_batch, check_features, check_positive, num_graphs


@register_norm("instancenorm")
class InstanceNorm(nn.Module):
    r"""Instance normalization from `"Instance Normalization: The Missing Ingredient for Fast Stylization"
    <https://arxiv.org/abs/1607.08022>`_, with each graph :math:`g` as one instance (statistics per channel):

    .. math::
        \mathbf{x}'_i = \boldsymbol\gamma \odot \frac{\mathbf{x}_i - \boldsymbol\mu_g}
        {\sqrt{\boldsymbol\sigma^2_g + \epsilon}} + \boldsymbol\beta, \qquad
        \boldsymbol\mu_g = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g}\mathbf{x}_j,\;
        \boldsymbol\sigma^2_g = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g}(\mathbf{x}_j - \boldsymbol\mu_g)^2

    :math:`\boldsymbol\gamma, \boldsymbol\beta` only with ``affine=True`` (default False, as PyG and torch). Always
    the instance's own statistics (no running statistics), so train and eval mode agree. Wraps
    :class:`torch_geometric.nn.norm.InstanceNorm`, always with a batch vector: PyG's ``batch=None`` path uses
    ``F.instance_norm``, which raises on a one-node graph; here a one-node graph gives :math:`\boldsymbol\beta`.
    """

    def __init__(self, channels: int, eps: float = 1e-5, affine: bool = False) -> None:
        super().__init__()
        self.channels = channels
        self.module = PyGInstanceNorm(
            channels, eps=check_positive(eps, "eps", "instancenorm"), affine=affine, track_running_stats=False
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
        check_features(x, self.channels, "instancenorm")
        check_batch(x, batch, "instancenorm")
        if x.size(0) == 0:
            return x.clone()
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
            batch_size = 1
        return self.module(x, batch, num_graphs(batch, batch_size))

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.module.eps}, affine={self.module.affine}"
