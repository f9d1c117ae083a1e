"""Differentiable Group Normalization, DGN (Zhou et al., 2020)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.norm import DiffGroupNorm as PyGDiffGroupNorm

from graphnorm.norms.registry import register_norm
from graphnorm.norms.utils import (
    call_in_dtype,
    cast,
    check_batch,
    check_features,
    check_positive,
    compute_dtype,
    upcast,
)


@register_norm("diffgroupnorm")
class DiffGroupNorm(nn.Module):
    r"""Differentiable group normalization from `"Towards Deeper Graph Neural Networks with Differentiable Group
    Normalization" <https://arxiv.org/abs/2006.06972>`_ (Zhou et al., NeurIPS 2020). Nodes are softly assigned to
    :math:`G` groups and each group is batch-normalized separately:

    .. math::
        \mathbf{S} = \mathrm{softmax}(\mathbf{X}\mathbf{W}) \in \mathbb{R}^{N \times G}, \qquad
        \mathbf{X}' = \mathbf{X} + \lambda \sum_{g=1}^{G} \mathrm{BN}_g\big(\mathbf{S}_{:,g} \odot \mathbf{X}\big)

    where :math:`\mathrm{BN}_g` is a BatchNorm (own :math:`\boldsymbol\gamma_g, \boldsymbol\beta_g`, running
    statistics) over all :math:`N` rows. Wraps :class:`torch_geometric.nn.norm.DiffGroupNorm`, which matches the
    paper; ``groups`` and ``lamda`` keep PyG's names.

    Like :class:`BatchNorm` (and as in the paper, which trains on single graphs), the group statistics span the
    whole mini-batch, not one graph. A single-row training batch is normalized with the running statistics, which
    stay unchanged (as in eval mode), instead of crashing. ``groups`` defaults to 10 (the paper sets it per dataset,
    about the number of classes); ``lamda`` defaults to PyG's 0.01.

    float16 / bfloat16 input is computed in float32 (parameters and running statistics too, whatever their dtype;
    updated running statistics are stored back in the module's dtype) and returned in its own dtype.
    """

    def __init__(
        self, channels: int, groups: int = 10, lamda: float = 0.01, eps: float = 1e-5, momentum: float = 0.1
    ) -> None:
        super().__init__()
        self.channels = channels
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ValueError(f"diffgroupnorm: groups must be a positive integer, got {groups!r}")
        if isinstance(lamda, bool) or not isinstance(lamda, (int, float)) or lamda < 0:
            raise ValueError(f"diffgroupnorm: lamda must be a number >= 0, got {lamda!r}")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"diffgroupnorm: momentum must be in [0, 1], got {momentum!r}")
        self.module = PyGDiffGroupNorm(
            channels, groups, lamda=float(lamda), eps=check_positive(eps, "eps", "diffgroupnorm"), momentum=momentum
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
        check_features(x, self.channels, "diffgroupnorm")
        check_batch(x, batch, "diffgroupnorm")
        if x.size(0) == 0:
            return x.clone()
        wide, dtype = upcast(x), compute_dtype(x)  # float32 for half precision, in every parameter too
        if not (self.training and x.size(0) == 1):
            if self.module.norm.running_mean.dtype == dtype:  # the usual case: no parameter to cast
                return self.module(wide).to(x.dtype)
            return call_in_dtype(self.module, dtype, wide).to(x.dtype)
        # One row in training: no batch variance exists; use the running statistics without updating them.
        groups, channels, bn = self.module.groups, self.channels, self.module.norm
        s = F.linear(wide, cast(self.module.lin.weight, dtype)).softmax(dim=-1)  # [1, G]
        grouped = (s.unsqueeze(-1) * wide.unsqueeze(-2)).view(-1, groups * channels)  # [1, G*C]
        running_mean, running_var, weight, bias = (
            cast(t, dtype) for t in (bn.running_mean, bn.running_var, bn.weight, bn.bias)
        )
        out = F.batch_norm(grouped, running_mean, running_var, weight, bias, False, 0.0, bn.eps)
        return (wide + self.module.lamda * out.view(-1, groups, channels).sum(dim=-2)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, groups={self.module.groups}, lamda={self.module.lamda}"
