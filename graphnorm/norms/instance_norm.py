"""InstanceNorm (Ulyanov et al., 2016) per graph and channel."""

from __future__ import annotations

from torch import Tensor, nn

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import (
    cast,
    check_batch,
    check_features,
    check_graph_ids,
    check_positive,
    graph_center_scale,
    graph_reduce,
    graph_variance,
    register_affine,
    rename_legacy_keys,
    reset_affine,
    upcast,
)


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
    the instance's own statistics (no running statistics), so train and eval mode agree. Same outputs and parameters
    as :class:`torch_geometric.nn.norm.InstanceNorm` with a batch vector (tested against it), in our own
    implementation that allocates one full-size tensor (the output). Without ``batch`` all rows are one graph,
    through the same code: PyG's ``batch=None`` path uses ``F.instance_norm``, which raises on a one-node graph;
    here a one-node graph gives :math:`\boldsymbol\beta`.

    float16 / bfloat16 input is computed in float32 (the parameters too, whatever their dtype) and returned in its
    own dtype.
    """

    def __init__(self, channels: int, eps: float = 1e-5, affine: bool = False) -> None:
        super().__init__()
        self.channels = channels
        self.eps = check_positive(eps, "eps", "instancenorm")
        self.affine = affine
        register_affine(self, channels, affine)

    def reset_parameters(self) -> None:
        reset_affine(self)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        rename_legacy_keys(state_dict, prefix, "module.")  # checkpoints from when this wrapped PyG's InstanceNorm
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

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
        check_graph_ids(batch, batch_size, "instancenorm")
        if x.size(0) == 0:
            return x.clone()
        wide = upcast(x)  # float32 for half precision: half sums of squares overflow past 65504
        mean = graph_reduce(wide, batch, batch_size, "mean")  # [num_graphs, C]
        var = graph_variance(wide, mean, batch, batch_size)  # biased
        scale = (var + self.eps).rsqrt()  # [num_graphs, C]; gamma folded in per graph, not per node
        if self.affine:
            scale = scale * cast(self.weight, wide.dtype)
        return graph_center_scale(wide, mean, scale, batch, cast(self.bias, wide.dtype)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}, affine={self.affine}"
