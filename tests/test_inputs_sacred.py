"""No command writes over a file it reads: ``train --out``, ``predict --out`` and ``sweep --out`` given an input
(config, SMILES CSV, model file, checkpoint, a file of the data root) in any spelling (the same name, ``./x``, the
absolute path, ``sub/../x``, a symlink, a hard link) exit 2 with one line and leave the input's bytes as they were.
Also: temporary names of long targets fit the file system, and ``--tensorboard`` is checked before any work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import graphnorm.predict
import graphnorm.sweep
import graphnorm.train
from graphnorm.cli import main
from graphnorm.config import RunConfig
from graphnorm.files import (
    atomic_write,
    atomic_write_text,
    is_temporary_file,
    remove_leftover_temporary_files,
    temporary_path,
)
from graphnorm.train.checkpoints import checkpoint_path
from graphnorm.train.model_file import model_file_path

SMILES_CSV = "smiles,active\nCCO,1\nCCN,0\nc1ccccc1,1\nCC(=O)O,0\nCCCC,1\nCCOC,0\nCCCl,1\nCCBr,0\nCN,1\nCO,0\n"
SPELLINGS = ("name", "dot", "absolute", "parent", "symlink", "hardlink")
FAKE_SWEEP = ["--run-fn", "sweep_run_fns:fake_run", "--executor", "serial", "--no-plots"]


def spelled(path: Path, spelling: str, cwd: Path) -> str:
    """``path`` (a file under ``cwd``, the working folder) written another way; links are made beside it."""
    relative = os.path.relpath(path, cwd)
    if spelling == "name":
        return relative
    if spelling == "dot":
        return f"./{relative}"
    if spelling == "absolute":
        return str(path)
    if spelling == "parent":
        (cwd / "sub").mkdir(exist_ok=True)
        return f"sub/../{relative}"
    link = cwd / f"{spelling}-{path.name}"
    if spelling == "symlink":
        link.symlink_to(path)
    else:
        os.link(path, link)
    return link.name


@pytest.fixture
def fake_work(monkeypatch):
    """Training, scoring and sweeps that only write their outputs, so an output over an input shows at once."""

    def fake_run(config):
        return {"test_rocauc": 0.5}

    def fake_predict_csv(model, input_csv, out, *args):
        atomic_write_text(out, "line,smiles,valid\n")
        return {"rows": 0, "invalid": 0, "seconds": 0.0}

    def fake_predict_split(model, split, out, *args):
        atomic_write_text(out, "node,prediction\n")
        raise ValueError("scored")  # reached only when the output was not refused

    monkeypatch.setattr(graphnorm.train, "run", fake_run)
    monkeypatch.setattr(graphnorm.predict, "predict_csv", fake_predict_csv)
    monkeypatch.setattr(graphnorm.predict, "predict_split", fake_predict_split)


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A working folder with a SMILES CSV, a run config reading it, the run's checkpoint and model file, a data root
    with a dataset file in it, and a sweep config."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mols.csv").write_text(SMILES_CSV)
    kwargs = {"path": "mols.csv", "target_columns": ["active"], "split": "random"}
    values = {"dataset": "smiles", "dataset_kwargs": kwargs, "model": "gin", "epochs": 1}
    values.update(checkpoint_dir="ckpt", data_root="root")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(values))
    config = RunConfig.from_dict(values)
    for path in (checkpoint_path(config), model_file_path(config), tmp_path / "root" / "cora" / "raw" / "x.bin"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"input " + path.name.encode())
    sweep = {"name": "t", "base": {"dataset": "cora", "epochs": 1}, "grid": {"seed": [0]}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    return tmp_path, config


def command_cases():
    """(command, input) pairs: each input a file the command reads, to be given as its output."""
    yield from (("train", name) for name in ("config", "csv", "checkpoint", "model file", "data root file"))
    yield from (("train curve", name) for name in ("config", "csv"))
    yield from (("predict csv", name) for name in ("model", "csv"))
    yield from (("predict split", name) for name in ("model", "data root file"))
    yield from (("sweep", name) for name in ("config", "config as runs.csv"))


CASES = [
    (command, name, spelling)
    for command, name in command_cases()
    for spelling in SPELLINGS
    # a hard link out of the data root is another name of the file; a folder has no hard link
    if not (spelling == "hardlink" and name in ("data root file", "config as runs.csv"))
]


def input_path(name: str, root: Path, config: RunConfig) -> Path:
    paths = {
        "config": root / "run.yaml",
        "csv": root / "mols.csv",
        "checkpoint": checkpoint_path(config).resolve(),
        "model file": model_file_path(config).resolve(),
        "model": model_file_path(config).resolve(),
        "data root file": root / "root" / "cora" / "raw" / "x.bin",
    }
    return paths[name]


@pytest.mark.parametrize(("command", "name", "spelling"), CASES)
def test_no_command_writes_over_a_file_it_reads(workspace, fake_work, capsys, command, name, spelling):
    root, config = workspace
    if command == "sweep":
        target = root / "sweep.yaml"
        if name == "config as runs.csv":  # the config inside OUT, named like a table the sweep writes
            (root / "out").mkdir()
            target = (root / "sweep.yaml").rename(root / "out" / "runs.csv")
            out = spelled(root / "out", spelling, root)
            args = ["sweep", str(target), "--out", out, *FAKE_SWEEP]
        else:
            args = ["sweep", "sweep.yaml", "--out", spelled(target, spelling, root), *FAKE_SWEEP]
    else:
        target = input_path(name, root, config)
        if command == "train curve":  # the learning curve beside --out would replace an input
            target = target.rename(root / "record.json.learning_curve.png")
            values = yaml.safe_load(target.read_text() if name == "config" else (root / "run.yaml").read_text())
            if name == "csv":
                values["dataset_kwargs"]["path"] = spelled(target, spelling, root)
                (root / "run.yaml").write_text(yaml.safe_dump(values))
            config_file = spelled(target, spelling, root) if name == "config" else "run.yaml"
            args = ["train", config_file, "--out", "record.json"]
        elif command == "train":
            args = ["train", "run.yaml", "--out", spelled(target, spelling, root)]
        elif command == "predict csv":
            args = ["predict", str(model_file_path(config)), "mols.csv", "--out", spelled(target, spelling, root)]
        else:
            args = ["predict", str(model_file_path(config)), "--split", "test", "--data-root", "root"]
            args += ["--out", spelled(target, spelling, root)]
    before = target.read_bytes()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert target.read_bytes() == before


# --- temporary names ----------------------------------------------------------------------------------------------
def test_temporary_name_of_a_250_character_target_fits_and_is_recognized(tmp_path):
    target = tmp_path / ("r" * 245 + ".json")
    atomic_write(target, lambda handle: handle.write(b"{}"))
    assert target.read_bytes() == b"{}" and list(tmp_path.iterdir()) == [target]
    leftover = temporary_path(target)
    assert len(leftover.name.encode()) <= 255 and is_temporary_file(leftover)
    leftover.write_bytes(b"partial")  # what a killed writer leaves
    assert remove_leftover_temporary_files(tmp_path, target.name) == [leftover]
    leftover.write_bytes(b"partial")
    assert remove_leftover_temporary_files(tmp_path) == [leftover] and list(tmp_path.iterdir()) == [target]


def test_short_names_keep_their_temporary_name(tmp_path):
    assert temporary_path(tmp_path / "runs.csv").name == f".runs.csv.{os.getpid()}.tmp"


@pytest.mark.parametrize("length", [241, 250, 300])
def test_train_out_with_a_long_name_fails_before_training(tmp_path, monkeypatch, capsys, length):
    def started(config):
        raise AssertionError("the command started training")

    monkeypatch.setattr(graphnorm.train, "run", started)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"dataset": "cora", "data_root": str(tmp_path / "root")}))
    out = tmp_path / ("r" * (length - 5) + ".json")
    assert main(["train", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "file name" in err and err.count("\n") == 1


def test_predict_out_with_a_name_too_long_is_one_line_before_scoring(workspace, fake_work, capsys):
    root, config = workspace
    out = root / ("p" * 300 + ".csv")
    assert main(["predict", str(model_file_path(config)), "mols.csv", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "file name" in err and err.count("\n") == 1


def test_predict_out_with_a_250_character_name_is_written(workspace, fake_work, capsys):
    root, config = workspace
    out = root / ("p" * 246 + ".csv")
    assert main(["predict", str(model_file_path(config)), "mols.csv", "--out", str(out)]) == 0
    assert out.read_text() == "line,smiles,valid\n" and not [p for p in root.iterdir() if p.name.endswith(".tmp")]


# --- --tensorboard checked before any work --------------------------------------------------------------------------
@pytest.fixture
def blocked_dir(tmp_path) -> Path:
    """A TensorBoard folder that cannot be created: its parent is a file."""
    (tmp_path / "file").write_text("not a folder")
    return tmp_path / "file" / "tb"


def test_train_tensorboard_into_an_unwritable_folder_is_one_line_before_loading(
    tmp_path, blocked_dir, monkeypatch, capsys
):
    import graphnorm.train.loaders

    def started(*args, **kwargs):
        raise AssertionError("the command loaded data or started training")

    monkeypatch.setattr(graphnorm.train, "run", started)
    monkeypatch.setattr(graphnorm.train.loaders, "prepare_task", started)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"dataset": "cora", "data_root": str(tmp_path / "root")}))
    assert main(["train", str(config), "--tensorboard", str(blocked_dir)]) == 2
    err = capsys.readouterr().err
    assert "--tensorboard" in err and str(blocked_dir) in err and err.count("\n") == 1


def test_sweep_tensorboard_into_an_unwritable_folder_is_one_line_before_any_run(
    tmp_path, blocked_dir, monkeypatch, capsys
):
    def started(*args, **kwargs):
        raise AssertionError("the sweep started")

    monkeypatch.setattr(graphnorm.sweep, "run_sweep", started)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "t", "base": {"dataset": "cora"}, "grid": {"seed": [0, 1]}}))
    args = ["sweep", str(sweep), "--out", str(tmp_path / "out"), "--tensorboard", str(blocked_dir)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--tensorboard" in err and err.count("\n") == 1
