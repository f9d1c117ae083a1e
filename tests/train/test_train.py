"""Training loops: a real Cora GCN that reaches Kipf & Welling's accuracy, determinism, tiny ZINC and MolHIV runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch_geometric.loader import DataLoader

from graphnorm.config import RunConfig
from graphnorm.models import model_outputs
from graphnorm.train.loop import run, train
from graphnorm.train.schedules import EpochSchedule, TrainingDivergedError, finite_loss

RECORD_KEYS = {"best_epoch", "train_loss", "num_params", "epochs_run", "wall_time_s"}


# Many tiny tensor ops: on a shared 2-core machine one intra-op thread is faster (see conftest).
pytestmark = pytest.mark.usefixtures("one_thread")


def kipf_config(seed: int, data_root: Path, **overrides) -> RunConfig:
    values = dict(
        dataset="cora",
        data_root=str(data_root),
        num_layers=2,
        hidden_channels=16,
        dropout=0.5,
        lr=0.01,
        weight_decay=5e-4,
        epochs=200,
        adjacency="sym",
        feature_norm="row_l1",
        seed=seed,
    )
    values.update(overrides)
    return RunConfig.from_dict(values)


@pytest.mark.slow
def test_cora_two_layer_gcn_reaches_kipf_welling_accuracy(data_root: Path) -> None:
    """Kipf & Welling report 81.5% test accuracy; best-validation checkpoint, mean over 3 seeds >= 80%."""
    records = [run(kipf_config(seed, data_root)) for seed in range(3)]
    accuracies = [record["test_acc"] for record in records]
    print("cora test_acc per seed:", accuracies)
    assert sum(accuracies) / 3 >= 0.80, accuracies
    for record in records:
        assert set(record) >= RECORD_KEYS | {"val_acc", "test_acc", "val_acc_last", "test_acc_last"}
        assert record["num_eval_nodes"] == 1000 and record["epochs_run"] == 200
        assert record["train_loss"] < record["train_loss_first"]
        json.dumps(record)  # JSON-serializable


def test_same_seed_same_numbers(data_root: Path) -> None:
    first = run(kipf_config(0, data_root, epochs=15))
    second = run(kipf_config(0, data_root, epochs=15))
    other_seed = run(kipf_config(1, data_root, epochs=15))
    for record in (first, second, other_seed):
        record.pop("wall_time_s"), record.pop("probe_time_s")
    assert first == second  # metrics and every per-layer collapse number
    assert len(first["layers"]) > 0
    assert first["train_loss"] != other_seed["train_loss"]


def test_contranorm_protocol_scores_the_2068_rest_nodes(data_root: Path) -> None:
    config = kipf_config(
        0,
        data_root,
        num_layers=3,
        hidden_channels=32,
        dropout=0.6,
        lr=0.005,
        epochs=2,
        adjacency="row",
        layer_order="dropout-conv-norm-act",
        norm="contranorm",
        shared_layernorm=True,
        eval_nodes="rest",
    )
    model, task, record = train(config)
    assert record["num_eval_nodes"] == 2068
    assert 0.0 <= record["test_acc_last"] <= 1.0
    assert not model.training and model.adjacency == "row" and model.shared_layernorm is not None


def test_zinc_tiny_run_learns_and_is_deterministic(data_root: Path) -> None:
    config = RunConfig(
        dataset="zinc",
        data_root=str(data_root),
        limit_graphs=300,
        num_layers=3,
        hidden_channels=32,
        dropout=0.0,
        lr=0.003,
        weight_decay=0.0,
        epochs=3,
        batch_size=32,
        virtual_node=True,
        norm="layernorm",
    )
    record = run(config)
    assert record["train_loss"] < record["train_loss_first"]
    assert set(record) >= RECORD_KEYS | {"val_mae", "test_mae", "val_mae_last", "test_mae_last"}
    assert 0.0 < record["test_mae"] < 10.0
    assert record["train_graphs_per_s"] > 0
    again = run(config)  # seeded DataLoader shuffling: identical numbers
    assert [row["epoch"] for row in record["history"]] == [0, 1, 2]
    for r in (record, again):
        r.pop("wall_time_s"), r.pop("probe_time_s"), r.pop("train_graphs_per_s")
        for row in r["history"]:
            row.pop("train_time_s")
    assert record == again
    token_rows = [row for row in record["layers"] if row["rows"] == "token"]
    assert token_rows, "the probe reports the virtual-node rows separately"


def test_molhiv_tiny_run_uses_ogb_rocauc(data_root: Path) -> None:
    config = RunConfig(
        dataset="molhiv",
        data_root=str(data_root),
        limit_graphs=400,
        num_layers=2,
        hidden_channels=16,
        epochs=1,
        batch_size=64,
        norm="batchnorm",
    )
    model, task, record = train(config)
    assert len(task.train) == len(task.val) == len(task.test) == 400
    # With one epoch the best-validation weights are the last ones: recompute the validation ROC-AUC.
    outputs, labels = [], []
    with torch.no_grad():
        for batch in DataLoader(task.val, batch_size=64):
            outputs.append(model_outputs(model, batch))
            labels.append(batch.y)
    scores, labels = torch.cat(outputs).view(-1), torch.cat(labels).view(-1)
    assert 0 < int(labels.sum()) < 400
    assert record["val_rocauc"] == pytest.approx(roc_auc_score(labels.numpy(), scores.numpy()), abs=1e-6)
    assert record["val_rocauc"] == record["val_rocauc_last"]
    assert 0.0 <= record["test_rocauc"] <= 1.0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"adjacency": "dense"}, "adjacency"),
        ({"eval_nodes": "all"}, "eval_nodes"),
        ({"dataset": "zinc", "feature_norm": "row_l1"}, "feature_norm"),
        ({"dataset": "cora", "virtual_node": True}, "virtual_node"),
        ({"dataset": "zinc", "readout": "virtual"}, "virtual_node=true"),
        ({"warmup_epochs": 300}, "warmup_epochs"),
        ({"layers": 3}, "unknown config key"),
        ({"model_kwargs": {"init": "kipf", "heads": 2}}, r"unknown model_kwargs \['heads'\] for gcn"),
    ],
)
def test_impossible_configs_fail_before_running(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict(values)
    if "layers" not in values:
        with pytest.raises(ValueError, match=message):
            run(RunConfig(**values, data_root="/nonexistent/never/read"))


def test_epoch_schedule_warmup_then_cosine() -> None:
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=0.1)
    config = RunConfig(lr=0.1, epochs=12, warmup_epochs=3, scheduler="cosine")
    schedule = EpochSchedule(optimizer, config, higher_is_better=True)
    rates = []
    for epoch in range(12):
        schedule.start_epoch(epoch)
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert rates[4] == pytest.approx(0.1 * 0.5 * (1 + torch.cos(torch.tensor(torch.pi / 9)).item()))
    assert rates == sorted(rates[:4]) + sorted(rates[4:], reverse=True)


def test_molhiv_subset_without_positives_fails_before_training(data_root: Path) -> None:
    config = RunConfig(dataset="molhiv", data_root=str(data_root), limit_graphs=5, num_layers=2, epochs=1)
    with pytest.raises(ValueError, match=r"limit_graphs=5 leaves the \w+ split of molhiv with one class only"):
        run(config)


@pytest.mark.parametrize(("eval_nodes", "expected"), [("test", 319 / 1000), ("rest", 640 / 2068)])
def test_cora_majority_class_accuracy(data_root: Path, eval_nodes: str, expected: float) -> None:
    """By hand: Cora's 140 training nodes are 20 per class, a 7-way tie; the 500 validation nodes count
    [61, 36, 78, 158, 81, 57, 29], so the majority class is 3, which is 319 of the 1000 test nodes and 640 of the
    2068 nodes outside train+val."""
    record = run(kipf_config(0, data_root, epochs=1, probe=False, eval_nodes=eval_nodes))
    assert record["majority_acc"] == pytest.approx(expected)


def test_majority_class_is_the_training_nodes_most_frequent() -> None:
    from types import SimpleNamespace

    from graphnorm.train.node_level import majority_accuracy

    y = torch.tensor([2, 2, 1, 0, 1, 1, 1, 2, 0, 0])
    train = torch.tensor([1, 1, 1, 0, 0, 0, 0, 0, 0, 0], dtype=torch.bool)  # two 2s, one 1: class 2
    val = torch.tensor([0, 0, 0, 1, 1, 1, 1, 0, 0, 0], dtype=torch.bool)  # mostly 1s: ignored, no tie
    data = SimpleNamespace(y=y, train_mask=train, val_mask=val)
    evaluated = torch.tensor([0, 0, 0, 0, 0, 0, 0, 1, 1, 1], dtype=torch.bool)  # labels 2, 0, 0
    assert majority_accuracy(data, evaluated) == pytest.approx(1 / 3)
    tie = torch.tensor([0, 0, 1, 1, 0, 0, 0, 0, 0, 0], dtype=torch.bool)  # one 1, one 0: the validation nodes decide
    assert majority_accuracy(SimpleNamespace(y=y, train_mask=tie, val_mask=val), evaluated) == 0.0  # class 1
    no_val = torch.zeros(10, dtype=torch.bool)  # still tied: the lower class, 0
    assert majority_accuracy(SimpleNamespace(y=y, train_mask=tie, val_mask=no_val), evaluated) == pytest.approx(2 / 3)


def test_final_probe_gets_the_graph_on_the_cpu_with_the_model(data_root: Path, monkeypatch) -> None:
    """The probe runs on the CPU: run() moves the model there and the probed graph too (node-level training moves the
    task's graph to the run's device in place, so on a GPU it would still be there)."""
    from torch_geometric.data import Data

    from graphnorm.train import loop

    moved = []

    class RecordingData(Data):
        def to(self, device, *args, **kwargs):
            moved.append(str(device))
            return super().to(device, *args, **kwargs)

    original = loop.probe_sample

    def sample_on_record(model, task, config):
        data, split = original(model, task, config)
        return RecordingData(**data.to_dict()), split

    monkeypatch.setattr(loop, "probe_sample", sample_on_record)
    record = run(kipf_config(0, data_root, epochs=1, probe=True))
    assert moved == ["cpu"] and record["layers"]


def test_finite_loss_passes_finite_values_and_names_where_training_diverged() -> None:
    assert finite_loss(0.25, epoch=0) == 0.25
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(TrainingDivergedError, match=rf"loss is {value} at epoch 3, optimizer step 17; lower lr"):
            finite_loss(value, epoch=2, step=17)
    with pytest.raises(TrainingDivergedError, match=r"at epoch 1; "):
        finite_loss(math.nan, epoch=0)


@pytest.mark.parametrize("level", ["node", "graph"])
def test_a_run_whose_loss_becomes_nan_stops_with_a_clear_error(data_root: Path, level: str) -> None:
    # lr 1e30: Adam's first step moves every weight by ~1e30, so the next forward overflows to inf and NaN.
    values = {"dataset": "cora"} if level == "node" else {"dataset": "zinc", "limit_graphs": 60, "batch_size": 20}
    config = RunConfig(data_root=str(data_root), num_layers=2, hidden_channels=16, lr=1e30, epochs=5, **values)
    with pytest.raises(TrainingDivergedError, match="training diverged: the training loss is nan at epoch") as error:
        run(config)
    if level == "graph":  # 3 steps per epoch: it stops within the first epoch, at the step after the first update
        assert "at epoch 1, optimizer step 2;" in str(error.value)
    else:
        assert "at epoch 2;" in str(error.value)
