"""Checkpoints that cannot be resumed say so in one line: another config's checkpoint, an old-format checkpoint of
another model, an unreadable file, an unwritable ``checkpoint_dir``; a kill during a save never leaves a corrupt
``.pt``, and its leftover ``.tmp`` file is removed on resume."""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import time
import traceback
from pathlib import Path

import pytest
import torch

from graphnorm.config import RunConfig
from graphnorm.train import run
from graphnorm.train.checkpoints import CheckpointError, checkpoint_path, load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_zinc(data_root: Path, checkpoint_dir: Path, **overrides) -> RunConfig:
    values = dict(
        dataset="zinc",
        data_root=str(data_root),
        limit_graphs=40,
        num_layers=2,
        hidden_channels=16,
        epochs=2,
        batch_size=20,
        probe=False,
        checkpoint_dir=str(checkpoint_dir),
    )
    values.update(overrides)
    return RunConfig.from_dict(values)


@pytest.fixture(scope="module")
def finished(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, Path, dict]:
    """A finished two-epoch run with its checkpoint, and its record."""
    config = tiny_zinc(data_root, tmp_path_factory.mktemp("finished"))
    record = run(config)
    return config, checkpoint_path(config), record


def planted(data_root: Path, tmp_path: Path, source: Path, **overrides) -> RunConfig:
    """A config whose checkpoint file is a copy of ``source`` (another run's checkpoint, renamed)."""
    config = tiny_zinc(data_root, tmp_path, **overrides)
    checkpoint_path(config).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, checkpoint_path(config))
    return config


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        ({"num_layers": 3, "hidden_channels": 24}, ["hidden_channels", "num_layers"]),  # another architecture
        ({"lr": 0.005}, ["lr"]),  # same architecture: the weights would load and resume the wrong run
        ({"epochs": 4}, ["epochs"]),  # extending a finished run is a different run (schedule, selection)
    ],
)
def test_checkpoint_of_another_config_is_named_in_one_line(
    data_root: Path, tmp_path: Path, finished, overrides: dict, keys: list[str]
) -> None:
    _, source, _ = finished
    config = planted(data_root, tmp_path, source, **overrides)
    with pytest.raises(CheckpointError) as error:
        run(config)
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert str(checkpoint_path(config)) in message and "delete it" in message and "checkpoint_dir" in message
    for key in keys:
        assert key in message
    assert "size mismatch" not in message


def test_checkpoint_of_the_same_config_elsewhere_resumes(data_root: Path, tmp_path: Path, finished) -> None:
    """``data_root`` and ``checkpoint_dir`` say where files live, not what is computed: a moved checkpoint resumes."""
    config, source, record = finished
    moved = planted(data_root, tmp_path, source)
    assert moved.checkpoint_dir != config.checkpoint_dir
    again = run(moved)
    assert again["resumed_at_epoch"] == 2 and again["test_mae"] == record["test_mae"]


def test_old_format_checkpoint_of_another_model_gets_a_clear_message(data_root: Path, tmp_path: Path, finished) -> None:
    _, source, _ = finished
    old = load_checkpoint(source)
    del old["config"]  # checkpoints written before the config was saved
    config = tiny_zinc(data_root, tmp_path, num_layers=3, hidden_channels=24)
    save_checkpoint(checkpoint_path(config), old)
    with pytest.raises(CheckpointError) as error:
        run(config)
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert str(checkpoint_path(config)) in message and "does not match" in message and "delete it" in message


@pytest.mark.parametrize(
    "content",
    [random.Random(0).randbytes(4096), b"", b"hello\n", "truncated", "plain tensor"],
    ids=["random-bytes", "empty", "text", "truncated", "not-a-graphnorm-checkpoint"],
)
def test_unreadable_checkpoint_names_the_file_without_unsafe_advice(
    data_root: Path, tmp_path: Path, finished, content
) -> None:
    _, source, _ = finished
    config = tiny_zinc(data_root, tmp_path)
    path = checkpoint_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    if content == "truncated":
        path.write_bytes(source.read_bytes()[:3000])
    elif content == "plain tensor":
        torch.save({"weights": torch.ones(3)}, path)
    else:
        path.write_bytes(content)
    with pytest.raises(CheckpointError) as error:
        run(config)
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert str(path) in message and "not a graphnorm checkpoint" in message and "delete it" in message
    printed = "".join(traceback.format_exception(error.value))  # what a user sees, chained errors included
    assert "weights_only" not in printed and "weights_only" not in message


def _save_forever(path: Path) -> None:
    """Save a large checkpoint again and again, each time with a new value, until killed."""
    step = 0
    while True:
        save_checkpoint(path, {"step": step, "weights": torch.full((4_000_000,), float(step))})
        step += 1


def test_kill_during_save_leaves_a_whole_checkpoint_and_the_tmp_is_removed_on_resume(
    data_root: Path, tmp_path: Path, finished
) -> None:
    config, source, record = finished
    # 1. kill -9 a process in the middle of saving: the .pt is always a whole checkpoint (old or new).
    path = tmp_path / "kill" / "run.pt"
    for delay in (0.35, 0.5, 0.65):
        child = multiprocessing.get_context("fork").Process(target=_save_forever, args=(path,))
        child.start()
        time.sleep(delay)
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        saved = load_checkpoint(path)
        assert bool((saved["weights"] == saved["step"]).all())
    # 2. a resumed run removes the leftover temporary files of its checkpoint (the writer is dead).
    resumed = planted(data_root, tmp_path / "resume", source)
    target = checkpoint_path(resumed)
    stale = target.with_name(f".{target.name}.{_dead_pid()}.tmp")
    stale.write_bytes(b"partial")
    other_run = target.with_name(f".other.pt.{_dead_pid()}.tmp")
    other_run.write_bytes(b"partial")
    assert run(resumed)["test_mae"] == record["test_mae"]
    assert not stale.exists() and other_run.exists()  # only this run's leftovers


def _dead_pid() -> int:
    child = multiprocessing.get_context("fork").Process(target=int)
    child.start()
    child.join()
    return child.pid


def test_unwritable_checkpoint_dir_fails_before_training(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = tiny_zinc(data_root, blocker / "checkpoints")
    with pytest.raises(CheckpointError) as error:
        run(config)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "checkpoint_dir" in message and str(blocker) in message
    assert "epoch" not in capsys.readouterr().out  # no epoch was trained (and lost)


def test_full_disk_while_checkpointing_names_the_file(data_root: Path, tmp_path: Path) -> None:
    """torch.save on a full disk raises a RuntimeError from its zip writer ('unexpected pos 128 vs 0'): the run
    stops with one line naming the checkpoint and the free space, and no partial checkpoint or .tmp is left."""
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)]).returncode:
        pytest.skip("needs a small tmpfs (root with mount rights) to fill a disk")
    try:
        usage = shutil.disk_usage(small)
        (small / "filler").write_bytes(b"x" * (usage.free - 8192))  # room for the writability check, not a save
        config = tiny_zinc(data_root, small / "checkpoints")
        with pytest.raises(CheckpointError) as error:
            run(config)
        left = sorted(p.name for p in (small / "checkpoints").iterdir())
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=True)  # lazy: the failed writer may hold a file
    message = str(error.value)
    assert len(message.splitlines()) == 1 and str(checkpoint_path(config)) in message and "free" in message
    assert left == []
