"""``graphnorm train`` on a user's SMILES CSV with a mistake in it: one line naming the dataset and the problem (like
a config error), exit status 2, no training; ``GRAPHNORM_TRACEBACK=1`` keeps the traceback for debugging."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import graphnorm.train
from graphnorm.cli import main

TRACEBACK_ENV = "GRAPHNORM_TRACEBACK"  # the documented variable that keeps the traceback

MOLECULES = ["CCO", "CCN", "CCC", "CCCC", "CCCl", "CCBr", "CO", "CN", "c1ccccc1", "CC(=O)O"]
PARTS = ["train"] * 6 + ["valid"] * 2 + ["test"] * 2  # both classes in each part
GOOD = "smiles,active,part\n" + "".join(f"{s},{i % 2},{p}\n" for i, (s, p) in enumerate(zip(MOLECULES, PARTS)))

BROKEN = {
    "bad smiles": ("smiles,active\nCCO,1\nnot-a-molecule,0\nCCN,1\n", "invalid SMILES"),
    "bad label": ("smiles,active\nCCO,1\nCCN,maybe\nCCC,0\n", "holds 'maybe'"),
    "empty file": ("", "is empty"),
    "header only": ("smiles,active\n", "no valid SMILES"),
    "latin-1 file": ("smiles,active,name\nCCO,1,caf\xe9\nCCN,0,x\n", "not UTF-8"),
    "one class": ("smiles,active\n" + "".join(f"{s},1\n" for s in MOLECULES), "one class"),
    "empty split": (
        "smiles,active,part\n"
        + "".join(f"{s},{i % 2},{'train' if i < 7 else 'valid'}\n" for i, s in enumerate(MOLECULES)),
        "test split is empty",
    ),
}


def config_for(tmp_path: Path, text: str, split: str = "random") -> Path:
    csv = tmp_path / "mols.csv"
    csv.write_bytes(text.encode("latin-1"))
    kwargs = {"path": str(csv), "target_columns": ["active"], "split": split}
    values = {"dataset": "smiles", "dataset_kwargs": kwargs, "model": "gin", "epochs": 1}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**values, "data_root": str(tmp_path / "root")}))
    return config


@pytest.fixture
def no_training(monkeypatch):
    def started(config):
        raise AssertionError("the command started training")

    monkeypatch.setattr(graphnorm.train, "run", started)


@pytest.mark.parametrize("case", list(BROKEN))
def test_data_loading_errors_are_one_line(tmp_path, capsys, monkeypatch, no_training, case):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    text, message = BROKEN[case]
    config = config_for(tmp_path, text, split="part" if case == "empty split" else "random")
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphnorm train: error: dataset 'smiles': ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and TRACEBACK_ENV in err


def test_traceback_variable_keeps_the_traceback(tmp_path, monkeypatch, no_training):
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    config = config_for(tmp_path, BROKEN["bad label"][0])
    with pytest.raises(ValueError, match="holds 'maybe'"):
        main(["train", str(config)])


def test_good_data_still_trains(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(graphnorm.train, "run", lambda config: {"test_rocauc": 0.5})
    assert main(["train", str(config_for(tmp_path, GOOD, split="part"))]) == 0
    assert '"test_rocauc": 0.5' in capsys.readouterr().out


def test_a_message_that_names_the_dataset_is_not_prefixed_twice(tmp_path, capsys, monkeypatch, no_training):
    import graphnorm.train.loaders as loaders
    from graphnorm.data import DatasetNotFoundError

    def not_found(config):
        raise DatasetNotFoundError("dataset 'cora' not found: set $GRAPHNORM_DATA_MIRROR")

    monkeypatch.setattr(loaders, "prepare_task", not_found)
    config = tmp_path / "run.yaml"
    config.write_text("dataset: cora\nepochs: 1\n")
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graphnorm train: error: dataset 'cora' not found") and err.count("dataset 'cora'") == 1
