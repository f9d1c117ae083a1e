"""``graphnorm predict MODEL --split PART``: a part of the run's own dataset scored with its model file, the metric
recomputed from the written rows equal to the run's record; the Graphormer path (split and SMILES CSV); errors."""

from __future__ import annotations

import csv
import gzip
import itertools
import os
import re
import warnings
from pathlib import Path

import pytest
import torch

from graphnorm.cli import main
from graphnorm.config import RunConfig
from graphnorm.data.root import ENV_MIRROR
from graphnorm.data.smiles import parse_molecule
from graphnorm.train.loaders import prepare_task
from graphnorm.train.loop import train
from graphnorm.train.model_file import model_file_path, save_model_file
from graphnorm.train.node_level import node_eval_mask

pytestmark = pytest.mark.usefixtures("one_thread")

PRINTED = re.compile(r"(\w+)_(acc|mae|rocauc) (\S+) \(the run's record: (\S+)\)")


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


def predict(model_file: Path, out: Path, *args: str) -> int:
    return main(["predict", str(model_file), *args, "--out", str(out)])


def printed_metric(text: str) -> tuple[float, float]:
    """(recomputed, recorded) from the line ``predict --split`` prints."""
    match = PRINTED.search(text)
    assert match, text
    return float(match.group(3)), float(match.group(4))


# --- node level: Cora GCN -------------------------------------------------------------------------------------------
def node_model_file(tmp_path: Path, data_root: Path, eval_nodes: str) -> tuple[Path, RunConfig, dict]:
    """A tiny Cora GCN trained here and the model file the run itself wrote (``checkpoint_dir``)."""
    config = RunConfig(
        dataset="cora", data_root=str(data_root), num_layers=2, hidden_channels=16, epochs=15, eval_nodes=eval_nodes
    )
    config.checkpoint_dir = str(tmp_path / "ckpt")
    _, _, record = train(config)
    assert [path.name for path in (tmp_path / "ckpt").iterdir()] == [model_file_path(config).name]
    return model_file_path(config), config, record


@pytest.mark.parametrize("eval_nodes", ["test", "rest"])
def test_node_level_split_reproduces_the_records_metrics(tmp_path, data_root, capsys, eval_nodes):
    model_file, config, record = node_model_file(tmp_path, data_root, eval_nodes)
    task = prepare_task(config)
    parts = {"test": node_eval_mask(task, eval_nodes), "val": task.data.val_mask, "train": task.data.train_mask}
    for part, mask in parts.items():
        out = tmp_path / f"{part}.csv"
        assert predict(model_file, out, "--split", part, "--data-root", str(data_root)) == 0
        rows = read_rows(out)
        assert [int(row["node"]) for row in rows] == mask.nonzero().view(-1).tolist()
        assert [int(row["label"]) for row in rows] == task.data.y[mask].tolist()
        probs = torch.tensor([[float(row[f"prob_{k}"]) for k in range(7)] for row in rows], dtype=torch.float64)
        assert torch.allclose(probs.sum(1), torch.ones(len(rows), dtype=torch.float64))
        assert [int(row["prediction"]) for row in rows] == probs.argmax(1).tolist()
        accuracy = sum(row["prediction"] == row["label"] for row in rows) / len(rows)
        value, recorded = printed_metric(capsys.readouterr().out) if part != "train" else (accuracy, None)
        assert value == pytest.approx(accuracy, abs=1e-6)
        if part != "train":
            assert accuracy == pytest.approx(record[f"{part}_acc"], abs=1e-6)
            assert recorded == pytest.approx(record[f"{part}_acc"], abs=1e-6)
    assert len(read_rows(tmp_path / "test.csv")) == {"test": 1000, "rest": 2068}[eval_nodes]


# --- graph level: ZINC GCN and Graphormer ---------------------------------------------------------------------------
def zinc_run(tmp_path: Path, data_root: Path, **overrides) -> tuple[Path, RunConfig, dict]:
    values = dict(dataset="zinc", data_root=str(data_root), limit_graphs=60, num_layers=2, hidden_channels=16, epochs=2)
    values.update(batch_size=16, checkpoint_dir=str(tmp_path / "ckpt"), probe=False, **overrides)
    config = RunConfig.from_dict(values)
    _, _, record = train(config)
    return model_file_path(config), config, record


def graphormer(**overrides) -> dict:
    values = dict(model="graphormer", num_layers=2, hidden_channels=16, num_heads=2, norm="layernorm", dropout=0.0)
    values.update(model_kwargs={"ffn_channels": 16, "multi_hop_max_dist": 3}, optimizer="adamw", lr=1e-3)
    values.update(scheduler="polynomial", warmup_steps=1, weight_decay=0.0)
    values.update(overrides)
    return values


def check_graph_rows(rows: list[dict[str, str]], task_split, target: str) -> float:
    """The rows' graph indices and labels against the split; returns the MAE recomputed from the scored rows."""
    assert [int(row["graph"]) for row in rows] == list(task_split.indices())
    labels = torch.cat([graph.y for graph in task_split]).view(-1)
    assert torch.allclose(torch.tensor([float(row[f"{target}_label"]) for row in rows]), labels)
    scored = [row for row in rows if row["scored"] == "true"]
    assert all(row[target] == "" for row in rows if row["scored"] == "false")
    return sum(abs(float(row[target]) - float(row[f"{target}_label"])) for row in scored) / len(scored)


def test_graph_level_split_reproduces_the_records_mae(tmp_path, data_root, capsys):
    model_file, config, record = zinc_run(tmp_path, data_root)
    task = prepare_task(config)
    for part in ("val", "test"):
        out = tmp_path / f"{part}.csv"
        assert predict(model_file, out, "--split", part, "--batch-size", "7") == 0
        rows = read_rows(out)
        assert len(rows) == 60 and all(row["scored"] == "true" for row in rows)
        mae = check_graph_rows(rows, getattr(task, part), "zinc_0")
        value, recorded = printed_metric(capsys.readouterr().out)
        assert mae == pytest.approx(record[f"{part}_mae"], abs=1e-6)
        assert value == pytest.approx(record[f"{part}_mae"], abs=1e-6) and recorded == pytest.approx(
            record[f"{part}_mae"], abs=1e-6
        )


def test_graphormer_split_leaves_the_graphs_training_dropped_unscored(tmp_path, data_root, capsys):
    overrides = graphormer(max_nodes=25, drop_large_graphs=True)
    model_file, config, record = zinc_run(tmp_path, data_root, **overrides)
    assert record["dropped_graphs_test"] > 0
    out = tmp_path / "test.csv"
    assert predict(model_file, out, "--split", "test") == 0
    rows = read_rows(out)
    assert sum(row["scored"] == "false" for row in rows) == record["dropped_graphs_test"]
    mae = check_graph_rows(rows, prepare_task(config).test, "zinc_0")
    printed = capsys.readouterr().out
    assert f"{record['dropped_graphs_test']} above max_nodes unscored" in printed
    assert mae == pytest.approx(record["test_mae"], abs=1e-6)
    assert printed_metric(printed)[0] == pytest.approx(record["test_mae"], abs=1e-6)


def molecule_csv(path: Path) -> Path:
    """60 MolHIV molecules with a made-up regression target (heavy atoms / 10) and a split column."""
    with gzip.open(Path(os.environ[ENV_MIRROR]) / "ogb/ogbg_molhiv/mapping/mol.csv.gz", "rt") as handle:
        rows = (row["smiles"] for row in csv.DictReader(handle))
        smiles = list(itertools.islice((text for text in rows if parse_molecule(text) is not None), 60))
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles", "size", "part"])
        for i, text in enumerate(smiles):
            writer.writerow([text, parse_molecule(text).GetNumAtoms() / 10, ("train", "valid", "test")[i % 3]])
    return path


def test_graphormer_on_smiles_csv_and_split_give_the_same_predictions(tmp_path, data_root, capsys):
    path = molecule_csv(tmp_path / "molecules.csv")
    kwargs = {"path": str(path), "target_columns": ["size"], "task": "regression", "split": "part"}
    values = graphormer(dataset="smiles", dataset_kwargs=kwargs, data_root=str(data_root), epochs=2, batch_size=8)
    config = RunConfig.from_dict({**values, "checkpoint_dir": str(tmp_path / "ckpt"), "probe": False})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, _, record = train(config)
    model_file = model_file_path(config)
    assert predict(model_file, tmp_path / "split.csv", "--split", "test") == 0
    value, recorded = printed_metric(capsys.readouterr().out)
    assert value == pytest.approx(record["test_mae"], abs=1e-6) and recorded == pytest.approx(
        record["test_mae"], abs=1e-6
    )
    assert main(["predict", str(model_file), str(path), "--out", str(tmp_path / "csv.csv")]) == 0
    split_rows, csv_rows = read_rows(tmp_path / "split.csv"), read_rows(tmp_path / "csv.csv")
    assert len(csv_rows) == 60 and all(row["valid"] == "true" for row in csv_rows) and len(split_rows) == 20
    by_csv = [float(row["size"]) for row in csv_rows[2::3]]  # the test rows of the split column, in file order
    assert [float(row["size"]) for row in split_rows] == pytest.approx(by_csv, abs=1e-5)


# --- errors ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zinc_model(tmp_path_factory, data_root) -> Path:
    tmp_path = tmp_path_factory.mktemp("zinc")
    return zinc_run(tmp_path, data_root, limit_graphs=20, epochs=1)[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["molecules.csv", "--split", "test"], "give either a SMILES CSV (molecules.csv) or --split test"),
        ([], "give a SMILES CSV to score, or --split"),
        (["--split", "valid"], "--split 'valid': the run's dataset 'zinc' has the parts train, val, test"),
        (["--split", "test", "--smiles-column", "smiles"], "--smiles-column is for a SMILES CSV"),
        (["--split", "test", "--batch-size", "0"], "--batch-size must be >= 1"),
    ],
)
def test_predict_option_errors_are_one_line(tmp_path, zinc_model, capsys, args, message):
    assert predict(zinc_model, tmp_path / "out.csv", *args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(
    ("device", "cuda", "message"),
    [
        ("cuda", False, "--device 'cuda' but CUDA is not available on this machine; use --device cpu"),
        ("cuda:0", False, "CUDA is not available"),
        ("banana", True, "--device 'banana' is not a torch device"),
        ("cuda:7", True, "this machine has 1 CUDA device(s)"),
        ("meta", True, "predict runs on cpu, cuda, mps"),
    ],
)
@pytest.mark.parametrize("mode", ["csv", "split"])
def test_predict_device_errors_are_one_line(tmp_path, zinc_model, capsys, monkeypatch, device, cuda, message, mode):
    """A device this machine lacks, or no device at all, is one line before the model loads (CUDA faked)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
    (tmp_path / "molecules.csv").write_text("smiles\nCCO\n")
    source = [str(tmp_path / "molecules.csv")] if mode == "csv" else ["--split", "test"]
    assert predict(zinc_model, tmp_path / "out.csv", *source, "--device", device) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out.csv").exists()


def test_split_of_files_that_are_not_graphnorm_models(tmp_path, zinc_model, capsys):
    other = tmp_path / "other.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, other)
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    resume = zinc_model.with_name(zinc_model.name.replace(".model.pt", ".pt"))
    cases = [
        (other, "is not a graphnorm model file"),
        (text, "is not a readable graphnorm model file"),
        (resume, "it is a resume checkpoint; give the"),
        (tmp_path / "missing.model.pt", "not found"),
    ]
    for path, message in cases:
        assert predict(path, tmp_path / "out.csv", "--split", "test") == 2
        assert message in capsys.readouterr().err


def test_split_name_error_names_the_runs_standard_split(tmp_path, data_root, capsys):
    config = RunConfig(dataset="texas", split=3, data_root=str(data_root), num_layers=2, hidden_channels=8, epochs=2)
    model, task, record = train(config)
    save_model_file(tmp_path / "texas.model.pt", config, task, model, record)
    assert predict(tmp_path / "texas.model.pt", tmp_path / "out.csv", "--split", "3") == 2
    assert "the run used standard split 3 of 'texas', set by its config's split key" in capsys.readouterr().err
