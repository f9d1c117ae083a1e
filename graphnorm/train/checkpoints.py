"""Checkpoints of graph-level runs and the random state they carry: ``<checkpoint_dir>/<run_id>.pt`` written
atomically after every epoch (:func:`save_checkpoint`), read back with ``weights_only`` (:func:`load_checkpoint`),
and resumed only by the run that wrote it (:func:`resume_from_checkpoint`: its saved config must match, else
:class:`CheckpointError` names the differing keys), and written by one process at a time (:func:`checkpoint_lock`)."""

from __future__ import annotations

import contextlib
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from graphnorm.config import NOT_HASHED, RunConfig, config_run_id
from graphnorm.files import (
    OutputPathError,
    atomic_write,
    check_output_dir,
    check_output_path,
    hold_lock,
    remove_leftover_temporary_files,
)
from graphnorm.train.distributed import Ranks


def checkpoint_path(config: RunConfig) -> Path | None:
    """``<checkpoint_dir>/<run_id>.pt`` (the sweep's run id: a hash of the full config), or None."""
    if config.checkpoint_dir is None:
        return None
    return Path(config.checkpoint_dir).expanduser() / f"{config_run_id(config)}.pt"


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    """Every random state a run draws from, as tensors and plain Python values (loadable with weights_only)."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "loader": generator.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    """Restore the random states :func:`rng_state` saved (CUDA's only where CUDA is available)."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy = state["numpy"]
    keys = numpy["keys"].numpy().astype(np.uint32)
    np.random.set_state((numpy["name"], keys, numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"]))
    generator.set_state(state["loader"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed or written; the one-line message names the file and what to do."""


# What every graphnorm checkpoint holds; newer ones add "config", and "ema" when the run averages its weights.
CHECKPOINT_KEYS = ("model", "schedule", "rng", "state")
# Data-parallel runs add the number of processes and the random states of ranks 1.. ("rng" is rank 0's).
WORLD_SIZE_KEY, RANK_RNG_KEY = "world_size", "rank_rng"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """``torch.save`` through :func:`graphnorm.files.atomic_write`: a kill never leaves a partial checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write(path, lambda handle: torch.save(state, handle), "checkpoint")
    except OutputPathError as error:  # a link, a folder or a device where the file goes
        raise CheckpointError(str(error)) from None
    except (OSError, RuntimeError) as error:  # a full disk (torch's zip writer raises RuntimeError), a read-only folder
        reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
        raise CheckpointError(
            f"cannot write checkpoint {path} ({reason}; {shutil.disk_usage(path.parent).free} bytes free there); "
            "the previous checkpoint is intact: free space or make checkpoint_dir writable, then run again to resume"
        ) from error


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at ``path`` (``weights_only=True``: plain tensors and containers only, never code)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        # ``from None``: torch's own message suggests weights_only=False, which would run code from the file.
        size = path.stat().st_size if path.exists() else 0
        reason = "empty file" if size == 0 else f"{size} bytes, torch.load raised {type(error).__name__}"
        raise CheckpointError(
            f"checkpoint {path} is unreadable or not a graphnorm checkpoint ({reason}); "
            "delete it to start the run over, or set checkpoint_dir to another folder"
        ) from None


def prepare_checkpoint_dir(config: RunConfig) -> Path | None:
    """The run's checkpoint path, after checking that its folder accepts files and that the checkpoint may be
    written there (:func:`graphnorm.files.check_output_path`: a regular file or nothing), before any training, and
    removing the temporary files of saves that were killed; None without ``checkpoint_dir``."""
    path = checkpoint_path(config)
    if path is None:
        return None
    try:
        check_output_dir(path.parent, f"checkpoint_dir {config.checkpoint_dir}")
        check_output_path(path, "the run's checkpoint")
    except OutputPathError as error:
        raise CheckpointError(f"{error}; set checkpoint_dir to a writable folder") from None
    remove_leftover_temporary_files(path.parent, path.name, keep_live_writers=True)
    return path


@contextlib.contextmanager
def checkpoint_lock(config: RunConfig) -> Iterator[None]:
    """Hold ``<checkpoint_dir>/.<run_id>.lock`` while inside (nothing without ``checkpoint_dir``): a second start of
    the same run (same config and checkpoint_dir: two terminals, two sweeps sharing checkpoint_dir) would resume from
    and overwrite the checkpoint of the first. :class:`CheckpointError` when another process holds it."""
    path = checkpoint_path(config)
    if path is None:
        yield
        return
    lock = path.with_name(f".{path.stem}.lock")
    busy = (
        f"another run of the same config is writing {path} (it holds {lock}): wait for it to end, or set another "
        "checkpoint_dir"
    )
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(hold_lock(lock, busy, "the run's checkpoint lock", remove=True))
    except OutputPathError as error:
        raise CheckpointError(str(error)) from None
    with stack:
        yield


def config_differences(saved: dict[str, Any], config: RunConfig) -> list[str]:
    """``key (checkpoint A, this run B)`` for every config value that changes what a run computes.

    Ignored: the keys the run id leaves out (``data_root``, ``checkpoint_dir``: where files live), and keys that a
    later graphnorm version added, when this run keeps their default. ``epochs`` and ``max_train_minutes`` are
    compared too: a run cannot be extended from a checkpoint, because its learning-rate schedule depends on
    ``epochs`` and a finished run's best-epoch selection and time budget would no longer be those of the record.
    """
    defaults = RunConfig().to_dict()
    differences = []
    for key, value in sorted(config.to_dict().items()):
        before = saved.get(key, defaults.get(key))
        if key not in NOT_HASHED and before != value:
            differences.append(f"{key} (checkpoint {before!r}, this run {value!r})")
    return differences


def resume_from_checkpoint(
    path: Path,
    config: RunConfig,
    model: nn.Module,
    schedule: Any,
    ema: nn.Module | None,
    generator: torch.Generator,
    ranks: Ranks | None = None,
) -> dict[str, Any]:
    """Load the checkpoint of this very run into the model, optimizer, EMA and RNGs; return its loop state. Under
    data-parallel training (``ranks``) it must have been written by as many processes, and each rank takes back its
    own random state."""
    ranks = Ranks() if ranks is None else ranks
    saved = load_checkpoint(path)
    advice = "delete it to start the run over, or set checkpoint_dir to another folder"
    if not isinstance(saved, dict) or not all(key in saved for key in CHECKPOINT_KEYS):
        raise CheckpointError(
            f"checkpoint {path} is unreadable or not a graphnorm checkpoint (no model state); {advice}"
        )
    if isinstance(saved.get("config"), dict):
        differences = config_differences(saved["config"], config)
        if differences:
            raise CheckpointError(f"checkpoint {path} belongs to another run: {', '.join(differences)}; {advice}")
    written_by = int(saved.get(WORLD_SIZE_KEY, 1))
    if written_by != ranks.world_size:
        raise CheckpointError(
            f"checkpoint {path} was written by {written_by} training process(es), this run has {ranks.world_size}: "
            f"resume it with {written_by} (torchrun --nproc-per-node {written_by}), or {advice}"
        )
    try:
        model.load_state_dict(saved["model"])
        schedule.load_state_dict(saved["schedule"])
        if ema is not None:
            ema.load_state_dict(saved["ema"])
        set_rng_state(saved["rng"] if ranks.rank == 0 else saved[RANK_RNG_KEY][ranks.rank - 1], generator)
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:
        # Checkpoints written before the config was saved, or by a graphnorm version with another model.
        first_line = (str(error).splitlines() or [type(error).__name__])[0].rstrip(":")
        raise CheckpointError(
            f"checkpoint {path} does not match this run's model or optimizer ({first_line.strip()}): it was written "
            f"by another config or graphnorm version; {advice}"
        ) from None
    state = saved["state"]
    state.setdefault("step_time_s", 0.0)  # checkpoints written before the throughput was recorded
    state.setdefault("graphs_trained", 0)
    state.setdefault("history", [])  # checkpoints written before the learning curve was recorded
    return state
