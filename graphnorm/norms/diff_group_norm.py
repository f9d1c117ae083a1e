"""Differentiable Group Normalization, DGN (Zhou et al., 2020)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn.norm import DiffGroupNorm as PyGDiffGroupNorm

from graphnorm.checks import check_count, check_positive
from graphnorm.norms.base import NormBase
from graphnorm.norms.ops.precision import call_in_dtype, cast
from graphnorm.norms.registry import register_norm


@register_norm("diffgroupnorm")
class DiffGroupNorm(NormBase):
    r"""Differentiable group normalization, from `"Towards Deeper Graph Neural Networks with Differentiable Group
    Normalization" <https://arxiv.org/abs/2006.06972>`_ (Zhou et al., NeurIPS 2020): nodes are softly assigned to
    :math:`G` groups and each group is batch-normalized separately,

    .. math::
        \mathbf{S} = \mathrm{softmax}(\mathbf{X}\mathbf{W}) \in \mathbb{R}^{N \times G}, \qquad
        \mathbf{X}' = \mathbf{X} + \lambda \sum_{g=1}^{G} \mathrm{BN}_g\big(\mathbf{S}_{:,g} \odot \mathbf{X}\big)

    where :math:`\mathrm{BN}_g` is a BatchNorm (own :math:`\boldsymbol\gamma_g, \boldsymbol\beta_g` and running
    statistics) over all :math:`N` rows: like :class:`BatchNorm`, and as in the paper (which trains on single graphs),
    the statistics span the whole mini-batch. Wraps :class:`torch_geometric.nn.norm.DiffGroupNorm`, which matches the
    paper. A single-row training batch is normalized with the running statistics, which stay unchanged (as in eval
    mode). Updated running statistics are stored back in the module's dtype.

    Args:
        channels: features per node.
        groups: :math:`G` (default 10; the paper sets it per dataset, about the number of classes).
        lamda: :math:`\lambda \ge 0` (default 0.01, PyG's; PyG's spelling).
        eps: added to each group's variance (default 1e-5).
        momentum: weight of a new batch in the running estimates, in ``[0, 1]`` (default 0.1).

    Raises:
        ValueError: ``groups`` is not a positive integer, ``lamda`` is negative, ``eps`` is not a finite number > 0,
            or ``momentum`` is outside ``[0, 1]``.
    """

    # Whether a one-row training batch is decided from this process's rows alone. Data-parallel training turns it
    # off (graphnorm.train.sync_norms): its synced BatchNorm then decides on every process's rows, and no rank skips
    # the all-reduce the others wait in.
    decides_single_row: bool = True

    def __init__(
        self, channels: int, groups: int = 10, lamda: float = 0.01, eps: float = 1e-5, momentum: float = 0.1
    ) -> None:
        super().__init__()
        self.channels = channels
        groups = check_count(groups, "groups", "diffgroupnorm")
        if isinstance(lamda, bool) or not isinstance(lamda, (int, float)) or lamda < 0:
            raise ValueError(f"diffgroupnorm: lamda must be a number >= 0, got {lamda!r}")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"diffgroupnorm: momentum must be in [0, 1], got {momentum!r}")
        self.module = PyGDiffGroupNorm(
            channels, groups, lamda=float(lamda), eps=check_positive(eps, "eps", "diffgroupnorm"), momentum=momentum
        )

    def reset_parameters(self) -> None:
        self.module.reset_parameters()

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        dtype = x.dtype  # float32 for half precision, in every parameter too
        if not (self.training and x.size(0) == 1 and self.decides_single_row):
            if self.module.norm.running_mean.dtype == dtype:  # the usual case: no parameter to cast
                return self.module(x)
            return call_in_dtype(self.module, dtype, x)
        # One row in training: no batch variance exists; use the running statistics without updating them.
        groups, channels, bn = self.module.groups, self.channels, self.module.norm
        s = F.linear(x, cast(self.module.lin.weight, dtype)).softmax(dim=-1)  # [1, G]
        grouped = (s.unsqueeze(-1) * x.unsqueeze(-2)).view(-1, groups * channels)  # [1, G*C]
        running_mean, running_var, weight, bias = (
            cast(t, dtype) for t in (bn.running_mean, bn.running_var, bn.weight, bn.bias)
        )
        out = F.batch_norm(grouped, running_mean, running_var, weight, bias, False, 0.0, bn.eps)
        return x + self.module.lamda * out.view(-1, groups, channels).sum(dim=-2)

    def extra_repr(self) -> str:
        return f"{self.channels}, groups={self.module.groups}, lamda={self.module.lamda}"
