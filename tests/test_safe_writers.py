"""Every writer writes only regular files inside the folder the user named: never through a symbolic link (the
target itself, or one planted where its temporary or lock file goes), never onto a device, FIFO, socket or folder,
never onto a file another writer holds. A refusal is one line naming the path and why, given before any training,
and it leaves every file as it was. A hard-linked target is replaced by a new file: its other name keeps the old
bytes.

Property tests: every writer (the atomic writers, checkpoints, the model file, the learning curve, the sweep's
files, lock and logs, ``train --out``, ``predict --out``) x every kind of output path (:data:`FILE_KINDS`, and
:data:`FOLDER_KINDS` for the folders written into). Devices are made with ``mknod`` in the test's own folder, only
as root, as the null device; no real ``/dev`` node is ever a target.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pickle
import signal
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

import graphnorm.files as files
import graphnorm.predict
import graphnorm.sweep.command
import graphnorm.train
import graphnorm.train.command
import graphnorm.train.loop
from graphnorm.cli import main
from graphnorm.config import RunConfig, config_run_id
from graphnorm.sweep import runner
from graphnorm.sweep.grid import expand_grid
from graphnorm.sweep.tables import atomic_write_csv
from graphnorm.train.checkpoints import CheckpointError, checkpoint_path, prepare_checkpoint_dir, save_checkpoint
from graphnorm.train.model_file import model_file_path

OLD = b"old content\n"
VICTIM = b"the user's own file, which no writer may change\n"
UNWRITABLE = Path("/proc/graphnorm-no-such-folder")  # nobody, root included, can create a folder there
HISTORY = [{"epoch": e, "train_loss": 1.0 - e / 10, "val_acc": 0.5, "test_acc": 0.5} for e in range(2)]
SWEEP = {"name": "t", "base": {"dataset": "cora", "epochs": 1}, "grid": {"seed": [0]}}
RUN_FN = "test_safe_writers:tiny_run"
BLOCKED_S = 10  # seconds a writer may take before it counts as blocked

# Kinds of a file path: what a writer must write (regular file, missing, hard link; a symbolic link planted where
# the temporary file goes is removed, never followed) and what it must refuse.
WRITTEN_KINDS = ("missing", "regular", "hard_link", "planted_temporary_link")
REFUSED_KINDS = (
    "symlink_to_file",
    "dangling_symlink",
    "symlink_to_folder",
    "fifo",
    "socket",
    "char_device",
    "directory",
    "unwritable_folder",
)
FILE_KINDS = WRITTEN_KINDS + REFUSED_KINDS
# Kinds of a folder path: a folder the user named may be a symbolic link to a folder; one that graphnorm makes
# inside it may not.
FOLDER_KINDS = (
    "missing",
    "directory",
    "symlink_to_folder",
    "regular",
    "symlink_to_file",
    "dangling_symlink",
    "fifo",
    "socket",
    "char_device",
    "unwritable_folder",
)


def tiny_run(config: RunConfig) -> dict:
    """A sweep's run function that trains nothing: a record with a metric (for the summary) and a curve."""
    return {"test_acc": 0.5, "history": HISTORY}


class StartedError(Exception):
    """Raised where a run would load its data and train: the run got past every check of its outputs."""


# --- making the nodes -------------------------------------------------------------------------------------------


def make_node(kind: str, path: Path, victim: Path) -> None:
    """Put a node of ``kind`` at ``path`` (its folder made). Links point at ``victim`` (a user's file) or at its
    folder; ``hard_link`` makes ``path`` a second name of a file holding :data:`OLD` (``<path>.other``)."""
    if kind == "unwritable_folder":
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "missing":
        return
    if kind == "regular":
        path.write_bytes(OLD)
    elif kind == "hard_link":
        other = path.with_name(path.name + ".other")
        other.write_bytes(OLD)
        os.link(other, path)
    elif kind == "planted_temporary_link":
        files.temporary_path(path).symlink_to(victim)
    elif kind == "symlink_to_file":
        path.symlink_to(victim)
    elif kind == "dangling_symlink":
        path.symlink_to(victim.parent / "nowhere")
    elif kind == "symlink_to_folder":
        (victim.parent / "linked").mkdir(exist_ok=True)
        path.symlink_to(victim.parent / "linked", target_is_directory=True)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        make_socket(path)
    elif kind == "char_device":
        try:  # the null device's numbers: even a write that got through would change nothing
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except (PermissionError, OSError) as error:
            pytest.skip(f"cannot make a character device here ({error.strerror})")
    elif kind == "directory":
        path.mkdir()
        (path / "inside.txt").write_bytes(OLD)
    else:
        raise AssertionError(kind)


def make_socket(path: Path) -> None:
    """A Unix socket file at ``path``, bound from its folder (a socket's path must stay under about 100 bytes)."""
    cwd = Path.cwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)  # the file stays when the socket closes
    finally:
        os.chdir(cwd)


def snapshot(path: Path) -> tuple:
    """What is at ``path``, not following a link: its kind and its bytes, link target or listing."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ("missing",)
    if stat.S_ISLNK(info.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISREG(info.st_mode):
        return ("file", path.read_bytes())
    if stat.S_ISDIR(info.st_mode):
        return ("folder", sorted(os.listdir(path)))
    return ("node", stat.S_IFMT(info.st_mode), info.st_rdev)


def temporary_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".*.tmp")) if folder.is_dir() else []


# --- the writers ----------------------------------------------------------------------------------------------


@dataclass
class Env:
    """A test's folders: ``root`` the output folder the user named (``/proc/...`` for ``unwritable_folder``), and
    the pytest fixtures a writer needs."""

    root: Path
    tmp: Path
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture


@dataclass
class Writer:
    """An entry point that writes ``target(root)``: ``write(env)`` returns None when it wrote (or, for the checks
    before a run, got as far as the training) and the one-line error when it refused. ``content``: whether it
    writes the target's bytes (a lock, a check before training do not)."""

    target: Callable[[Path], Path]
    write: Callable[[Env], str | None]
    content: bool = True


def api(call: Callable[[Env], object]) -> Callable[[Env], str | None]:
    """A library call as a writer: an exception is its refusal, which must be one line."""

    def write(env: Env) -> str | None:
        try:
            call(env)
        except StartedError:
            return None
        except (OSError, ValueError, RuntimeError) as error:
            return str(error)
        return None

    return write


def cli(args: Callable[[Env], list[str]], fake: str | None = None) -> Callable[[Env], str | None]:
    """A command as a writer: exit status 0 when it wrote, 2 with one line on stderr when it refused. ``fake``:
    the work it does, replaced (train: a record with a curve; predict: a CSV; nothing else runs)."""

    def write(env: Env) -> str | None:
        calls = fake_work(env.monkeypatch)
        code = main(args(env))
        err = env.capsys.readouterr().err
        if code == 0:
            return None
        assert code == 2, err
        assert not calls, f"the command started its work before refusing: {err}"
        return err.strip()

    return write


def fake_work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Training and scoring replaced by stand-ins that write only their outputs; the list of calls made."""
    calls: list[str] = []

    def fake_run(config: RunConfig) -> dict:
        calls.append("train")
        return {"test_acc": 0.5, "history": HISTORY}

    def fake_predict_csv(model, input_csv, out, *args):
        calls.append("predict")
        files.atomic_write_text(out, "line,smiles,valid\n")
        return {"rows": 0, "invalid": 0, "seconds": 0.0}

    monkeypatch.setattr(graphnorm.train, "run", fake_run)
    monkeypatch.setattr(graphnorm.predict, "predict_csv", fake_predict_csv)
    monkeypatch.setattr(graphnorm.train.command, "load_run_data", lambda config: None)
    return calls


def run_config(env: Env, **values) -> Path:
    """A run config file (Cora, one epoch; its data never loads here) with ``values``; its path."""
    path = env.tmp / "run.yaml"
    path.write_text(yaml.safe_dump({"dataset": "cora", "epochs": 1, **values}))
    return path


def sweep_args(env: Env, out: Path, **base) -> list[str]:
    path = env.tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump({**SWEEP, "base": {**SWEEP["base"], **base}}))
    return ["sweep", str(path), "--out", str(out), "--run-fn", RUN_FN, "--executor", "serial", "--no-plots"]


SWEEP_RUN_ID = config_run_id(expand_grid(SWEEP, lambda message: None)[0])
RUN_CONFIG = RunConfig.from_dict({"dataset": "cora", "epochs": 1})


def checkpointed(root: Path) -> RunConfig:
    return RunConfig.from_dict({"dataset": "cora", "epochs": 1, "checkpoint_dir": str(root)})


def train_until_data(env: Env, config: RunConfig) -> None:
    """``graphnorm.train.train(config)`` up to the data loading (:class:`StartedError`): the checks before training."""

    def started(*args, **kwargs):
        raise StartedError

    env.monkeypatch.setattr(graphnorm.train.loop, "prepare_task", started)
    graphnorm.train.loop.train(config)


def hold_sweep_lock(env: Env) -> None:
    with runner._sweep_lock(env.root):
        pass


def save_curve(env: Env) -> None:
    graphnorm.sweep.command.save_learning_curve(HISTORY, RUN_CONFIG, env.root / "curve.png")


FILE_WRITERS = {
    "atomic_write": Writer(
        lambda root: root / "data.bin",
        api(lambda env: files.atomic_write(env.root / "data.bin", lambda h: h.write(b"new"))),
    ),
    "atomic_write_text": Writer(
        lambda root: root / "notes.txt", api(lambda env: files.atomic_write_text(env.root / "notes.txt", "new"))
    ),
    "atomic_write_csv": Writer(
        lambda root: root / "table.csv",
        api(lambda env: atomic_write_csv(env.root / "table.csv", pd.DataFrame({"a": [1]}))),
    ),
    "save_checkpoint": Writer(
        lambda root: root / "run.pt", api(lambda env: save_checkpoint(env.root / "run.pt", {"w": torch.zeros(2)}))
    ),
    "learning curve figure": Writer(lambda root: root / "curve.png", api(save_curve)),
    "sweep result file": Writer(
        lambda root: root / "results" / "r1.json",
        api(lambda env: runner.write_result(env.root, {"run_id": "r1", "status": "ok"})),
    ),
    "sweep run log": Writer(
        lambda root: root / "logs" / f"{config_run_id(RUN_CONFIG)}.log",
        api(lambda env: runner.execute_run(tiny_run, RUN_CONFIG.to_dict(), str(env.root))),
    ),
    "sweep lock": Writer(lambda root: root / ".sweep.lock", api(hold_sweep_lock), content=False),
    "checkpoint folder check": Writer(
        lambda root: checkpoint_path(checkpointed(root)),
        api(lambda env: prepare_checkpoint_dir(checkpointed(env.root))),
        content=False,
    ),
    "train: its checkpoint": Writer(
        lambda root: checkpoint_path(checkpointed(root)),
        api(lambda env: train_until_data(env, checkpointed(env.root))),
        content=False,
    ),
    "train: its model file": Writer(
        lambda root: model_file_path(checkpointed(root)),
        api(lambda env: train_until_data(env, checkpointed(env.root))),
        content=False,
    ),
    "graphnorm train --out": Writer(
        lambda root: root / "record.json",
        cli(lambda env: ["train", str(run_config(env)), "--out", str(env.root / "record.json")]),
    ),
    "graphnorm train --out: learning curve": Writer(
        lambda root: root / "record.json.learning_curve.png",
        cli(lambda env: ["train", str(run_config(env)), "--out", str(env.root / "record.json")]),
    ),
    "graphnorm train: checkpoint": Writer(
        lambda root: checkpoint_path(checkpointed(root)),
        cli(lambda env: ["train", str(run_config(env, checkpoint_dir=str(env.root)))]),
        content=False,
    ),
    "graphnorm train: model file": Writer(
        lambda root: model_file_path(checkpointed(root)),
        cli(lambda env: ["train", str(run_config(env, checkpoint_dir=str(env.root)))]),
        content=False,
    ),
    "graphnorm predict --out": Writer(
        lambda root: root / "predictions.csv",
        cli(
            lambda env: [
                "predict",
                str(env.tmp / "model.pt"),
                str(env.tmp / "mols.csv"),
                "--out",
                str(env.root / "predictions.csv"),
            ]
        ),
    ),
    **{
        f"graphnorm sweep: {name}": Writer(
            lambda root, name=name: root / name,
            cli(lambda env: sweep_args(env, env.root)),
            content=name != ".sweep.lock",
        )
        for name in (
            "runs.csv",
            "epochs.csv",
            "summary.md",
            "sweep.yaml",
            f"results/{SWEEP_RUN_ID}.json",
            f"logs/{SWEEP_RUN_ID}.log",
            ".sweep.lock",
        )
    },
}


@pytest.fixture(autouse=True)
def _never_hang():
    """A writer that opens a FIFO for writing waits for a reader forever: fail the test after a while instead."""

    def timeout(signum, frame):
        raise TimeoutError("the writer blocked (opened a FIFO for writing?)")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(BLOCKED_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def env(tmp_path, monkeypatch, capsys) -> Env:
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "victim.txt").write_bytes(VICTIM)
    (tmp_path / "mols.csv").write_text("smiles\nCCO\n")
    monkeypatch.chdir(tmp_path)
    return Env(tmp_path / "out", tmp_path, monkeypatch, capsys)


def assert_one_line_naming(message: str, path: Path) -> None:
    assert message and "\n" not in message.strip() and "Traceback" not in message, message
    names = [path.name, *(str(folder) for folder in path.parents if len(folder.parts) > 2)]  # or a folder of it
    assert any(name in message for name in names), f"{message!r} does not name {path}"


@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize("writer", list(FILE_WRITERS))
def test_every_writer_writes_only_regular_files(env, writer, kind):
    spec = FILE_WRITERS[writer]
    victim = env.tmp / "user" / "victim.txt"
    if kind == "unwritable_folder":
        env.root = UNWRITABLE
    target = spec.target(env.root)
    make_node(kind, target, victim)
    before, user = snapshot(target), snapshot(victim.parent)
    message = spec.write(env)
    assert victim.read_bytes() == VICTIM, "a writer changed a file outside its folder"
    assert snapshot(victim.parent) == user and snapshot(victim.parent / "linked") in (("missing",), ("folder", []))
    if kind in WRITTEN_KINDS:
        assert message is None, message
        after = snapshot(target)
        if spec.content:
            assert after[0] == "file" and after != before
        else:
            assert after == before or before == ("missing",)
        if kind == "hard_link":  # replaced by a new file: the other name keeps its bytes
            assert target.with_name(target.name + ".other").read_bytes() == OLD
    else:
        assert message is not None, f"{writer} wrote onto a {kind}"
        assert_one_line_naming(message, target)
        assert snapshot(target) == before
    leftovers = temporary_files(target.parent)
    if kind == "planted_temporary_link" and leftovers:  # a writer without a temporary file leaves it alone
        assert leftovers == [files.temporary_path(target).name] and files.temporary_path(target).is_symlink()
    else:
        assert leftovers == []


# --- folders -----------------------------------------------------------------------------------------------------


@dataclass
class FolderWriter:
    """An entry point that writes into ``folder(root)``; ``named``: the user names that folder (a link to a folder
    is then fine), else graphnorm makes it inside the one the user named."""

    folder: Callable[[Path], Path]
    write: Callable[[Env, Path], str | None]
    named: bool


def cli_into(args: Callable[[Env, Path], list[str]]) -> Callable[[Env, Path], str | None]:
    def write(env: Env, folder: Path) -> str | None:
        return cli(lambda env: args(env, folder))(env)

    return write


def api_into(call: Callable[[Env, Path], object]) -> Callable[[Env, Path], str | None]:
    def write(env: Env, folder: Path) -> str | None:
        return api(lambda env: call(env, folder))(env)

    return write


def sweep_until_runs(env: Env, folder: Path) -> None:
    """``run_sweep`` with ``checkpoint_dir`` ``folder``: :class:`StartedError` when it gets to its first run."""

    def started(config: RunConfig) -> dict:
        raise StartedError

    sweep = {**SWEEP, "base": {**SWEEP["base"], "checkpoint_dir": str(folder)}}
    runner.run_sweep(sweep, env.tmp / "sweep", run_fn=started, executor="serial", make_plots=False, log=lambda m: None)


TENSORBOARD_RUN_ID = config_run_id(RunConfig.from_dict({"dataset": "cora", "epochs": 1, "tensorboard_dir": "tb"}))

FOLDER_WRITERS = {
    "graphnorm train: checkpoint_dir": FolderWriter(
        lambda root: root / "ckpt",
        cli_into(lambda env, folder: ["train", str(run_config(env, checkpoint_dir=str(folder)))]),
        named=True,
    ),
    "graphnorm train: tensorboard_dir": FolderWriter(
        lambda root: root / "tb",
        cli_into(lambda env, folder: ["train", str(run_config(env, tensorboard_dir=str(folder)))]),
        named=True,
    ),
    "graphnorm train: the run's TensorBoard folder": FolderWriter(
        lambda root: root / "tb" / TENSORBOARD_RUN_ID,
        cli_into(lambda env, folder: ["train", str(run_config(env, tensorboard_dir=str(folder.parent)))]),
        named=False,
    ),
    "train: checkpoint_dir": FolderWriter(
        lambda root: root / "ckpt",
        api_into(lambda env, folder: train_until_data(env, checkpointed(folder))),
        named=True,
    ),
    "run_sweep: a run's checkpoint_dir": FolderWriter(
        lambda root: root / "ckpt", api_into(sweep_until_runs), named=True
    ),
    "graphnorm sweep --out": FolderWriter(
        lambda root: root / "sweep", cli_into(lambda env, folder: sweep_args(env, folder)), named=True
    ),
    "graphnorm sweep: results/": FolderWriter(
        lambda root: root / "sweep" / "results",
        cli_into(lambda env, folder: sweep_args(env, folder.parent)),
        named=False,
    ),
    "graphnorm sweep: logs/": FolderWriter(
        lambda root: root / "sweep" / "logs", cli_into(lambda env, folder: sweep_args(env, folder.parent)), named=False
    ),
    "graphnorm predict --out: its folder": FolderWriter(
        lambda root: root / "preds",
        cli_into(
            lambda env, folder: ["predict", str(env.tmp / "model.pt"), "mols.csv", "--out", str(folder / "p.csv")]
        ),
        named=True,
    ),
}


@pytest.mark.parametrize("kind", FOLDER_KINDS)
@pytest.mark.parametrize("writer", list(FOLDER_WRITERS))
def test_every_writer_writes_only_into_real_folders(env, writer, kind):
    spec = FOLDER_WRITERS[writer]
    victim = env.tmp / "user" / "victim.txt"
    if kind == "unwritable_folder":
        env.root = UNWRITABLE
    folder = spec.folder(env.root)
    if kind != "unwritable_folder":
        folder.parent.mkdir(parents=True, exist_ok=True)
    make_node(kind, folder, victim)
    before, user = snapshot(folder), snapshot(victim.parent)
    message = spec.write(env, folder)
    assert snapshot(victim.parent) == user and victim.read_bytes() == VICTIM
    if kind in ("missing", "directory") or (kind == "symlink_to_folder" and spec.named):
        assert message is None, message
    else:
        assert message is not None, f"{writer} wrote into a {kind}"
        assert_one_line_naming(message, folder)
        assert snapshot(folder) == before


# --- the reproductions, one by one --------------------------------------------------------------------------------


def test_train_out_onto_a_fifo_is_refused_before_training(env):
    fifo = env.tmp / "fifo"
    os.mkfifo(fifo)
    calls = fake_work(env.monkeypatch)
    assert main(["train", str(run_config(env)), "--out", str(fifo)]) == 2
    err = env.capsys.readouterr().err
    assert "FIFO" in err and str(fifo) in err and err.count("\n") == 1, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and not calls


def test_predict_out_onto_a_fifo_is_refused_before_scoring(env):
    fifo = env.tmp / "fifo"
    os.mkfifo(fifo)
    calls = fake_work(env.monkeypatch)
    assert main(["predict", "model.pt", "mols.csv", "--out", str(fifo)]) == 2
    err = env.capsys.readouterr().err
    assert "FIFO" in err and err.count("\n") == 1 and stat.S_ISFIFO(os.lstat(fifo).st_mode) and not calls


def test_train_out_onto_a_character_device_is_refused(env):
    device = env.tmp / "null"
    make_node("char_device", device, env.tmp / "user" / "victim.txt")
    fake_work(env.monkeypatch)
    assert main(["train", str(run_config(env)), "--out", str(device)]) == 2
    assert "character device" in env.capsys.readouterr().err
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_a_sweep_lock_linked_to_a_users_file_leaves_the_file_whole(env):
    victim = env.tmp / "user" / "victim.txt"
    (env.tmp / "sweep").mkdir()
    (env.tmp / "sweep" / ".sweep.lock").symlink_to(victim)
    assert main(sweep_args(env, env.tmp / "sweep")) == 2
    err = env.capsys.readouterr().err
    assert ".sweep.lock" in err and "symbolic link" in err and err.count("\n") == 1
    assert victim.read_bytes() == VICTIM


def test_a_temporary_file_planted_as_a_link_is_never_followed(env):
    victim = env.tmp / "user" / "victim.txt"
    env.root.mkdir()
    target = env.root / "runs.csv"
    files.temporary_path(target).symlink_to(victim)
    files.atomic_write_text(target, "new\n")
    assert victim.read_bytes() == VICTIM
    assert target.read_text() == "new\n" and not target.is_symlink() and temporary_files(env.root) == []


def test_the_checkpoint_folder_probe_never_follows_a_planted_link(env):
    victim = env.tmp / "user" / "victim.txt"
    config = checkpointed(env.root)
    env.root.mkdir()
    files.temporary_path(checkpoint_path(config)).symlink_to(victim)
    prepare_checkpoint_dir(config)
    assert victim.read_bytes() == VICTIM


@pytest.mark.parametrize("dataset", ["cora", "zinc"])
def test_an_unwritable_checkpoint_dir_is_refused_before_the_data_loads(env, dataset):
    config = RunConfig.from_dict({"dataset": dataset, "epochs": 1, "checkpoint_dir": str(UNWRITABLE / "x")})
    with pytest.raises(CheckpointError, match="checkpoint_dir") as error:
        train_until_data(env, config)
    assert str(UNWRITABLE / "x") in str(error.value) and "\n" not in str(error.value)


def test_graphnorm_train_refuses_an_unwritable_checkpoint_dir_in_one_line(env):
    calls = fake_work(env.monkeypatch)
    assert main(["train", str(run_config(env)), f"checkpoint_dir={UNWRITABLE / 'x'}"]) == 2
    err = env.capsys.readouterr().err
    assert "checkpoint_dir" in err and str(UNWRITABLE) in err and err.count("\n") == 1 and not calls


def test_a_sweep_with_an_unwritable_checkpoint_dir_runs_nothing(env):
    ran = []
    sweep = {**SWEEP, "grid": {"seed": [0, 1, 2]}, "base": {**SWEEP["base"], "checkpoint_dir": str(UNWRITABLE)}}
    with pytest.raises(CheckpointError, match="checkpoint_dir"):
        runner.run_sweep(sweep, env.tmp / "sweep", run_fn=ran.append, executor="serial", make_plots=False)
    assert ran == []


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Saving a figure writes part of it, then the disk is full."""
    from matplotlib.figure import Figure

    def savefig(self, target, *args, **kwargs):
        if isinstance(target, (str, os.PathLike)):
            Path(target).write_bytes(b"\x89PNG partial")
        else:
            target.write(b"\x89PNG partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Figure, "savefig", savefig)


def test_a_full_disk_while_saving_the_learning_curve_is_one_line(env):
    fake_work(env.monkeypatch)
    full_disk(env.monkeypatch)
    out = env.tmp / "record.json"
    code = main(["train", str(run_config(env)), "--out", str(out)])
    captured = env.capsys.readouterr()
    assert code != 0
    assert captured.err.count("\n") == 1 and "No space left on device" in captured.err, captured.err
    assert "learning_curve.png" in captured.err and "Traceback" not in captured.err
    assert json.loads(out.read_text())["test_acc"] == 0.5  # the record is saved
    assert not (env.tmp / "record.json.learning_curve.png").exists() and temporary_files(env.tmp) == []


def test_a_full_disk_while_saving_the_record_is_one_line(env):
    fake_work(env.monkeypatch)
    real = os.fsync

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    env.monkeypatch.setattr(os, "fsync", fsync)
    out = env.tmp / "record.json"
    code = main(["train", str(run_config(env)), "--out", str(out)])
    env.monkeypatch.setattr(os, "fsync", real)
    err = env.capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and "No space left" in err and str(out) in err, err
    assert not out.exists() and temporary_files(env.tmp) == []


def test_a_hard_linked_target_is_replaced_and_its_other_name_keeps_the_old_bytes(tmp_path):
    """``os.replace`` swaps the folder entry: the file the other name points at is never written."""
    other, target = tmp_path / "other.csv", tmp_path / "runs.csv"
    other.write_bytes(OLD)
    os.link(other, target)
    files.atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n" and other.read_bytes() == OLD
    assert os.stat(target).st_nlink == 1 and os.stat(other).st_nlink == 1


def test_appending_to_a_hard_linked_log_leaves_its_other_name_as_it_was(tmp_path):
    other, log = tmp_path / "backup.log", tmp_path / "run.log"
    other.write_bytes(OLD)
    os.link(other, log)
    with files.open_for_append(log) as handle:
        handle.write("attempt 2\n")
    assert log.read_bytes() == OLD + b"attempt 2\n" and other.read_bytes() == OLD


def test_a_directory_target_is_a_clear_error(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match="is a directory") as error:
        files.atomic_write_text(tmp_path / "d", "x")
    assert str(tmp_path / "d") in str(error.value) and temporary_files(tmp_path) == []


def test_a_file_another_writer_holds_is_refused(tmp_path):
    lock = tmp_path / ".sweep.lock"
    lock.write_bytes(b"")
    with open(lock, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ValueError, match="another") as error:
            files.atomic_write_text(lock, "x")
    assert str(lock) in str(error.value) and lock.read_bytes() == b""


def test_two_runs_of_one_config_never_share_its_checkpoint(env):
    """The second start of a run whose first still trains (same config, same checkpoint_dir) is refused."""
    config = checkpointed(env.root)
    second: list[str] = []

    def first_trains(*args, **kwargs):
        with pytest.raises(CheckpointError, match="another") as error:
            graphnorm.train.loop.train(config)
        second.append(str(error.value))
        raise StartedError

    env.monkeypatch.setattr(graphnorm.train.loop, "prepare_task", first_trains)
    with pytest.raises(StartedError):
        graphnorm.train.loop.train(config)
    assert len(second) == 1 and str(checkpoint_path(config).name.removesuffix(".pt")) in second[0]
    with pytest.raises(StartedError):  # released: the next start goes ahead
        graphnorm.train.loop.train(config)


def test_the_refusal_is_one_exception_type_that_the_commands_report_in_one_line(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(files.OutputPathError) as error:
        files.check_output_path(tmp_path / "fifo", "--out")
    assert isinstance(error.value, ValueError) and isinstance(error.value, OSError)
    again = pickle.loads(pickle.dumps(error.value))  # crosses from a sweep's worker process to its driver
    assert type(again) is files.OutputPathError and str(again) == str(error.value)
    assert files.check_output_path(tmp_path / "new.json") == tmp_path / "new.json"
    assert files.check_output_dir(tmp_path / "sub") == tmp_path / "sub" and (tmp_path / "sub").is_dir()
