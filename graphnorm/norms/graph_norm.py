"""GraphNorm (Cai et al., 2021), per graph."""

from __future__ import annotations

import torch
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
    rename_legacy_keys,
    reset_affine,
    upcast,
)


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

    with learnable mean shift :math:`\boldsymbol\alpha` (``mean_scale``, init 1), gain :math:`\boldsymbol\gamma`
    (``weight``, init 1) and bias :math:`\boldsymbol\beta` (``bias``, init 0). Same statistics in train and eval mode.
    The variance is taken around the shifted mean :math:`\boldsymbol\alpha\odot\boldsymbol\mu_g`, as in the paper's
    Eq. 8 and as :class:`torch_geometric.nn.norm.GraphNorm` (same parameters and outputs; tested against it). Our
    own implementation: the per-graph statistics are accumulated over row chunks, so the forward allocates one
    full-size tensor (the output) instead of PyG's five.

    float16 / bfloat16 input is computed in float32 (the parameters too, whatever their dtype) and returned in its
    own dtype.
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.eps = check_positive(eps, "eps", "graphnorm")
        self.weight = nn.Parameter(torch.empty(channels))
        self.bias = nn.Parameter(torch.empty(channels))
        self.mean_scale = nn.Parameter(torch.empty(channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self)
        nn.init.ones_(self.mean_scale)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        rename_legacy_keys(state_dict, prefix, "module.")  # checkpoints from when this wrapped PyG's GraphNorm
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

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
        check_graph_ids(batch, batch_size, "graphnorm")
        if x.size(0) == 0:
            return x.clone()
        wide = upcast(x)  # float32 for half precision: half sums of squares overflow past 65504
        weight, bias, mean_scale = (cast(p, wide.dtype) for p in (self.weight, self.bias, self.mean_scale))
        center = graph_reduce(wide, batch, batch_size, "mean") * mean_scale  # alpha * mu_g, [num_graphs, C]
        var = graph_variance(wide, center, batch, batch_size)
        # gamma / sqrt(var + eps) folded per graph ([num_graphs, C]) before it meets the [N, C] rows
        return graph_center_scale(wide, center, weight * (var + self.eps).rsqrt(), batch, bias).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps}"
