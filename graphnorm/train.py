"""Training loops and the one entry point ``run(config) -> dict``.

* Node classification (Cora, CiteSeer): full batch, cross-entropy on the train mask; every epoch the model is
  evaluated; the best-validation weights (highest val accuracy, ties -> lower val loss) are kept in memory.
  ``eval_nodes="test"`` scores the public 1000 test nodes, ``"rest"`` every node outside train+val (2068 on Cora,
  the ContraNorm/PairNorm protocol, which reports the last epoch: ``test_acc_last``).
* Graph level (ZINC, MolHIV): PyG ``DataLoader`` mini-batches; ZINC: L1 loss and MAE; MolHIV: BCE with logits and
  ROC-AUC from OGB's ``Evaluator``.

``train(config) -> (model, task, record)`` leaves the model at its best-validation weights (in eval mode) so the
collapse probe can run on it; ``run(config)`` returns only the JSON-serializable record, with flat keys
``val_<metric>``, ``test_<metric>`` (at the best-validation epoch), ``val_<metric>_last``, ``test_<metric>_last``,
``best_epoch``, ``train_loss`` (last epoch; ``train_loss_first``: epoch 0), ``num_params``, ``epochs_run``,
``wall_time_s``.

Seams for other models: :func:`build_model` (``config.model``), :func:`model_outputs` (how a model is called on a
PyG batch: DeepGCN takes ``(x, edge_index, batch, batch_size)``, any other model the whole ``Data``/``Batch``),
:func:`build_optimizer` and :class:`EpochSchedule`.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch import Tensor, nn
from torch_geometric import seed_everything
from torch_geometric.loader import DataLoader
from tqdm import tqdm

from graphnorm.config import RunConfig
from graphnorm.data import GraphTask, load_dataset
from graphnorm.models import DeepGCN


# --- building blocks ------------------------------------------------------------------------------------------
def build_model(config: RunConfig, task: GraphTask) -> nn.Module:
    """The model named by ``config.model`` for ``task``."""
    if config.model == "gcn":
        graph_level = task.level == "graph"
        return DeepGCN(
            in_channels=task.num_features,
            hidden_channels=config.hidden_channels,
            out_channels=task.num_outputs,
            num_layers=config.num_layers,
            norm=config.norm,
            norm_kwargs=config.norm_kwargs,
            dropout=config.dropout,
            residual=config.residual,
            adjacency=config.adjacency,
            layer_order=config.layer_order,
            shared_layernorm=config.shared_layernorm,
            readout=config.readout if graph_level else None,
            virtual_node=config.virtual_node,
            atom_encoder=task.atom_encoder,
            **config.model_kwargs,
        )
    if config.model == "graphormer":
        from graphnorm.models import Graphormer  # added by the Graphormer work; imported lazily

        return Graphormer.from_config(config, task)
    raise ValueError(f"unknown model {config.model!r}")


def model_outputs(model: nn.Module, data) -> Tensor:
    """Run ``model`` on a PyG ``Data``/``Batch``: DeepGCN by tensors, other models on the whole batch object."""
    if isinstance(model, DeepGCN):
        batch = getattr(data, "batch", None)
        return model(data.x, data.edge_index, batch=batch, batch_size=data.num_graphs if batch is not None else None)
    return model(data)


def build_optimizer(config: RunConfig, model: nn.Module) -> torch.optim.Optimizer:
    optimizer_class = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[config.optimizer]
    return optimizer_class(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


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


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but CUDA is not available; use device='cpu' or 'auto'")
    return torch.device(name)


def prepare_task(config: RunConfig) -> GraphTask:
    """Load the dataset and apply the config's data options (feature normalization, graph subsets)."""
    task = load_dataset(config.dataset, config.data_root)
    if config.feature_norm == "row_l1":
        # PyG's NormalizeFeatures: each row divided by its sum (exact row-L1 for the non-negative Planetoid features).
        task.data = T.NormalizeFeatures()(task.data.clone())
    if config.limit_graphs is not None:
        # Smoke runs: a fixed random subset (seed 0, independent of the run seed) so every seed sees the same graphs.
        generator = torch.Generator().manual_seed(0)
        for split in ("train", "val", "test"):
            dataset = getattr(task, split)
            if len(dataset) > config.limit_graphs:
                keep = torch.randperm(len(dataset), generator=generator)[: config.limit_graphs].sort().values
                setattr(task, split, dataset[keep])
    return task


def _progress(iterable, **kwargs):
    return tqdm(iterable, disable=not sys.stderr.isatty(), leave=False, **kwargs)


def _clip(model: nn.Module, config: RunConfig) -> None:
    if config.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)


# --- node classification --------------------------------------------------------------------------------------
def node_eval_mask(task: GraphTask, eval_nodes: str) -> Tensor:
    data = task.data
    if eval_nodes == "test":
        return data.test_mask
    return ~(data.train_mask | data.val_mask)  # every node outside train+val (ContraNorm/PairNorm protocol)


def train_node_level(
    model: nn.Module, task: GraphTask, config: RunConfig, device: torch.device
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    data = task.data.to(device)
    eval_mask = node_eval_mask(task, config.eval_nodes).to(device)
    optimizer = build_optimizer(config, model)
    schedule = EpochSchedule(optimizer, config, higher_is_better=True)
    best = {"val_acc": -1.0, "val_loss": math.inf}
    best_state: dict[str, Tensor] = {}
    bar = _progress(range(config.epochs), desc=f"{config.dataset} L={config.num_layers} {config.norm}")
    for epoch in bar:
        schedule.start_epoch(epoch)
        model.train()
        optimizer.zero_grad()
        logits = model_outputs(model, data)  # [N, classes]
        loss = F.cross_entropy(logits[data.train_mask], data.y[data.train_mask])
        loss.backward()
        _clip(model, config)
        optimizer.step()
        if epoch == 0:
            first_loss = loss.item()

        model.eval()
        with torch.no_grad():
            logits = model_outputs(model, data)
            correct = logits.argmax(dim=-1) == data.y
            val_loss = float(F.cross_entropy(logits[data.val_mask], data.y[data.val_mask]))
            val_acc = float(correct[data.val_mask].float().mean())
            test_acc = float(correct[eval_mask].float().mean())
        if val_acc > best["val_acc"] or (val_acc == best["val_acc"] and val_loss < best["val_loss"]):
            best = {"val_acc": val_acc, "val_loss": val_loss, "test_acc": test_acc, "best_epoch": epoch}
            best_state = copy.deepcopy(model.state_dict())
        schedule.end_epoch(epoch, val_acc)
        bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{val_acc:.3f}", test=f"{test_acc:.3f}")
    record = {
        "val_acc": best["val_acc"],
        "test_acc": best["test_acc"],
        "val_acc_last": val_acc,
        "test_acc_last": test_acc,
        "best_epoch": best["best_epoch"],
        "train_loss": loss.item(),
        "train_loss_first": first_loss,
        "num_eval_nodes": int(eval_mask.sum()),
    }
    return record, best_state


# --- graph level ------------------------------------------------------------------------------------------------
def graph_loss(task: GraphTask, outputs: Tensor, y: Tensor) -> Tensor:
    y = y.view(outputs.shape).to(outputs.dtype)  # [B, out]
    if task.task_type == "regression":
        return F.l1_loss(outputs, y)
    labelled = ~torch.isnan(y)  # OGB marks missing labels with NaN
    return F.binary_cross_entropy_with_logits(outputs[labelled], y[labelled])


def graph_metric(task: GraphTask, outputs: Tensor, y: Tensor) -> float:
    y = y.view(outputs.shape)
    if task.metric == "mae":
        return float((outputs - y).abs().mean())
    if task.metric == "rocauc":
        return float(task.evaluator.eval({"y_true": y, "y_pred": outputs})["rocauc"])
    raise ValueError(f"no graph-level metric {task.metric!r}")


@torch.no_grad()
def evaluate_graphs(model: nn.Module, loader: DataLoader, task: GraphTask, device: torch.device) -> float:
    model.eval()
    outputs, targets = [], []
    for batch in loader:
        batch = batch.to(device)
        outputs.append(model_outputs(model, batch).cpu())
        targets.append(batch.y.cpu())
    return graph_metric(task, torch.cat(outputs), torch.cat(targets))


def train_graph_level(
    model: nn.Module, task: GraphTask, config: RunConfig, device: torch.device
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    generator = torch.Generator().manual_seed(config.seed)  # shuffling fixed by the seed
    train_loader = DataLoader(task.train, batch_size=config.batch_size, shuffle=True, generator=generator)
    val_loader = DataLoader(task.val, batch_size=config.batch_size)
    test_loader = DataLoader(task.test, batch_size=config.batch_size)
    optimizer = build_optimizer(config, model)
    schedule = EpochSchedule(optimizer, config, task.higher_is_better)
    sign = 1.0 if task.higher_is_better else -1.0
    best: dict[str, Any] = {"score": -math.inf}
    best_state: dict[str, Tensor] = {}
    metric = task.metric
    bar = _progress(range(config.epochs), desc=f"{config.dataset} L={config.num_layers} {config.norm}")
    for epoch in bar:
        schedule.start_epoch(epoch)
        model.train()
        loss_sum, graphs = 0.0, 0
        for batch in train_loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            loss = graph_loss(task, model_outputs(model, batch), batch.y)
            loss.backward()
            _clip(model, config)
            optimizer.step()
            loss_sum += loss.item() * batch.num_graphs
            graphs += batch.num_graphs
        train_loss = loss_sum / graphs
        if epoch == 0:
            first_loss = train_loss
        val_value = evaluate_graphs(model, val_loader, task, device)
        test_value = evaluate_graphs(model, test_loader, task, device)
        if sign * val_value > best["score"]:
            best = {"score": sign * val_value, "val": val_value, "test": test_value, "best_epoch": epoch}
            best_state = copy.deepcopy(model.state_dict())
        schedule.end_epoch(epoch, val_value)
        bar.set_postfix(loss=f"{train_loss:.3f}", val=f"{val_value:.3f}")
    record = {
        f"val_{metric}": best["val"],
        f"test_{metric}": best["test"],
        f"val_{metric}_last": val_value,
        f"test_{metric}_last": test_value,
        "best_epoch": best["best_epoch"],
        "train_loss": train_loss,
        "train_loss_first": first_loss,
    }
    return record, best_state


# --- entry points -----------------------------------------------------------------------------------------------
def train(config: RunConfig) -> tuple[nn.Module, GraphTask, dict[str, Any]]:
    """Train one run; returns the model at its best-validation weights (eval mode), the task and the record."""
    config.validate()
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
    record.update(
        {
            "metric": task.metric,
            "num_params": sum(p.numel() for p in model.parameters()),
            "epochs_run": config.epochs,
            "wall_time_s": time.perf_counter() - start,
        }
    )
    return model, task, record


def run(config: RunConfig) -> dict[str, Any]:
    """Train one run and return its JSON-serializable record (see the module docstring for the keys).

    With ``config.probe`` the record also carries ``"layers"``: collapse metrics at every layer of the final
    (best-validation) model, from :func:`graphnorm.analysis.probe_records` (node level: the whole graph; graph
    level: a fixed sample of ``config.probe_graphs`` validation graphs). A sweep writes them to ``layers.csv``.
    """
    model, task, record = train(config)
    if config.probe:
        from graphnorm.analysis.probe import evaluation_sample, probe_records

        start = time.perf_counter()
        model = model.to("cpu")
        if task.level == "node":
            data, split = task.data, "all"
        else:
            data, split = evaluation_sample(task.val, num_graphs=config.probe_graphs, seed=0), "val_sample"
        record["layers"] = probe_records(model, data, split=split)
        record["probe_time_s"] = time.perf_counter() - start
    return record
