"""The node-level training loop (Cora, CiteSeer, the heterophilic graphs): full batch, cross-entropy on the training
nodes, every epoch evaluated, the best-validation weights kept in memory (:func:`train_node_level`).

``eval_nodes="test"`` scores the public test mask, ``"rest"`` every node outside train+val (the ContraNorm/PairNorm
protocol, which reports the last epoch: ``test_<metric>_last``). The record's keys: :mod:`graphnorm.train.record`.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import Tensor, nn

from graphnorm.config import RunConfig, config_run_id
from graphnorm.data import GraphTask
from graphnorm.data.scoring import score, task_loss
from graphnorm.models import model_outputs
from graphnorm.train.collapse_steps import open_step_probe, step_rows_record
from graphnorm.train.progress import EpochProgress, report_epoch
from graphnorm.train.schedules import TrainingSchedule, clip_gradients, finite_loss, patience_exhausted
from graphnorm.train.tensorboard_log import open_tensorboard


def sparse_features_help(model: nn.Module, x: Tensor) -> bool:
    """Whether ``model`` takes ``x`` as raw features that are sparse enough (<= 10% nonzero) to pass as COO.
    A model says so by an optional ``takes_sparse_features`` attribute (DeepGCN, GCNII)."""
    if not getattr(model, "takes_sparse_features", False):
        return False
    return x.is_floating_point() and x.numel() > 0 and int(torch.count_nonzero(x)) <= 0.1 * x.numel()


def node_eval_mask(task: GraphTask, eval_nodes: str) -> Tensor:
    """The nodes a run scores as its test set: the test mask (``"test"``), or every node outside train+val
    (``"rest"``)."""
    data = task.data
    if eval_nodes == "test":
        return data.test_mask
    return ~(data.train_mask | data.val_mask)  # every node outside train+val (ContraNorm/PairNorm protocol)


@torch.no_grad()
def evaluate_nodes(model: nn.Module, data, task: GraphTask, eval_mask: Tensor) -> tuple[float, float, float]:
    """(validation loss, validation metric, metric on the ``eval_mask`` nodes) of ``model`` in eval mode."""
    model.eval()
    outputs = model_outputs(model, data)
    val_outputs, val_y = outputs[data.val_mask], data.y[data.val_mask]
    val_loss = float(task_loss(task, val_outputs, val_y))
    return val_loss, score(task, val_outputs, val_y), score(task, outputs[eval_mask], data.y[eval_mask])


def train_node_level(
    model: nn.Module, task: GraphTask, config: RunConfig, device: torch.device
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Full-batch training on the train mask, one optimizer step per epoch; returns the record's node-level keys and
    the best-validation weights (highest validation metric, ties: lower validation loss). With ``patience``, training
    ends once the best-validation epoch is ``patience`` epochs old."""
    data = task.data.to(device)
    if sparse_features_help(model, data.x):
        # Bag-of-words features (Cora: 1.3% nonzero) as sparse COO: the first layer's dropout draws only for the
        # stored values and its matmul skips the zeros (same distribution and values as the dense input).
        data = data.clone()
        data.x = data.x.to_sparse()
    eval_mask = node_eval_mask(task, config.eval_nodes).to(device)
    metric, sign = task.metric, 1.0 if task.higher_is_better else -1.0
    schedule = TrainingSchedule(config, model, 1, task.higher_is_better)  # full batch: one step per epoch
    best = {"score": -math.inf, "val_loss": math.inf}
    best_state: dict[str, Tensor] = {}
    history: list[dict[str, Any]] = []
    progress = EpochProgress(config_run_id(config), config.epochs)
    board = open_tensorboard(config)
    step_probe = open_step_probe(config, model, task, device, [])
    step_probe.after_step(0, 0)
    for epoch in range(config.epochs):
        schedule.start_epoch(epoch)
        model.train()
        schedule.optimizer.zero_grad()
        outputs = model_outputs(model, data)  # [N, outputs]
        loss = task_loss(task, outputs[data.train_mask], data.y[data.train_mask])
        loss.backward()
        clip_gradients(model, config)
        schedule.optimizer.step()
        schedule.after_step()
        train_loss = finite_loss(loss.item(), epoch)  # after the step (no wait between passes), before a NaN is probed
        step_probe.after_step(epoch + 1, epoch)  # full batch: one optimizer step per epoch
        if epoch == 0:
            first_loss = train_loss
        val_loss, val, test = evaluate_nodes(model, data, task, eval_mask)
        if sign * val > best["score"] or (sign * val == best["score"] and val_loss < best["val_loss"]):
            best = {"score": sign * val, "val": val, "val_loss": val_loss, "test": test, "best_epoch": epoch}
            best_state = copy.deepcopy(model.state_dict())
        schedule.end_epoch(epoch, val)
        row = {"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss, f"val_{metric}": val}
        history.append({**row, f"test_{metric}": test})
        shown = ("train_loss", f"val_{metric}", f"test_{metric}")
        report_epoch(progress, board, history[-1], schedule.lr, shown)
        if patience_exhausted(config, epoch, best.get("best_epoch")):
            break
    progress.close()
    if board is not None:
        board.close()
    step_probe.close()
    record = {
        f"val_{metric}": best["val"],
        f"test_{metric}": best["test"],
        f"val_{metric}_last": val,
        f"test_{metric}_last": test,
        "best_epoch": best["best_epoch"],
        "train_loss": train_loss,
        "train_loss_first": first_loss,
        "num_eval_nodes": int(eval_mask.sum()),
        # the level a collapsed classifier falls to (classification only)
        **({f"majority_{metric}": majority_accuracy(data, eval_mask)} if task.task_type == "multiclass" else {}),
        "epochs_run": len(history),
        **step_rows_record(config, step_probe.rows, step_probe.seconds),
        "history": history,
    }
    return record, best_state


def majority_accuracy(data, eval_mask: Tensor) -> float:
    """The accuracy on the ``eval_mask`` nodes of always predicting the most frequent class among the training
    nodes: the level a collapsed model falls to. Ties among the training counts (Cora's public split has 20 nodes of
    every class) go to the class most frequent among the validation nodes, then to the lowest class index; neither
    looks at the evaluated nodes' labels. Cora: class 3, 0.319 on the 1000 test nodes, 640/2068 on the rest."""
    num_classes = int(data.y.max()) + 1
    train_counts = torch.bincount(data.y[data.train_mask], minlength=num_classes)
    val_counts = torch.bincount(data.y[data.val_mask], minlength=num_classes)
    tied = train_counts == train_counts.max()
    majority = int(torch.where(tied, val_counts, -1).argmax())  # argmax: the first of equal maxima
    return float((data.y[eval_mask] == majority).float().mean())
