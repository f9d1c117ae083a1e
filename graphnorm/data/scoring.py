"""How a task is scored and trained: every metric a dataset may declare, with its direction, and the loss.

A dataset names its metric (:class:`graphnorm.data.registry.DatasetSpec`); the trainer scores with :func:`score` and
trains with :func:`task_loss` (by the task type) and names neither. Missing graph-level labels are NaN in ``y``: the
losses and metrics leave them out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class Metric:
    """``score(task, outputs, y) -> float``; ``higher_is_better``; ``needs_both_classes``: undefined on a split with
    one class only (checked before training)."""

    name: str
    score: Callable[[Any, Tensor, Tensor], float]
    higher_is_better: bool
    needs_both_classes: bool = False


def accuracy(task: Any, outputs: Tensor, y: Tensor) -> float:
    """Share of rows whose arg-max output is the label (``outputs`` ``[N, classes]``, ``y`` ``[N]``)."""
    return float((outputs.argmax(dim=-1) == y).float().mean())


def mean_absolute_error(task: Any, outputs: Tensor, y: Tensor) -> float:
    """MAE over the labelled entries."""
    y = y.view(outputs.shape)
    labelled = ~torch.isnan(y)
    return float((outputs[labelled] - y[labelled]).abs().mean())


def rocauc(task: Any, outputs: Tensor, y: Tensor) -> float:
    """ROC-AUC: OGB's ``Evaluator`` when the task has one (MolHIV), else :func:`masked_rocauc` (the same rule)."""
    y = y.view(outputs.shape)
    if getattr(task, "evaluator", None) is not None:
        return float(task.evaluator.eval({"y_true": y, "y_pred": outputs})["rocauc"])
    return masked_rocauc(y, outputs)


def masked_rocauc(y: Tensor, scores: Tensor) -> float:
    """ROC-AUC per target over its labelled (non-NaN) rows, averaged over the targets that have both classes there:
    the rule of OGB's ``Evaluator``, for any number of targets."""
    from sklearn.metrics import roc_auc_score

    y, scores = y.double().cpu().numpy(), scores.double().cpu().numpy()
    aucs = []
    for target in range(y.shape[1]):
        labelled = ~np.isnan(y[:, target])
        labels = y[labelled, target]
        if (labels == 1).any() and (labels == 0).any():
            aucs.append(roc_auc_score(labels, scores[labelled, target]))
    if not aucs:
        raise ValueError("ROC-AUC is undefined: no target has both classes among the labelled graphs of this split")
    return float(np.mean(aucs))


# In this order the sweep looks for a default summary metric (test_<name>).
METRICS: dict[str, Metric] = {
    "acc": Metric("acc", accuracy, higher_is_better=True),
    "rocauc": Metric("rocauc", rocauc, higher_is_better=True, needs_both_classes=True),
    "mae": Metric("mae", mean_absolute_error, higher_is_better=False),
}


def metric_names() -> list[str]:
    """The metrics a dataset may declare, in :data:`METRICS`' order."""
    return list(METRICS)


def get_metric(name: str) -> Metric:
    """The metric called ``name``; ``ValueError`` listing the choices if there is none."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; valid choices: {', '.join(METRICS)}")
    return METRICS[name]


def score(task: Any, outputs: Tensor, y: Tensor) -> float:
    """The task's metric of ``outputs`` against ``y``."""
    return get_metric(task.metric).score(task, outputs, y)


def task_loss(task: Any, outputs: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy (multiclass, ``y`` class ids), L1 (regression) or BCE with logits (binary), the last two over the
    labelled entries only; a batch without any label gives a zero loss that still has a gradient."""
    if task.task_type == "multiclass":
        return F.cross_entropy(outputs, y)
    y = y.view(outputs.shape).to(outputs.dtype)  # [B, out]
    labelled = ~torch.isnan(y)
    if not labelled.any():
        return outputs.sum() * 0.0
    if task.task_type == "regression":
        return F.l1_loss(outputs[labelled], y[labelled])
    return F.binary_cross_entropy_with_logits(outputs[labelled], y[labelled])
