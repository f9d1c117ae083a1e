"""How a run optimizes: its optimizer, the learning rate per epoch or per optimizer step, gradient clipping, early
stopping, and the stop when training diverges.

:class:`TrainingSchedule` is the one optimizer + learning-rate schedule both training loops hold: with
``scheduler="polynomial"`` the per-step :func:`polynomial_optimizer`, else :func:`build_optimizer` with the per-epoch
:class:`EpochSchedule`. Its ``state_dict`` is part of a graph-level checkpoint (:mod:`graphnorm.train.checkpoints`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from graphnorm.config import RunConfig


def build_optimizer(config: RunConfig, model: nn.Module) -> torch.optim.Optimizer:
    """``config.optimizer`` (Adam or AdamW) over the model's parameters with ``config.lr`` and ``config.weight_decay``.

    A model with a ``parameter_groups(weight_decay) -> [{"params": ..., "weight_decay": ...}, ...]`` method sets its
    own decay per group (GCNII: the convolutions' decay differs from the dense layers').
    """
    optimizer_class = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[config.optimizer]
    groups = getattr(model, "parameter_groups", None)
    params = groups(config.weight_decay) if callable(groups) else model.parameters()
    return optimizer_class(params, lr=config.lr, weight_decay=config.weight_decay)


class EpochSchedule:
    """Per-epoch learning rate of ``optimizer``: linear warmup over ``config.warmup_epochs`` (epoch ``e`` at
    ``lr * (e + 1) / (warmup_epochs + 1)``), then ``config.scheduler``: ``"none"`` keeps ``lr``, ``"cosine"`` decays
    it as ``lr * (1 + cos(pi * t)) / 2`` with ``t`` the fraction of the post-warmup epochs done, ``"plateau"`` halves
    it when the validation metric has not improved for 10 epochs (``ReduceLROnPlateau``; ``higher_is_better`` says
    which way improves)."""

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
        """Set the learning rate of ``epoch`` (0-based) before its optimizer steps."""
        if epoch < self.warmup:
            self._set_lr(self.base_lr * (epoch + 1) / (self.warmup + 1))
        elif self.kind == "cosine":
            progress = (epoch - self.warmup) / (self.epochs - self.warmup)
            self._set_lr(self.base_lr * 0.5 * (1.0 + math.cos(math.pi * progress)))
        elif epoch == self.warmup and self.warmup > 0:
            self._set_lr(self.base_lr)  # end of warmup; the plateau scheduler takes over from here

    def end_epoch(self, epoch: int, val_metric: float) -> None:
        """Tell the plateau scheduler (after the warmup) the epoch's validation metric."""
        if self.plateau is not None and epoch >= self.warmup:
            self.plateau.step(val_metric)

    def state_dict(self) -> dict[str, Any]:
        # The learning rate itself lives in the optimizer's state; only the plateau counter is extra.
        return {"plateau": self.plateau.state_dict() if self.plateau is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.plateau is not None:
            self.plateau.load_state_dict(state["plateau"])


def polynomial_optimizer(
    model: nn.Module,
    lr: float = 2e-4,
    weight_decay: float = 0.01,
    warmup_steps: int = 40_000,
    total_steps: int = 400_000,
    end_lr: float = 1e-9,
    power: float = 1.0,
    attention_bias_lr_scale: float = 1.0,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """The Graphormer recipe (Ying et al., 2021), for any model: AdamW (betas 0.9/0.999, eps 1e-8, decoupled weight
    decay on all parameters as fairseq does) with linear warmup to ``lr`` over ``warmup_steps`` updates, then
    polynomial decay to ``end_lr`` at ``total_steps`` (``power`` 1: linear). Defaults are the paper's ZINC settings.
    Call ``scheduler.step()`` after every ``optimizer.step()``; the paper clips gradients to norm 5.0 before it.

    ``attention_bias_lr_scale`` (not in the paper; 1 keeps its optimizer) multiplies the learning rate of the
    parameters the model's ``attention_bias_parameters()`` method returns (Graphormer's attention-bias tables), in a
    second parameter group, for short budgets. Those entries are added to the attention logits as they are and start
    at N(0, 0.02): attention becomes local only once they reach magnitudes of a few units, and Adam moves a parameter
    by about ``lr`` per step, so at ``lr`` 5e-4 that takes some 10k steps (the paper trains 400k). Their weight decay
    is divided by the same factor, so the decoupled decay per step (``lr * weight_decay``) stays that of all
    parameters.

    Raises ``ValueError`` for a learning rate, step count, weight decay or scale out of range, and for a scale other
    than 1 on a model without attention-bias parameters.
    """
    if lr <= 0 or end_lr < 0 or end_lr > lr:
        raise ValueError(f"need 0 <= end_lr <= lr and lr > 0, got lr={lr}, end_lr={end_lr}")
    if warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError(f"need 0 <= warmup_steps < total_steps, got {warmup_steps} and {total_steps}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    if not attention_bias_lr_scale > 0:
        raise ValueError(f"attention_bias_lr_scale must be > 0, got {attention_bias_lr_scale}")
    if attention_bias_lr_scale == 1.0:  # one group, as the paper (and optimizer checkpoints written before the option)
        groups = [{"params": list(model.parameters())}]
    else:
        scaled = getattr(model, "attention_bias_parameters", None)
        scaled_ids = {id(p) for p in scaled()} if callable(scaled) else set()
        if not scaled_ids:
            raise ValueError(
                "attention_bias_lr_scale needs a model with attention-bias parameters (an attention_bias_parameters() "
                "method returning them)"
            )
        groups = [
            {"params": [p for p in model.parameters() if id(p) not in scaled_ids]},
            {
                "params": [p for p in model.parameters() if id(p) in scaled_ids],
                "lr": lr * attention_bias_lr_scale,
                "weight_decay": weight_decay / attention_bias_lr_scale,
            },
        ]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)

    def lr_factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps  # the first update already moves
        if step >= total_steps:
            return end_lr / lr
        remaining = 1.0 - (step - warmup_steps) / (total_steps - warmup_steps)
        return (end_lr + (lr - end_lr) * remaining**power) / lr

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)


class TrainingSchedule:
    """The optimizer and learning-rate schedule of a training loop: with ``scheduler="polynomial"``
    :func:`polynomial_optimizer`, stepped after every optimizer step (over ``config.total_steps``, else all the run's
    steps: ``epochs x steps_per_epoch``); with any other scheduler :func:`build_optimizer` and an
    :class:`EpochSchedule`.

    The loop calls :meth:`start_epoch` before an epoch's steps, :meth:`after_step` after every optimizer step and
    :meth:`end_epoch` after the epoch's evaluation; :attr:`lr` is the current learning rate. Raises ``ValueError``
    when ``warmup_steps`` is not below the run's optimizer steps.
    """

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
        """Before the optimizer steps of ``epoch``: the per-epoch learning rate."""
        if not self.per_step:
            self.scheduler.start_epoch(epoch)

    def after_step(self) -> None:
        """After an optimizer step: the per-step learning rate."""
        if self.per_step:
            self.scheduler.step()

    def end_epoch(self, epoch: int, val_metric: float) -> None:
        """After the evaluation of ``epoch``: its validation metric, for the plateau schedule."""
        if not self.per_step:
            self.scheduler.end_epoch(epoch, val_metric)

    @property
    def lr(self) -> float:
        """The learning rate of the first parameter group."""
        return self.optimizer.param_groups[0]["lr"]

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def clip_gradients(model: nn.Module, config: RunConfig) -> None:
    """Clip the gradients' total norm to ``config.grad_clip`` (0: no clipping), as every training step does."""
    if config.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)


def patience_exhausted(config: RunConfig, epoch: int, best_epoch: int | None) -> bool:
    """Early stopping: whether ``config.patience`` epochs have passed since the best-validation epoch."""
    return config.patience is not None and best_epoch is not None and epoch - best_epoch >= config.patience


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite: every later step would train on NaN gradients."""


def finite_loss(value: float, epoch: int, step: int | None = None) -> float:
    """``value``, the training loss of ``epoch`` (0-based) or of its optimizer ``step`` (1-based), when finite; else
    :class:`TrainingDivergedError`. A NaN loss makes every weight NaN at the next optimizer step, and the run would go
    on to report the accuracy of constant predictions: it stops instead (a sweep records it as failed, with this
    message)."""
    if not math.isfinite(value):
        where = f"epoch {epoch + 1}" + ("" if step is None else f", optimizer step {step}")
        raise TrainingDivergedError(
            f"training diverged: the training loss is {value} at {where}; lower lr, set grad_clip, or add a norm"
        )
    return value
