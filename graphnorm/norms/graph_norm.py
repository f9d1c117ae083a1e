"""GraphNorm (Cai et al., 2021), per graph."""

from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn.norm import GraphNorm as PyGGraphNorm

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import check_batch, check_features, check_positive, num_graphs


@register_norm("graphnorm")
class GraphNorm(nn.Module):
    r"""GraphNorm from `"GraphNorm: A Principled Approach to Accelerating Graph Neural Network Training"
    <https://arxiv.org/abs/2009.03294>`_ (Cai et al., ICML 2021), per graph :math:`g` and channel :math:`c`:

    .. math::
        \mu_{g} = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g} \mathbf{x}_j, \quad
        \boldsymbol\sigma^2_{g} = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g}
        (\mathbf{x}_j - \boldsymbol\alpha \odot \boldsymbol\mu_g)^2, \quad
        \mathbf{x}'_i = \boldsymbol\gamma \odot \frac{\mathbf{x}_i - \boldsymbol\alpha \odot \boldsymbol\mu_g}
        {\sqrt{\boldsymbol\sigma^2_g + \epsilon}} + \boldsymbol\beta

    with learnable mean shift :math:`\boldsymbol\alpha` (init 1), gain :math:`\boldsymbol\gamma` (init 1) and bias
    :math:`\boldsymbol\beta` (init 0). Same statistics in train and eval mode. Wraps
    :class:`torch_geometric.nn.norm.GraphNorm`, which matches the paper (its variance is taken around the shifted
    mean :math:`\boldsymbol\alpha\odot\boldsymbol\mu_g`, as in the paper's Eq. 8).
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.module = PyGGraphNorm(channels, eps=check_positive(eps, "eps", "graphnorm"))

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
        check_features(x, self.channels, "graphnorm")
        check_batch(x, batch, "graphnorm")
        if x.size(0) == 0:
            return x.clone()
        return self.module(x, batch, num_graphs(batch, batch_size) if batch is not None else None)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.module.eps}"
