"""Norms under data-parallel training: statistics across graphs summed over the processes, or the norm refused.

BatchNorm's training statistics span every node of the batch, so W processes of B graphs would each normalize with
their own B graphs' mean and variance, not with the W*B graphs' that one process of batch W*B uses.
:func:`synchronize_norms` turns every ``BatchNorm1d`` of a model (graphnorm's BatchNorm, DiffGroupNorm's, the
BatchNorms in GIN's MLPs) into a :class:`SyncedBatchNorm`, whose statistics are sums over all processes,
differentiable as in torch's ``SyncBatchNorm`` (which runs on GPUs only). Norms whose statistics stay within a
node or a graph run unchanged; any other norm, and any module with running statistics that are not BatchNorm's, is
refused with a one-line :class:`~graphnorm.train.distributed.DataParallelError`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.norm import BatchNorm as PyGBatchNorm

from graphnorm import norms
from graphnorm.norms.base import NormBase
from graphnorm.train.ranks import DataParallelError

# Norms whose statistics are each node's own (over its channels), or none: nothing to share between processes.
WITHIN_NODE = (
    norms.Identity,
    norms.LayerNorm,  # mode "graph" is per graph (per_graph), mode "node" per node
    norms.LayerNormSimple,
    norms.RMSNorm,
    norms.NodeNorm,
    norms.AdaNorm,
    norms.DetachNorm,
    norms.LearnableScaler,
)
# Norms whose only statistics across graphs are those of BatchNorm1d modules inside them, which are synchronized.
THROUGH_BATCHNORM = (norms.BatchNorm, norms.DiffGroupNorm)
OPT_IN = "statistics_within_graph"  # a class attribute by which a user's norm declares per-node/per-graph statistics


class _SumOverProcesses(torch.autograd.Function):
    """All-reduce (sum) with its gradient: the backward sums every process's gradient of the sums, so each rank's
    rows receive the gradient that the statistics pass on to them from the whole batch."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor) -> Tensor:
        total = tensor.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        total = grad.clone()
        dist.all_reduce(total)
        return total


class SyncedBatchNorm(nn.BatchNorm1d):
    """``BatchNorm1d`` whose training statistics are the mean and variance over the rows of every process (float64
    sums, all-reduced with gradients); running statistics updated from them, so every rank holds the same. Outside
    a process group, or in eval mode, it is the ``BatchNorm1d`` it was. ``single_row_running``: a training batch of
    at most one row in all processes is normalized with the running statistics, unchanged (PyG's
    ``allow_single_element``), rather than refused."""

    single_row_running: bool = False

    def forward(self, x: Tensor) -> Tensor:
        synced = self.training and dist.is_available() and dist.is_initialized()
        if not synced:
            if self.training and self.single_row_running and x.size(0) <= 1:
                return self._with_running_stats(x)
            return super().forward(x)
        if x.dim() != 2:
            raise ValueError(f"SyncedBatchNorm takes [rows, channels] inputs, got shape {tuple(x.shape)}")
        wide = x.double()
        local = torch.cat([wide.sum(dim=0), (wide * wide).sum(dim=0), wide.new_tensor([x.size(0)])])
        total = _SumOverProcesses.apply(local)
        channels, rows = x.size(1), int(total[-1].item())
        if rows <= 1:
            if self.single_row_running:
                return self._with_running_stats(x)
            raise ValueError(f"Expected more than 1 value per channel when training, got {rows} rows in all processes")
        mean = total[:channels] / rows
        var = (total[channels : 2 * channels] / rows - mean * mean).clamp_min(0.0)  # float64: no cancellation
        self._update_running_stats(mean.detach(), var.detach(), rows)
        out = ((wide - mean) * torch.rsqrt(var + self.eps)).to(x.dtype)
        if self.affine:
            out = out * self.weight.to(x.dtype) + self.bias.to(x.dtype)
        return out

    def _with_running_stats(self, x: Tensor) -> Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, var: Tensor, rows: int) -> None:
        if not self.track_running_stats or self.running_mean is None:
            return
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = var * (rows / (rows - 1))
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), factor)
        self.running_var.lerp_(unbiased.to(self.running_var.dtype), factor)


def refusal(name: str, module: nn.Module) -> str | None:
    """Why ``module`` (at ``name`` in the model) cannot train data-parallel, or None when it can."""
    where = f"{type(module).__name__} at {name or 'the model'}"
    if isinstance(module, NormBase):
        if module.per_graph or isinstance(module, WITHIN_NODE + THROUGH_BATCHNORM) or getattr(module, OPT_IN, False):
            return None
        registered = getattr(type(module), "registry_name", None)
        label = f"norm {registered!r} ({where})" if registered else f"norm {where}"
        return (
            f"{label} may take statistics across the graphs of a batch (per_graph is False), which graphnorm cannot "
            f"synchronize across processes: train it in one process, or declare {OPT_IN} = True on its class if its "
            "statistics are per node or per graph"
        )
    batch_norm = isinstance(module, nn.modules.batchnorm._BatchNorm)
    if isinstance(module, nn.modules.batchnorm._NormBase) and not batch_norm and module.track_running_stats:
        # e.g. InstanceNorm1d(track_running_stats=True): running statistics averaged over the batch's graphs
        return (
            f"{where} keeps running statistics averaged over the batch's graphs, which graphnorm cannot "
            "synchronize across processes: train it in one process, or without track_running_stats"
        )
    if batch_norm and not isinstance(module, nn.BatchNorm1d):
        return f"{where} is a BatchNorm over more than rows and channels, which graphnorm does not synchronize"
    return None


def synchronize_norms(model: nn.Module) -> nn.Module:
    """Make ``model`` (in place) train data-parallel like one process: every ``BatchNorm1d`` becomes a
    :class:`SyncedBatchNorm` (same parameters, buffers and state-dict keys); :class:`DataParallelError` naming the
    first module that cannot (:func:`refusal`), before anything changes."""
    for name, module in model.named_modules():
        reason = refusal(name, module)
        if reason is not None:
            raise DataParallelError(reason)
    for module in model.modules():
        if type(module) is nn.BatchNorm1d:
            module.__class__ = SyncedBatchNorm  # in place: the optimizer and any copy keep the same tensors
    for module in model.modules():
        if isinstance(module, PyGBatchNorm) and isinstance(module.module, SyncedBatchNorm):
            # The single-row decision moves into the synced module, where it counts every process's rows: a rank
            # deciding on its own rows alone would skip the others' all-reduce.
            module.module.single_row_running = module.allow_single_element
            module.allow_single_element = False
        if isinstance(module, norms.DiffGroupNorm) and isinstance(module.module.norm, SyncedBatchNorm):
            module.module.norm.single_row_running = True  # the same decision, for DiffGroupNorm's one-row branch
            module.decides_single_row = False
    return model
