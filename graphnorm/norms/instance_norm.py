"""InstanceNorm (Ulyanov et al., 2016) per graph and channel."""

from __future__ import annotations

from torch import Tensor

from graphnorm.checks import check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.graph_stats import graph_center_scale, graph_reduce, graph_variance
from graphnorm.norms.ops.parameters import UnwrappedPyGNorm, register_affine, reset_affine
from graphnorm.norms.ops.precision import cast
from graphnorm.norms.registry import register_norm


@register_norm("instancenorm")
class InstanceNorm(UnwrappedPyGNorm, NormBase):
    r"""Instance normalization, from `"Instance Normalization: The Missing Ingredient for Fast Stylization"
    <https://arxiv.org/abs/1607.08022>`_ (Ulyanov et al., 2016), with each graph :math:`g` as one instance:

    .. math::
        \mathbf{x}'_i = \boldsymbol\gamma \odot \frac{\mathbf{x}_i - \boldsymbol\mu_g}
        {\sqrt{\boldsymbol\sigma^2_g + \epsilon}} + \boldsymbol\beta, \qquad
        \boldsymbol\mu_g = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g}\mathbf{x}_j,\;
        \boldsymbol\sigma^2_g = \frac{1}{|\mathcal{V}_g|}\sum_{j \in \mathcal{V}_g}(\mathbf{x}_j - \boldsymbol\mu_g)^2

    per channel, always with the instance's own statistics (no running statistics), so train and eval mode agree. The
    outputs and parameters of :class:`torch_geometric.nn.norm.InstanceNorm` with a batch vector (tested against it;
    state dicts with the keys of a wrapped PyG module load too), with one full-size allocation, the output. Without
    ``batch`` all rows are one graph, through the same code: a one-node graph gives :math:`\boldsymbol\beta` (PyG's
    ``batch=None`` path, ``F.instance_norm``, raises there).

    Args:
        channels: features per node.
        eps: added to the variance (default 1e-5).
        affine: learn the gain :math:`\boldsymbol\gamma` (init 1) and bias :math:`\boldsymbol\beta` (init 0)
            (default False, as PyG and torch).

    Raises:
        ValueError: ``eps`` is not a finite number > 0.
    """

    per_graph = True
    centers_each_graph = True

    def __init__(self, channels: int, eps: float = 1e-5, affine: bool = False) -> None:
        super().__init__()
        self.channels = channels
        self.eps = check_positive(eps, "eps", "instancenorm")
        self.affine = affine
        register_affine(self, channels, affine)

    def reset_parameters(self) -> None:
        reset_affine(self)

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        mean = graph_reduce(x, batch, batch_size, "mean")  # [num_graphs, C]
        var = graph_variance(x, mean, batch, batch_size)  # biased
        scale = (var + self.eps).rsqrt()  # [num_graphs, C]; gamma folded in per graph, not per node
        if self.affine:
            scale = scale * cast(self.weight, x.dtype)
        return graph_center_scale(x, mean, scale, batch, cast(self.bias, x.dtype))

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}, affine={self.affine}"
