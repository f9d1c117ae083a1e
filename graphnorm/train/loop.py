"""Training loops and the one entry point ``run(config) -> dict``.

* Node classification (Cora, CiteSeer): full batch, cross-entropy on the train mask; every epoch the model is
  evaluated; the best-validation weights (highest val accuracy, ties -> lower val loss) are kept in memory.
  ``eval_nodes="test"`` scores the public 1000 test nodes, ``"rest"`` every node outside train+val (2068 on Cora,
  the ContraNorm/PairNorm protocol, which reports the last epoch: ``test_acc_last``).
* Early stopping (both levels): with ``patience``, training ends once the best-validation epoch is ``patience``
  epochs old (``epochs_run`` in the record says how many ran); the best-validation weights are evaluated as always.
* Graph level (ZINC, MolHIV): PyG ``DataLoader`` mini-batches; ZINC: L1 loss and MAE; MolHIV: BCE with logits and
  ROC-AUC from OGB's ``Evaluator``. Graphormer runs on its own batches instead: every split is preprocessed once
  (shortest paths, edge paths, degrees; cached next to the dataset's processed files) and collated by
  ``collate_graphormer``. ``scheduler="polynomial"`` is the Graphormer optimizer (AdamW, linear warmup, polynomial
  decay, stepped after every optimizer step). Graph-level runs can checkpoint every epoch and resume
  (``checkpoint_dir``) and stop on a time budget (``max_train_minutes``); see :mod:`graphnorm.config`. Only the
  run that wrote a checkpoint resumes it: its saved config must match (``data_root`` and ``checkpoint_dir`` aside),
  else :class:`CheckpointError` names the file and the differing keys (:func:`config_differences`).

``train(config) -> (model, task, record)`` leaves the model at its best-validation weights (in eval mode) so the
collapse probe can run on it; ``run(config)`` returns only the JSON-serializable record, with flat keys
``val_<metric>``, ``test_<metric>`` (at the best-validation epoch), ``val_<metric>_last``, ``test_<metric>_last``,
``best_epoch``, ``train_loss`` (last epoch; ``train_loss_first``: epoch 0), ``num_params``, ``epochs_run``,
``wall_time_s``, and ``history``: the learning curve, one dict per epoch (node level: ``epoch``, ``train_loss``,
``val_loss``, ``val_acc``, ``test_acc``; graph level: ``epoch``, ``step``, ``lr``, ``train_loss``,
``val_<metric>``, ``test_<metric>``, ``train_time_s``; a sweep writes it to ``epochs.csv``).
Node-level records add ``num_eval_nodes`` and ``majority_acc`` (:func:`majority_accuracy`: the accuracy on the
same evaluated nodes of always predicting the training nodes' most frequent class). Graph-level records add
``steps`` (optimizer steps), ``stopped_by_time``, ``resumed_at_epoch`` (``None`` for a run that never resumed) and
``train_graphs_per_s`` (training throughput over the batch loops, evaluation excluded); Graphormer records add
``dropped_graphs_<split>`` (graphs above ``max_nodes`` left out with ``drop_large_graphs``). The training-loop time
(summed over resumes, what ``max_train_minutes`` limits) is kept in the history's ``train_time_s`` and in the
checkpoint, not in the record's flat keys, so that records of equal runs are equal apart
from the timings ``wall_time_s``, ``probe_time_s``, ``train_graphs_per_s`` and the history's ``train_time_s``.

Collapse over training (``probe_every_steps`` = N > 0): the record adds ``collapse_steps``, the collapse probe's
rows of the weights being trained at step 0 and every N optimizer steps (node level: one step per epoch), and
``collapse_steps_time_s``; the probe leaves the training's random state and its metrics untouched
(:mod:`graphnorm.train.collapse_steps`; a graph-level checkpoint keeps the rows).

Progress: every run writes flushed progress lines to stderr (run id, epoch/total, train loss, validation and test
metric, elapsed seconds) at most every 10 s and at its last epoch, and draws an epoch bar only on a terminal
(:class:`graphnorm.train.progress.EpochProgress`); with ``tensorboard_dir`` it writes TensorBoard scalars to
``<tensorboard_dir>/<run_id>``: per epoch the history's curves and the learning rate, and the collapse probe's metrics
per layer (:mod:`graphnorm.train.tensorboard_log`).

Seams for other models: :func:`build_model` (``config.model``), :func:`model_outputs` (how a model is called on a
PyG batch: DeepGCN takes ``(x, edge_index, batch, batch_size)``, any other model the whole ``Data``/``Batch``),
:func:`build_optimizer` and :class:`EpochSchedule`.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch_geometric import seed_everything

from graphnorm.config import RunConfig, config_run_id, model_keywords
from graphnorm.data import GraphTask
from graphnorm.data.metrics import score, task_loss
from graphnorm.models import build_model as build_registered_model
from graphnorm.models import model_outputs, model_spec, polynomial_optimizer
from graphnorm.train.checkpoints import (
    prepare_checkpoint_dir,
    resume_from_checkpoint,
    rng_state,
    save_checkpoint,
)
from graphnorm.train.loaders import graph_loaders, model_sample, prepare_task
from graphnorm.train.model_file import model_file_path, save_model_file
from graphnorm.train.progress import EpochProgress
from graphnorm.train.record import STEPS_KEY
from graphnorm.train.tensorboard_log import TensorBoardLog, require_tensorboard

if TYPE_CHECKING:
    from graphnorm.train.collapse_steps import StepProbe


# --- building blocks ------------------------------------------------------------------------------------------
def build_model(config: RunConfig, task: GraphTask) -> nn.Module:
    """The model registered as ``config.model``, built for ``task`` with the config's model keywords."""
    return build_registered_model(config.model, task, **model_keywords(config, task.level))


def build_optimizer(config: RunConfig, model: nn.Module) -> torch.optim.Optimizer:
    """Adam(W) over the model's parameters with ``config.weight_decay``; a model with a ``parameter_groups(
    weight_decay) -> [{"params": ..., "weight_decay": ...}, ...]`` method sets its own decay per group (GCNII: the
    convs' decay differs from the dense layers')."""
    optimizer_class = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[config.optimizer]
    groups = getattr(model, "parameter_groups", None)
    params = groups(config.weight_decay) if callable(groups) else model.parameters()
    return optimizer_class(params, lr=config.lr, weight_decay=config.weight_decay)


def patience_exhausted(config: RunConfig, epoch: int, best_epoch: int | None) -> bool:
    """Early stopping: whether ``config.patience`` epochs have passed since the best-validation epoch."""
    return config.patience is not None and best_epoch is not None and epoch - best_epoch >= config.patience


class EpochSchedule:
    """Per-epoch learning rate: linear warmup over ``warmup_epochs``, then constant, cosine to 0, or halved when
    the validation metric plateaus for 10 epochs."""

    def __init__(self, optimizer: torch.optim.Optimizer, config: RunConfig, higher_is_better: bool) -> None:
        self.optimizer = optimizer
        self.base_lr = config.lr
        self.kind = config.scheduler
        self.warmup = config.warmup_epochs
        self.epochs = config.epochs
        self.plateau = None
        if self.kind == "plateau":
            mode = "max" if higher_is_better else "min"
            self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode=mode, factor=0.5, patience=10)

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def start_epoch(self, epoch: int) -> None:
        if epoch < self.warmup:
            self._set_lr(self.base_lr * (epoch + 1) / (self.warmup + 1))
        elif self.kind == "cosine":
            progress = (epoch - self.warmup) / (self.epochs - self.warmup)
            self._set_lr(self.base_lr * 0.5 * (1.0 + math.cos(math.pi * progress)))
        elif epoch == self.warmup and self.warmup > 0:
            self._set_lr(self.base_lr)  # end of warmup; the plateau scheduler takes over from here

    def end_epoch(self, epoch: int, val_metric: float) -> None:
        if self.plateau is not None and epoch >= self.warmup:
            self.plateau.step(val_metric)

    def state_dict(self) -> dict[str, Any]:
        # The learning rate itself lives in the optimizer's state; only the plateau counter is extra.
        return {"plateau": self.plateau.state_dict() if self.plateau is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.plateau is not None:
            self.plateau.load_state_dict(state["plateau"])


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but CUDA is not available; use device='cpu' or 'auto'")
    return torch.device(name)


def run_id_of(config: RunConfig) -> str:
    """The sweep's run id of ``config`` (a hash of the config; its progress lines and TensorBoard folder use it)."""
    return config_run_id(config)


def open_tensorboard(config: RunConfig, purge_step: int | None = 0, part: str | None = None) -> TensorBoardLog | None:
    """The run's TensorBoard log (``<tensorboard_dir>/<run_id>``), or None without ``tensorboard_dir``.
    ``purge_step``: earlier attempts' points from this epoch on are hidden (0: a fresh start; None: keep all)."""
    if config.tensorboard_dir is None:
        return None
    return TensorBoardLog(config.tensorboard_dir, run_id_of(config), purge_step, part)


def report_epoch(
    progress: EpochProgress, board: TensorBoardLog | None, row: dict[str, Any], lr: float, shown: tuple[str, ...]
) -> None:
    """One epoch's ``history`` row to the progress line (the keys ``shown``, in order) and to TensorBoard."""
    progress.update(row["epoch"], {key: row[key] for key in shown if key in row})
    if board is not None:
        board.epoch(row["epoch"], row, lr)


def open_step_probe(
    config: RunConfig, model: nn.Module, task: GraphTask, device: torch.device, rows: list, start_step: int = 0
) -> StepProbe:
    """The run's collapse-over-steps probe (:mod:`graphnorm.train.collapse_steps`) on :func:`probe_sample`,
    appending to ``rows``; off (a probe that does nothing) when ``probe_every_steps`` is 0. ``start_step``: a
    resumed run's first step, from which its earlier attempt's TensorBoard points are hidden."""
    from graphnorm.train.collapse_steps import StepProbe, preserved_rng

    if config.probe_every_steps == 0:
        return StepProbe(rows=rows)
    with preserved_rng():  # building the sample (Graphormer: preprocessing) draws nothing from the training RNG
        sample, split = probe_sample(model, task, config)
    board = open_tensorboard(config, purge_step=start_step, part="collapse_steps")
    return StepProbe(config.probe_every_steps, model, sample.to(device), split, rows, board)


def step_rows_record(config: RunConfig, rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The record's collapse-over-steps keys: ``collapse_steps`` (the rows) and ``collapse_steps_time_s``; none
    when ``probe_every_steps`` is 0."""
    if config.probe_every_steps == 0:
        return {}
    return {STEPS_KEY: rows, f"{STEPS_KEY}_time_s": seconds}


def clip_gradients(model: nn.Module, config: RunConfig) -> None:
    """Clip the gradients' total norm to ``config.grad_clip`` (0: no clipping), as every training step does."""
    if config.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)


# --- node classification --------------------------------------------------------------------------------------
def sparse_features_help(model: nn.Module, x: Tensor) -> bool:
    """Whether ``model`` takes ``x`` as raw features that are sparse enough (<= 10% nonzero) to pass as COO.
    A model says so by an optional ``takes_sparse_features`` attribute (DeepGCN, GCNII)."""
    if not getattr(model, "takes_sparse_features", False):
        return False
    return x.is_floating_point() and x.numel() > 0 and int(torch.count_nonzero(x)) <= 0.1 * x.numel()


def node_eval_mask(task: GraphTask, eval_nodes: str) -> Tensor:
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
    """Full-batch training on the train mask; keeps the best-validation epoch (metric; ties: lower validation loss)."""
    data = task.data.to(device)
    if sparse_features_help(model, data.x):
        # Bag-of-words features (Cora: 1.3% nonzero) as sparse COO: the first layer's dropout draws only for the
        # stored values and its matmul skips the zeros (same distribution and values as the dense input).
        data = data.clone()
        data.x = data.x.to_sparse()
    eval_mask = node_eval_mask(task, config.eval_nodes).to(device)
    metric, sign = task.metric, 1.0 if task.higher_is_better else -1.0
    optimizer = build_optimizer(config, model)
    schedule = EpochSchedule(optimizer, config, task.higher_is_better)
    best = {"score": -math.inf, "val_loss": math.inf}
    best_state: dict[str, Tensor] = {}
    history: list[dict[str, Any]] = []
    progress = EpochProgress(run_id_of(config), config.epochs)
    board = open_tensorboard(config)
    step_probe = open_step_probe(config, model, task, device, [])
    step_probe.after_step(0, 0)
    for epoch in range(config.epochs):
        schedule.start_epoch(epoch)
        model.train()
        optimizer.zero_grad()
        outputs = model_outputs(model, data)  # [N, outputs]
        loss = task_loss(task, outputs[data.train_mask], data.y[data.train_mask])
        loss.backward()
        clip_gradients(model, config)
        optimizer.step()
        step_probe.after_step(epoch + 1, epoch)  # full batch: one optimizer step per epoch
        if epoch == 0:
            first_loss = loss.item()
        val_loss, val, test = evaluate_nodes(model, data, task, eval_mask)
        if sign * val > best["score"] or (sign * val == best["score"] and val_loss < best["val_loss"]):
            best = {"score": sign * val, "val": val, "val_loss": val_loss, "test": test, "best_epoch": epoch}
            best_state = copy.deepcopy(model.state_dict())
        schedule.end_epoch(epoch, val)
        row = {"epoch": epoch, "train_loss": loss.item(), "val_loss": val_loss, f"val_{metric}": val}
        history.append({**row, f"test_{metric}": test})
        shown = ("train_loss", f"val_{metric}", f"test_{metric}")
        report_epoch(progress, board, history[-1], optimizer.param_groups[0]["lr"], shown)
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
        "train_loss": loss.item(),
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


# --- graph level ------------------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate_graphs(model: nn.Module, loader, task: GraphTask, device: torch.device) -> float:
    model.eval()
    outputs, targets = [], []
    for batch in loader:
        batch = batch.to(device)
        outputs.append(model_outputs(model, batch).cpu())
        targets.append(batch.y.cpu())
    return score(task, torch.cat(outputs), torch.cat(targets))


# --- graph level training -----------------------------------------------------------------------------------------
class StepSchedule:
    """``scheduler="polynomial"``: the Graphormer optimizer and its per-step learning rate; else the per-epoch
    :class:`EpochSchedule`. One interface for the loop: ``start_epoch``, ``after_step``, ``end_epoch``."""

    def __init__(self, config: RunConfig, model: nn.Module, steps_per_epoch: int, higher_is_better: bool) -> None:
        self.per_step = config.scheduler == "polynomial"
        if self.per_step:
            total_steps = config.total_steps if config.total_steps is not None else config.epochs * steps_per_epoch
            if total_steps <= config.warmup_steps:
                raise ValueError(
                    f"warmup_steps={config.warmup_steps} must be below the run's {total_steps} optimizer steps "
                    f"({config.epochs} epochs x {steps_per_epoch} steps); lower it or set total_steps"
                )
            self.optimizer, self.scheduler = polynomial_optimizer(
                model,
                lr=config.lr,
                weight_decay=config.weight_decay,
                warmup_steps=config.warmup_steps,
                total_steps=total_steps,
                end_lr=config.end_lr,
                attention_bias_lr_scale=config.attention_bias_lr_scale,
            )
        else:
            self.optimizer = build_optimizer(config, model)
            self.scheduler = EpochSchedule(self.optimizer, config, higher_is_better)

    def start_epoch(self, epoch: int) -> None:
        if not self.per_step:
            self.scheduler.start_epoch(epoch)

    def after_step(self) -> None:
        if self.per_step:
            self.scheduler.step()

    def end_epoch(self, epoch: int, val_metric: float) -> None:
        if not self.per_step:
            self.scheduler.end_epoch(epoch, val_metric)

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


@dataclass
class GraphTrainState:
    """Everything a resumed graph-level run needs to continue exactly as if it had never stopped (saved as a dict in
    the checkpoint's ``"state"``, the same keys as before this class existed)."""

    epoch: int = 0  # next epoch to run
    step: int = 0
    best: dict[str, Any] = field(default_factory=lambda: {"score": -math.inf})
    best_state: dict[str, Tensor] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)  # train_loss / val / test of the last epoch run
    first_loss: float | None = None
    train_time_s: float = 0.0
    step_time_s: float = 0.0  # the epochs' batch loops (loading, steps; no evaluation): the throughput's denominator
    graphs_trained: int = 0
    eval_time_s: float = 0.0  # the last evaluation's duration, kept in reserve from the time budget
    stopped_by_time: bool = False
    done: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)  # one row per epoch run: the learning curve
    collapse_steps: list[dict[str, Any]] = field(default_factory=list)  # probe_every_steps: the step probe's rows
    collapse_steps_time_s: float = 0.0  # the step probe's time, summed over resumes

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class GraphTraining:
    """What a graph-level run trains with, built once per process (not checkpointed)."""

    model: nn.Module
    task: GraphTask
    config: RunConfig
    device: torch.device
    loaders: tuple[Any, Any, Any]  # train, val, test
    schedule: StepSchedule
    ema: nn.Module | None  # with ema_decay: the weight average that is evaluated, selected and returned
    budget_s: float
    step_probe: StepProbe  # probe_every_steps: collapse metrics of the trained weights every N steps

    @property
    def evaluated(self) -> nn.Module:
        return self.ema.module if self.ema is not None else self.model

    def train_epoch(self, state: GraphTrainState, epoch_start: float) -> tuple[float, int]:
        """One pass over the training batches (stopping early on the time budget): (loss sum, graphs)."""
        self.model.train()
        loss_sum, graphs = 0.0, 0
        for batch in self.loaders[0]:
            # Stop before a step that would leave too little of the budget for this epoch's evaluation.
            elapsed = state.train_time_s + time.perf_counter() - epoch_start
            if state.step > 0 and elapsed + state.eval_time_s >= self.budget_s:
                state.stopped_by_time = True
                break
            batch = batch.to(self.device)
            self.schedule.optimizer.zero_grad()
            loss = task_loss(self.task, model_outputs(self.model, batch), batch.y)
            loss.backward()
            clip_gradients(self.model, self.config)
            self.schedule.optimizer.step()
            self.schedule.after_step()
            if self.ema is not None:
                self.ema.update_parameters(self.model)
            state.step += 1
            self.step_probe.after_step(state.step, state.epoch)
            loss_sum += loss.item() * batch.num_graphs
            graphs += batch.num_graphs
        return loss_sum, graphs

    def evaluate_epoch(self, state: GraphTrainState, epoch: int, train_loss: float, epoch_start: float) -> None:
        """Validation and test metric of the epoch, the best-validation selection, the history row."""
        if state.first_loss is None:
            state.first_loss = train_loss
        eval_start = time.perf_counter()
        val = evaluate_graphs(self.evaluated, self.loaders[1], self.task, self.device)
        test = evaluate_graphs(self.evaluated, self.loaders[2], self.task, self.device)
        state.eval_time_s = time.perf_counter() - eval_start
        sign = 1.0 if self.task.higher_is_better else -1.0
        if sign * val > state.best["score"]:
            state.best = {"score": sign * val, "val": val, "test": test, "best_epoch": epoch}
            state.best_state = copy.deepcopy(self.evaluated.state_dict())
        self.schedule.end_epoch(epoch, val)
        state.last = {"train_loss": train_loss, "val": val, "test": test}
        state.epoch = epoch + 1
        state.train_time_s += time.perf_counter() - epoch_start
        state.done = (
            state.stopped_by_time
            or epoch + 1 == self.config.epochs
            or patience_exhausted(self.config, epoch, state.best.get("best_epoch"))
        )
        metric = self.task.metric
        row = {"epoch": epoch, "step": state.step, "lr": self.schedule.lr, "train_loss": train_loss}
        row.update({f"val_{metric}": val, f"test_{metric}": test, "train_time_s": state.train_time_s})
        state.history.append(row)

    def checkpoint(self, state: GraphTrainState, generator: torch.Generator) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "model": self.model.state_dict(),
            "schedule": self.schedule.state_dict(),
            "rng": rng_state(generator),
            "state": state.as_dict(),
            **({"ema": self.ema.state_dict()} if self.ema is not None else {}),
        }


def graph_record(state: GraphTrainState, config: RunConfig, metric: str, resumed_at: int | None, extra: dict) -> dict:
    """The graph-level run's record (see the module docstring) from its final state."""
    best, last = state.best, state.last
    return {
        f"val_{metric}": best["val"],
        f"test_{metric}": best["test"],
        f"val_{metric}_last": last["val"],
        f"test_{metric}_last": last["test"],
        "best_epoch": best["best_epoch"],
        "train_loss": last["train_loss"],
        "train_loss_first": state.first_loss,
        "epochs_run": state.epoch,
        "steps": state.step,
        "stopped_by_time": state.stopped_by_time,
        # training throughput over the batch loops (loading and collating, forward, backward, step); no evaluation
        "train_graphs_per_s": state.graphs_trained / state.step_time_s if state.step_time_s > 0 else None,
        "resumed_at_epoch": resumed_at,
        **extra,
        **step_rows_record(config, state.collapse_steps, state.collapse_steps_time_s),
        "history": state.history,
    }


def train_graph_level(
    model: nn.Module, task: GraphTask, config: RunConfig, device: torch.device
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Mini-batch training with per-epoch evaluation, checkpoints (resume), time budget and weight EMA."""
    path = prepare_checkpoint_dir(config)
    generator = torch.Generator().manual_seed(config.seed)  # shuffling fixed by the seed
    *loaders, extra = graph_loaders(task, config, generator, model_spec(config.model).inputs)
    schedule = StepSchedule(config, model, len(loaders[0]), task.higher_is_better)
    # With ema_decay, an exponential moving average of the weights (buffers too: BatchNorm's running statistics)
    # is what is evaluated, selected by validation and returned; the first update copies the weights.
    ema = None
    if config.ema_decay is not None:
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(config.ema_decay), use_buffers=True)
    budget_s = config.max_train_minutes * 60.0 if config.max_train_minutes is not None else math.inf
    state, resumed_at = GraphTrainState(), None
    if path is not None and path.exists():
        state = GraphTrainState(**resume_from_checkpoint(path, config, model, schedule, ema, generator))
        resumed_at = state.epoch
        print(f"resuming from {path} at epoch {resumed_at} (step {state.step})", flush=True)
    step_probe = open_step_probe(config, model, task, device, state.collapse_steps, start_step=state.step)
    training = GraphTraining(model, task, config, device, tuple(loaders), schedule, ema, budget_s, step_probe)
    if state.step == 0:
        step_probe.after_step(0, 0)  # before the first update
    progress = EpochProgress(run_id_of(config), config.epochs, start_epoch=state.epoch)
    board = open_tensorboard(config, purge_step=state.epoch)
    shown = ("train_loss", f"val_{task.metric}", f"test_{task.metric}", "lr", "step")
    for epoch in range(state.epoch, config.epochs):
        if state.done:
            break
        epoch_start, probed_before = time.perf_counter(), step_probe.seconds
        schedule.start_epoch(epoch)
        loss_sum, graphs = training.train_epoch(state, epoch_start)
        probed = step_probe.seconds - probed_before  # in the loop's time, not in the throughput's
        state.collapse_steps_time_s += probed
        state.step_time_s += time.perf_counter() - epoch_start - probed
        state.graphs_trained += graphs
        if graphs == 0:  # the budget ran out exactly at an epoch boundary: nothing new to evaluate
            state.train_time_s += time.perf_counter() - epoch_start
            state.done = True
        else:
            training.evaluate_epoch(state, epoch, loss_sum / graphs, epoch_start)
            report_epoch(progress, board, state.history[-1], schedule.lr, shown)
        if path is not None:
            save_checkpoint(path, training.checkpoint(state, generator))
    progress.close()
    if board is not None:
        board.close()
    step_probe.close()
    return graph_record(state, config, task.metric, resumed_at, extra), state.best_state


# --- entry points -----------------------------------------------------------------------------------------------
def train(config: RunConfig) -> tuple[nn.Module, GraphTask, dict[str, Any]]:
    """Train one run; returns the model at its best-validation weights (eval mode), the task and the record."""
    config.validate()
    if config.tensorboard_dir is not None:
        require_tensorboard()  # before loading and preprocessing, not after
    start = time.perf_counter()
    seed_everything(config.seed)  # random, numpy, torch
    device = resolve_device(config.device)
    task = prepare_task(config)
    seed_everything(config.seed)  # the model's initialization must not depend on what loading consumed
    model = build_model(config, task).to(device)
    if task.level == "node":
        record, best_state = train_node_level(model, task, config, device)
    else:
        record, best_state = train_graph_level(model, task, config, device)
    model.load_state_dict(best_state)
    model.eval()
    if config.checkpoint_dir is not None:
        save_model_file(model_file_path(config), config, task, model, record)
    record.update(
        {
            "metric": task.metric,
            "num_params": sum(p.numel() for p in model.parameters()),
            **task.stats,
            "wall_time_s": time.perf_counter() - start,
        }
    )
    return model, task, record


def probe_sample(model: nn.Module, task: GraphTask, config: RunConfig) -> tuple[Any, str]:
    """What the run's collapse probe measures: node level the whole graph; graph level the fixed validation sample
    of :func:`graphnorm.analysis.probe.evaluation_sample` (for Graphormer preprocessed and collated by
    ``collate_graphormer``; graphs above ``max_nodes`` left out when ``drop_large_graphs``)."""
    from graphnorm.analysis.probe import evaluation_sample

    if task.level == "node":
        return task.data, "all"
    sample = evaluation_sample(task.val, num_graphs=config.probe_graphs, seed=0)
    return model_sample(sample, config, model_spec(config.model).inputs), "val_sample"


def run(config: RunConfig) -> dict[str, Any]:
    """Train one run and return its JSON-serializable record (see the module docstring for the keys).

    With ``config.probe`` the record also carries ``"layers"``: collapse metrics at every layer of the final
    (best-validation) model, from :func:`graphnorm.analysis.probe_records` (node level: the whole graph; graph
    level: a fixed sample of ``config.probe_graphs`` validation graphs). A sweep writes them to ``layers.csv``.
    """
    model, task, record = train(config)
    if config.probe:
        from graphnorm.analysis.probe import probe_records

        start = time.perf_counter()
        model = model.to("cpu")
        data, split = probe_sample(model, task, config)
        record["layers"] = probe_records(model, data, split=split)
        record["probe_time_s"] = time.perf_counter() - start
        board = open_tensorboard(config, purge_step=0, part="collapse")  # layer steps, apart from the epochs
        if board is not None:
            board.probe(record["layers"])
            board.close()
    return record
