"""The graph-level training loop (ZINC, MolHIV, SMILES datasets): mini-batches, per-epoch evaluation, the
best-validation weights kept, and a run that survives being stopped (:func:`train_graph_level`).

Batches come from :func:`graphnorm.train.loaders.graph_loaders` (PyG batches, or a model's own padded batches); the
loss and metric are the task's (:mod:`graphnorm.data.scoring`). With ``checkpoint_dir`` the run saves a checkpoint
after every epoch and resumes from it (:mod:`graphnorm.train.checkpoints`); ``max_train_minutes`` stops it cleanly on
a time budget; ``ema_decay`` evaluates and keeps a weight average. The record's keys: :mod:`graphnorm.train.record`.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from graphnorm.config import RunConfig, config_run_id
from graphnorm.data import GraphTask
from graphnorm.data.scoring import score, task_loss
from graphnorm.models import forward_adapter, model_outputs, model_spec
from graphnorm.train.checkpoints import (
    RANK_RNG_KEY,
    WORLD_SIZE_KEY,
    checkpoint_path,
    prepare_checkpoint_dir,
    resume_from_checkpoint,
    rng_state,
    save_checkpoint,
)
from graphnorm.train.collapse_steps import StepProbe, open_step_probe, step_rows_record
from graphnorm.train.distributed import (
    Ranks,
    any_rank,
    current_ranks,
    data_parallel,
    from_rank0,
    gather_objects,
    sum_across,
)
from graphnorm.train.loaders import graph_loaders
from graphnorm.train.progress import EpochProgress, report_epoch
from graphnorm.train.schedules import TrainingSchedule, clip_gradients, finite_loss, patience_exhausted
from graphnorm.train.tensorboard_log import open_tensorboard


@torch.no_grad()
def evaluate_graphs(model: nn.Module, loader, task: GraphTask, device: torch.device) -> float:
    """The task's metric of ``model`` (in eval mode) over every batch of ``loader``."""
    model.eval()
    outputs, targets = [], []
    for batch in loader:
        batch = batch.to(device)
        outputs.append(model_outputs(model, batch).cpu())
        targets.append(batch.y.cpu())
    return score(task, torch.cat(outputs), torch.cat(targets))


@dataclass
class GraphTrainState:
    """Everything a resumed graph-level run needs to continue exactly as if it had never stopped (saved as a dict in
    the checkpoint's ``"state"``: its keys are the checkpoint format)."""

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
    schedule: TrainingSchedule
    ema: nn.Module | None  # with ema_decay: the weight average that is evaluated, selected and returned
    budget_s: float
    step_probe: StepProbe  # probe_every_steps: collapse metrics of the trained weights every N steps
    ranks: Ranks = field(default_factory=Ranks)  # data-parallel training: this process among the others
    trained: nn.Module | None = None  # what the training steps call: the model, or the model in DDP

    def __post_init__(self) -> None:
        self.trained = self.model if self.trained is None else self.trained
        self.call = forward_adapter(self.model)  # read from the model itself: DDP's forward takes anything

    @property
    def evaluated(self) -> nn.Module:
        """What is evaluated, selected by validation and returned: the weight average with ``ema_decay``, else the
        model."""
        return self.ema.module if self.ema is not None else self.model

    def train_epoch(self, state: GraphTrainState, epoch_start: float) -> tuple[float, int]:
        """One pass over the training batches (stopping early on the time budget): (loss sum, graphs)."""
        self.model.train()
        loss_sum, graphs = 0.0, 0
        for batch in self.loaders[0]:
            # Stop before a step that would leave too little of the budget for this epoch's evaluation.
            elapsed = state.train_time_s + time.perf_counter() - epoch_start
            over = state.step > 0 and elapsed + state.eval_time_s >= self.budget_s
            if self.ranks.active and math.isfinite(self.budget_s):
                over = any_rank(over)  # every process stops before the same step
            if over:
                state.stopped_by_time = True
                break
            batch = batch.to(self.device)
            self.schedule.optimizer.zero_grad()
            loss = task_loss(self.task, self.call(self.trained, batch), batch.y)
            loss.backward()
            clip_gradients(self.model, self.config)
            self.schedule.optimizer.step()
            self.schedule.after_step()
            if self.ema is not None:
                self.ema.update_parameters(self.model)
            state.step += 1
            loss_sum += finite_loss(loss.item(), state.epoch, state.step) * batch.num_graphs  # before a NaN is probed
            self.step_probe.after_step(state.step, state.epoch)
            graphs += batch.num_graphs
        if self.ranks.active:  # the epoch's loss over every process's graphs, as one process would sum it
            loss_sum, total = sum_across([loss_sum, graphs])
            graphs = int(total)
        return loss_sum, graphs

    def evaluate_epoch(self, state: GraphTrainState, epoch: int, train_loss: float, epoch_start: float) -> None:
        """Validation and test metric of the epoch, the best-validation selection, the history row."""
        if state.first_loss is None:
            state.first_loss = train_loss
        eval_start = time.perf_counter()
        val = test = math.nan
        if self.ranks.writes:  # rank 0 evaluates the whole splits, as one process does; the others take its metrics
            val = evaluate_graphs(self.evaluated, self.loaders[1], self.task, self.device)
            test = evaluate_graphs(self.evaluated, self.loaders[2], self.task, self.device)
        if self.ranks.active:
            val, test = from_rank0([val, test])
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
        """What :func:`graphnorm.train.checkpoints.save_checkpoint` writes after an epoch: the config, the model,
        the schedule, every random state, the loop state and (with ``ema_decay``) the weight average."""
        rng = rng_state(generator)
        payload = {
            "config": self.config.to_dict(),
            "model": self.model.state_dict(),
            "schedule": self.schedule.state_dict(),
            "rng": rng,
            "state": state.as_dict(),
            **({"ema": self.ema.state_dict()} if self.ema is not None else {}),
        }
        if self.ranks.active:  # every process calls this: the random states of ranks 1.. go to rank 0's file
            payload.update({WORLD_SIZE_KEY: self.ranks.world_size, RANK_RNG_KEY: gather_objects(rng)[1:]})
        return payload


def graph_record(state: GraphTrainState, config: RunConfig, metric: str, resumed_at: int | None, extra: dict) -> dict:
    """The graph-level run's record (its keys: :mod:`graphnorm.train.record`) from its final state."""
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
    """Mini-batch training with per-epoch evaluation; returns the record's graph-level keys and the best-validation
    weights (of the weight average with ``ema_decay``).

    With ``checkpoint_dir`` the run writes ``<checkpoint_dir>/<run_id>.pt`` after every epoch and, when that file
    exists, resumes from it, ending with the same record as a run that never stopped; only the run that wrote a
    checkpoint resumes it (:func:`graphnorm.train.checkpoints.resume_from_checkpoint`). ``max_train_minutes`` ends
    training before a step that would leave too little of the budget for the epoch's evaluation; the budget counts
    the training loop's time summed over resumes. With ``patience``, training ends once the best-validation epoch is
    ``patience`` epochs old.

    Under torchrun (a process group running, :mod:`graphnorm.train.distributed`) each process trains on its share of
    every batch in DistributedDataParallel; rank 0 evaluates, writes the checkpoint and shows progress."""
    ranks = current_ranks()
    path = prepare_checkpoint_dir(config) if ranks.writes else checkpoint_path(config)
    generator = torch.Generator().manual_seed(config.seed)  # shuffling fixed by the seed
    *loaders, extra = graph_loaders(task, config, generator, model_spec(config.model).inputs, ranks)
    schedule = TrainingSchedule(config, model, len(loaders[0]), task.higher_is_better)
    # With ema_decay, an exponential moving average of the weights (buffers too: BatchNorm's running statistics)
    # is what is evaluated, selected by validation and returned; the first update copies the weights.
    ema = None
    if config.ema_decay is not None:
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(config.ema_decay), use_buffers=True)
    budget_s = config.max_train_minutes * 60.0 if config.max_train_minutes is not None else math.inf
    state, resumed_at = GraphTrainState(), None
    if path is not None and from_rank0([path.exists()])[0]:  # rank 0's view: it alone writes the file
        state = GraphTrainState(**resume_from_checkpoint(path, config, model, schedule, ema, generator, ranks))
        resumed_at = state.epoch
        if ranks.writes:
            print(f"resuming from {path} at epoch {resumed_at} (step {state.step})", flush=True)
    step_probe = open_step_probe(config, model, task, device, state.collapse_steps, start_step=state.step)
    trained = data_parallel(model, device) if ranks.active else model
    training = GraphTraining(
        model, task, config, device, tuple(loaders), schedule, ema, budget_s, step_probe, ranks, trained
    )
    if state.step == 0:
        step_probe.after_step(0, 0)  # before the first update
    progress = EpochProgress(config_run_id(config), config.epochs, start_epoch=state.epoch) if ranks.writes else None
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
            if progress is not None:
                report_epoch(progress, board, state.history[-1], schedule.lr, shown)
        if path is not None:
            payload = training.checkpoint(state, generator)  # on every rank: it gathers their random states
            if ranks.writes:
                save_checkpoint(path, payload)
    if progress is not None:
        progress.close()
    if board is not None:
        board.close()
    step_probe.close()
    return graph_record(state, config, task.metric, resumed_at, extra), state.best_state
