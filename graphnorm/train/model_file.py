"""The trained-model file: everything ``graphnorm predict`` needs to score new graphs, in one self-describing file.

A run with ``checkpoint_dir`` writes ``<checkpoint_dir>/<run_id>.model.pt`` when it ends (graph level: beside its
resume checkpoint ``<run_id>.pt``, which holds the last epoch's weights and the optimizer state and is not used for
predictions). :func:`save_model_file` writes it, :func:`load_model_file` rebuilds the model from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from graphnorm.config import RunConfig, model_keywords
from graphnorm.data import GraphTask
from graphnorm.models import build_model
from graphnorm.train.checkpoints import checkpoint_path, save_checkpoint

MODEL_FORMAT = "graphnorm-model"
MODEL_VERSION = 1
TASK_KEYS = ("name", "level", "task_type", "metric", "num_features", "num_outputs", "atom_encoder", "target_names")


class ModelFileError(ValueError):
    """A file that is not a readable graphnorm model file; the one-line message names it."""


def model_file_path(config: RunConfig) -> Path:
    """``<checkpoint_dir>/<run_id>.model.pt``, beside the run's resume checkpoint."""
    checkpoint = checkpoint_path(config)
    return checkpoint.with_name(checkpoint.name.removesuffix(".pt") + ".model.pt")


def save_model_file(path: Path, config: RunConfig, task: GraphTask, model: nn.Module, record: dict[str, Any]) -> None:
    """Write the model file of a finished run (atomically, like a checkpoint); ``model`` holds the weights the
    record's test metric was computed with.

    The file holds plain containers and tensors only (``torch.load(weights_only=True)``): ``format``
    (``"graphnorm-model"``) and ``version`` (1); ``config``: the run's full config (``RunConfig.to_dict()``), from
    which the model is rebuilt; ``task``: what the model predicts (dataset ``name``, ``level``, ``task_type``: binary
    logits are predicted as sigmoid probabilities, regression as values; ``metric``, ``num_features``,
    ``num_outputs``, ``atom_encoder`` and ``target_names``, one per output column); ``weights``: which weights
    ``model`` holds, ``"best-validation"`` or ``"best-validation EMA"`` with ``ema_decay``; ``model``: their
    ``state_dict``; ``scores``: the record's ``val_<metric>``, ``test_<metric>`` and ``best_epoch``.
    """
    task_info = {key: getattr(task, key) for key in TASK_KEYS}
    if task_info["target_names"] is None:
        task_info["target_names"] = [f"{task.name}_{i}" for i in range(task.num_outputs)]
    metric = task.metric
    save_checkpoint(
        path,
        {
            "format": MODEL_FORMAT,
            "version": MODEL_VERSION,
            "config": config.to_dict(),
            "task": task_info,
            "weights": "best-validation EMA" if config.ema_decay is not None else "best-validation",
            "model": {key: value.detach().cpu() for key, value in model.state_dict().items()},
            "scores": {key: record.get(key) for key in (f"val_{metric}", f"test_{metric}", "best_epoch")},
        },
    )
    print(f"model saved to {path} (for graphnorm predict)", flush=True)


def load_model_file(path: str | Path, device: str = "cpu") -> tuple[nn.Module, RunConfig, GraphTask]:
    """The model (eval mode, on ``device``), its run config and a data-less :class:`GraphTask` describing its
    outputs, from a file written by :func:`save_model_file`. :class:`ModelFileError` for a missing, unreadable or
    foreign file (a resume checkpoint is named as such) or another format version."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file {path} not found")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch's message would suggest weights_only=False, unsafe here
        raise ModelFileError(
            f"{path} is not a readable graphnorm model file (torch.load: {type(error).__name__})"
        ) from None
    if not isinstance(saved, dict) or saved.get("format") != MODEL_FORMAT:
        hint = ""
        if isinstance(saved, dict) and "schedule" in saved:
            hint = f": it is a resume checkpoint; give the {path.name.removesuffix('.pt')}.model.pt written beside it"
        raise ModelFileError(f"{path} is not a graphnorm model file{hint}")
    if saved.get("version") != MODEL_VERSION:
        raise ModelFileError(
            f"{path} has model-file version {saved.get('version')!r}; this graphnorm reads {MODEL_VERSION}"
        )
    config = RunConfig.from_dict(saved["config"], check_device=False)
    task = GraphTask(**{key: saved["task"][key] for key in TASK_KEYS})
    model = build_model(config.model, task, **model_keywords(config, task.level))
    model.load_state_dict(saved["model"])
    return model.to(device).eval(), config, task
