"""Datasets load from the mirror-seeded root with their documented counts; missing data gives one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graphnorm.data import DatasetNotFoundError, GraphTask, load_dataset
from graphnorm.data.datasets import check_finite
from graphnorm.data.root import ENV_MIRROR, ENV_ROOT


def test_cora_public_split(data_root: Path) -> None:
    task = load_dataset("cora", data_root)
    data = task.data
    assert (task.level, task.task_type, task.metric) == ("node", "multiclass", "acc")
    assert data.num_nodes == 2708 and data.edge_index.size(1) == 10556
    assert (task.num_features, task.num_outputs) == (1433, 7)
    assert [int(data.train_mask.sum()), int(data.val_mask.sum()), int(data.test_mask.sum())] == [140, 500, 1000]
    assert int((~(data.train_mask | data.val_mask)).sum()) == 2068  # the ContraNorm "rest" evaluation nodes
    assert data.x.dtype == torch.float32


def test_citeseer_public_split(data_root: Path) -> None:
    task = load_dataset("CiteSeer", data_root)
    data = task.data
    assert data.num_nodes == 3327 and data.edge_index.size(1) == 9104
    assert (task.num_features, task.num_outputs) == (3703, 6)
    assert [int(data.train_mask.sum()), int(data.val_mask.sum()), int(data.test_mask.sum())] == [120, 500, 1000]


def test_zinc_subset(data_root: Path) -> None:
    task = load_dataset("zinc", data_root)
    assert (task.level, task.task_type, task.metric, task.atom_encoder) == ("graph", "regression", "mae", "zinc")
    assert [len(task.train), len(task.val), len(task.test)] == [10000, 1000, 1000]
    assert (task.num_features, task.num_outputs) == (28, 1)
    graph = task.val[0]
    assert graph.x.dtype == torch.long and graph.x.shape == (graph.num_nodes, 1)
    assert graph.edge_attr.dtype == torch.long and graph.edge_attr.numel() == graph.edge_index.size(1)
    assert int(task.train.x.max()) < 28
    assert task.val.y.mean().item() == pytest.approx(0.0315, abs=1e-3)  # genuine benchmark val targets


def test_molhiv_scaffold_split_and_evaluator(data_root: Path) -> None:
    task = load_dataset("molhiv", data_root)
    assert (task.level, task.task_type, task.metric, task.atom_encoder) == ("graph", "binary", "rocauc", "ogb")
    assert [len(task.train), len(task.val), len(task.test)] == [32901, 4113, 4113]
    assert len(task.train) + len(task.val) + len(task.test) == 41127
    assert (task.num_features, task.num_outputs) == (9, 1)
    graph = task.train[0]
    assert graph.x.dtype == torch.long and graph.x.size(1) == 9 and graph.edge_attr.size(1) == 3
    labels = task.val._data.y  # all 41127 labels; indexing the split view graph by graph would be slow
    y = labels[torch.as_tensor(task.val.indices())]
    assert int(y.sum()) == 81 and int(labels[torch.as_tensor(task.test.indices())].sum()) == 130  # positives
    assert task.evaluator.eval({"y_true": y, "y_pred": y.float()})["rocauc"] == 1.0


def test_missing_dataset_names_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MIRROR, raising=False)
    monkeypatch.delenv(ENV_ROOT, raising=False)
    with pytest.raises(DatasetNotFoundError) as error:
        load_dataset("cora", tmp_path)
    message = str(error.value)
    assert str(tmp_path / "Planetoid" / "Cora") in message
    assert ENV_MIRROR in message and ENV_ROOT in message
    assert not (tmp_path / "Planetoid" / "Cora").exists()  # the failed download leaves no empty folder behind


def test_ogb_folder_without_release_file_never_prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MIRROR, raising=False)
    (tmp_path / "ogb" / "ogbg_molhiv" / "raw").mkdir(parents=True)

    def no_prompt(*args):
        raise AssertionError("ogb's interactive input() was reached")

    monkeypatch.setattr("builtins.input", no_prompt)
    with pytest.raises(DatasetNotFoundError, match="RELEASE_v1.txt"):
        load_dataset("molhiv", tmp_path)


def test_unknown_dataset_and_nan_features(data_root: Path) -> None:
    with pytest.raises(ValueError, match="unknown dataset 'pubmed'"):
        load_dataset("pubmed", data_root)
    task = load_dataset("cora", data_root)
    data = task.data.clone()
    data.x[3, 7] = float("nan")
    broken = GraphTask("cora", "node", "multiclass", "acc", 1433, 7, data=data)
    with pytest.raises(ValueError, match="dataset 'cora' x has 1 NaN/inf values"):
        check_finite(broken)
