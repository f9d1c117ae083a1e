"""One run from config to record: :func:`train` (the trained model, its task and the record) and :func:`run` (the
record alone, with the final collapse probe), the entry points ``graphnorm train`` and every sweep call.

A run validates its config, seeds every random generator, loads the task (:mod:`graphnorm.train.loaders`), builds the
registered model (:func:`graphnorm.models.build_model`) and trains it with the node-level loop
(:mod:`graphnorm.train.node_level`) or the graph-level one (:mod:`graphnorm.train.graph_level`). The record's keys:
:mod:`graphnorm.train.record`. A model plugs in through its registration: how it is called on a batch
(:func:`graphnorm.models.model_outputs`), and optional methods the optimizer asks for
(:mod:`graphnorm.train.schedules`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch
from torch import nn
from torch_geometric import seed_everything

from graphnorm.config import RunConfig, model_keywords
from graphnorm.data import GraphTask
from graphnorm.files import OutputPathError, check_output_path
from graphnorm.models import build_model
from graphnorm.train.checkpoints import CheckpointError, checkpoint_lock, prepare_checkpoint_dir
from graphnorm.train.distributed import check_data_parallel, process_group, rank_device
from graphnorm.train.graph_level import train_graph_level
from graphnorm.train.loaders import prepare_task, probe_sample
from graphnorm.train.model_file import model_file_path, save_model_file
from graphnorm.train.node_level import train_node_level
from graphnorm.train.ranks import Ranks, launched_ranks
from graphnorm.train.sync_norms import synchronize_norms
from graphnorm.train.tensorboard_log import check_tensorboard_dirs, open_tensorboard, require_tensorboard


def resolve_device(name: str) -> torch.device:
    """The torch device of ``config.device``: ``"auto"`` is CUDA when available, else the CPU. (``"cuda"`` without
    CUDA is refused by config validation, :func:`graphnorm.config.check_device_available`.)"""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def check_run_outputs(config: RunConfig) -> None:
    """Every place the run writes, checked before its data loads (not when training ends): ``checkpoint_dir`` accepts
    files and the run's checkpoint and model file may be written there (:class:`CheckpointError`), and the
    TensorBoard folders (:func:`graphnorm.train.tensorboard_log.check_tensorboard_dirs`:
    :class:`graphnorm.files.OutputPathError`); each a one-line error naming the path and why."""
    if prepare_checkpoint_dir(config) is not None:
        try:
            check_output_path(model_file_path(config), "the run's model file")
        except OutputPathError as error:
            raise CheckpointError(f"{error}; set checkpoint_dir to another folder") from None
    check_tensorboard_dirs(config)


def train(config: RunConfig) -> tuple[nn.Module, GraphTask, dict[str, Any]]:
    """Train one run; returns the model at its best-validation weights (eval mode), the task and the record. With
    ``checkpoint_dir`` the model file for ``graphnorm predict`` is written as well
    (:mod:`graphnorm.train.model_file`), and no other process may run the same run meanwhile
    (:func:`graphnorm.train.checkpoints.checkpoint_lock`). Raises ``ValueError`` for an invalid config, and a one-line
    error for an output that cannot be written (:func:`check_run_outputs`), both before any data loads.

    Under ``torchrun`` a graph-level run trains data-parallel (:mod:`graphnorm.train.distributed`): rank 0 checks and
    writes every output and holds the lock, the other ranks write nothing."""
    config.validate()
    if config.tensorboard_dir is not None:
        require_tensorboard()  # before loading and preprocessing, not after
    start = time.perf_counter()
    with process_group(config.device) as ranks:
        if not ranks.writes:
            return _train(dataclasses.replace(config, tensorboard_dir=None), start, ranks)  # no curves from rank > 0
        check_run_outputs(config)
        with checkpoint_lock(config):
            return _train(config, start, ranks)


def _train(config: RunConfig, start: float, ranks: Ranks) -> tuple[nn.Module, GraphTask, dict[str, Any]]:
    """:func:`train` once its outputs are checked (``start``: its ``perf_counter`` at the start)."""
    seed_everything(config.seed)  # random, numpy, torch
    device = rank_device(resolve_device(config.device), ranks)
    task = prepare_task(config)
    check_data_parallel(config, task.level, ranks)
    seed_everything(config.seed)  # the model's initialization must not depend on what loading consumed
    model = build_model(config.model, task, **model_keywords(config, task.level)).to(device)
    if ranks.active:
        synchronize_norms(model)
        if ranks.rank > 0:  # each rank its own dropout masks; rank 0 draws on as one process does
            seed_everything(config.seed + ranks.rank)
    if task.level == "node":
        record, best_state = train_node_level(model, task, config, device)
    else:
        record, best_state = train_graph_level(model, task, config, device)
    model.load_state_dict(best_state)
    model.eval()
    if config.checkpoint_dir is not None and ranks.writes:
        save_model_file(model_file_path(config), config, task, model, record)
    if ranks.active:
        record["world_size"] = ranks.world_size
    record.update(
        {
            "metric": task.metric,
            "num_params": sum(p.numel() for p in model.parameters()),
            **task.stats,
            "wall_time_s": time.perf_counter() - start,
        }
    )
    return model, task, record


def run(config: RunConfig) -> dict[str, Any]:
    """Train one run and return its JSON-serializable record (:mod:`graphnorm.train.record`).

    With ``config.probe`` the record also carries ``"layers"``: collapse metrics at every layer of the final
    (best-validation) model, from :func:`graphnorm.analysis.probe_records` on
    :func:`graphnorm.train.loaders.probe_sample`, also written to TensorBoard's ``collapse`` part with
    ``tensorboard_dir``.
    """
    model, task, record = train(config)
    if config.probe and launched_ranks().writes:  # the other ranks' records are not kept
        from graphnorm.analysis.probe import probe_records

        start = time.perf_counter()
        model = model.to("cpu")
        data, split = probe_sample(model, task, config)
        data = data.to("cpu")  # training may have moved the task's graph to the GPU (PyG's Data.to works in place)
        record["layers"] = probe_records(model, data, split=split, precision=config.probe_precision)
        record["probe_time_s"] = time.perf_counter() - start
        board = open_tensorboard(config, purge_step=0, part="collapse")  # layer steps, apart from the epochs
        if board is not None:
            board.probe(record["layers"])
            board.close()
    return record
