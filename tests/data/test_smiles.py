"""Your own molecules: SMILES CSV datasets (OGB featurization, splits, invalid rows, cache), NaN-masked loss and
metric, the trained-model file and ``graphnorm predict``."""

from __future__ import annotations

import csv
import gzip
import math
import os
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from graphnorm.cli import main
from graphnorm.config import RunConfig
from graphnorm.data import load_dataset
from graphnorm.data.datasets import GraphTask
from graphnorm.data.root import ENV_MIRROR
from graphnorm.data.scoring import score as graph_metric
from graphnorm.data.scoring import task_loss as graph_loss
from graphnorm.data.smiles import InvalidSmilesError, parse_molecule, scaffold_of, scaffold_split, smiles_graph
from graphnorm.predict import predict_rows
from graphnorm.train import run, train

MOLHIV_SMILES = "ogb/ogbg_molhiv/mapping/mol.csv.gz"


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def molhiv_rows(data_root: Path) -> list[dict[str, str]]:
    """The rows of the offline ogbg-molhiv copy's SMILES file (HIV_active, smiles), in dataset order."""
    path = Path(os.environ[ENV_MIRROR]) / MOLHIV_SMILES
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the tests need the offline ogbg-molhiv copy (see docs/catalogue/datasets.md)"
        )
    with gzip.open(path, "rt") as handle:
        return list(csv.DictReader(handle))


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# --- (a) featurization identical to OGB's loader --------------------------------------------------------------------
def test_molhiv_smiles_give_the_ogb_loaders_graphs(data_root, molhiv_rows):
    task = load_dataset("molhiv", data_root)
    by_index = {}
    for split in (task.train, task.val, task.test):
        for position, index in enumerate(split.indices()):
            by_index[int(index)] = (split, position)
    sample = random.Random(0).sample(range(len(molhiv_rows)), 200)
    compared = 0
    for index in sample:
        ours = smiles_graph(molhiv_rows[index]["smiles"])
        if ours is None:  # this RDKit rejects a few of MolHIV's SMILES (hypervalent metals); counted below
            continue
        split, position = by_index[index]
        theirs = split[position]
        assert ours.x.dtype == theirs.x.dtype == torch.int64
        assert ours.edge_attr.dtype == theirs.edge_attr.dtype == torch.int64
        assert torch.equal(ours.x, theirs.x), index
        assert torch.equal(ours.edge_index, theirs.edge_index), index
        assert torch.equal(ours.edge_attr, theirs.edge_attr), index
        compared += 1
    assert compared >= 195


# --- (b) a small CSV through train and predict ----------------------------------------------------------------------
def small_csv(path: Path, molhiv_rows: list[dict[str, str]]) -> tuple[Path, list[int]]:
    """A two-target CSV: 120 MolHIV molecules, blank labels, and 3 invalid SMILES (returns their line numbers)."""
    rows, invalid_lines = [], []
    valid = [row["smiles"] for row in molhiv_rows[:400] if parse_molecule(row["smiles"]) is not None][:120]
    for i, smiles in enumerate(valid):
        a = i % 2 if i % 7 else ""  # blank cells: missing labels
        b = (i // 3) % 2 if i % 5 else ""
        rows.append([f"m{i}", smiles, a, b])
        if i in (10, 50, 90):
            rows.append([f"bad{i}", "C1CC(" if i != 50 else "not a smiles", 1, 0])
            invalid_lines.append(len(rows) + 1)  # + 1: the header is line 1
    return write_csv(path, ["id", "smiles", "active", "toxic"], rows), invalid_lines


def test_small_csv_round_trips_through_train_and_predict(tmp_path, data_root, molhiv_rows, capsys):
    path, invalid_lines = small_csv(tmp_path / "mols.csv", molhiv_rows)
    config = RunConfig(
        dataset="smiles",
        dataset_kwargs={"path": str(path), "target_columns": ["active", "toxic"], "invalid": "skip"},
        data_root=str(data_root),
        num_layers=2,
        hidden_channels=16,
        epochs=2,
        batch_size=32,
        checkpoint_dir=str(tmp_path / "ckpt"),
        probe=False,
    )
    with pytest.warns(UserWarning, match="3 invalid SMILES"):
        record = run(config)
    assert record["invalid_smiles_skipped"] == 3
    assert 0.0 <= record["test_rocauc"] <= 1.0 and record["epochs_run"] == 2
    model_files = list((tmp_path / "ckpt").glob("*.model.pt"))
    assert len(model_files) == 1
    saved = torch.load(model_files[0], weights_only=True)
    assert (saved["format"], saved["weights"], saved["config"]["dataset_kwargs"]) == (
        "graphnorm-model",
        "best-validation",
        config.dataset_kwargs,
    )
    assert saved["task"]["target_names"] == ["active", "toxic"] and saved["task"]["task_type"] == "binary"
    assert saved["scores"]["test_rocauc"] == record["test_rocauc"]
    resume_checkpoint = model_files[0].with_name(model_files[0].name.replace(".model.pt", ".pt"))
    assert main(["predict", str(resume_checkpoint), str(path), "--out", str(tmp_path / "p.csv")]) == 2
    assert "it is a resume checkpoint; give the" in capsys.readouterr().err
    out = tmp_path / "predictions.csv"
    assert main(["predict", str(model_files[0]), str(path), "--out", str(out)]) == 0
    with open(path) as handle:
        inputs = list(csv.DictReader(handle))
    with open(out) as handle:
        predictions = list(csv.DictReader(handle))
    assert len(predictions) == len(inputs) == 123
    assert [p["smiles"] for p in predictions] == [row["smiles"] for row in inputs]  # input order
    invalid = [int(p["line"]) for p in predictions if p["valid"] == "false"]
    assert invalid == invalid_lines
    for p in predictions:
        if p["valid"] == "false":
            assert p["active"] == p["toxic"] == ""
        else:
            assert 0.0 < float(p["active"]) < 1.0 and 0.0 < float(p["toxic"]) < 1.0  # sigmoid probabilities


def test_predictions_equal_the_trained_models_outputs(tmp_path, data_root, molhiv_rows):
    """The model file holds the best-validation weights: predict reproduces the run's test ROC-AUC."""
    path, _ = small_csv(tmp_path / "mols.csv", molhiv_rows)
    kwargs = {"path": str(path), "target_columns": ["active", "toxic"], "invalid": "skip", "split": "random"}
    config = RunConfig(
        dataset="smiles",
        dataset_kwargs=kwargs,
        data_root=str(data_root),
        hidden_channels=16,
        epochs=3,
        batch_size=32,
        checkpoint_dir=str(tmp_path / "ckpt"),
        ema_decay=0.9,
        probe=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, task, record = train(config)
    model_file = next((tmp_path / "ckpt").glob("*.model.pt"))
    scores = torch.tensor(predict_rows(model_file, _test_rows(path, task)), dtype=torch.float64)
    y = task.test._data.y[torch.as_tensor(task.test.indices())]
    # ROC-AUC ranks: the probabilities score like the logits the run evaluated
    assert graph_metric(task, scores, y) == pytest.approx(record["test_rocauc"], abs=1e-6)


def _test_rows(path: Path, task: GraphTask) -> list[str]:
    """The SMILES of ``task.test`` in order, read back from the CSV (the valid rows, in file order)."""
    with open(path) as handle:
        valid = [row["smiles"] for row in csv.DictReader(handle) if parse_molecule(row["smiles"]) is not None]
    return [valid[int(i)] for i in task.test.indices()]


# --- (c) scaffold split ---------------------------------------------------------------------------------------------
def test_scaffold_split_is_80_10_10_with_no_shared_scaffold(molhiv_rows):
    smiles = [row["smiles"] for row in molhiv_rows[:600] if parse_molecule(row["smiles"]) is not None]
    split = scaffold_split(smiles)
    sizes = {name: len(indices) for name, indices in split.items()}
    assert sum(sizes.values()) == len(smiles)
    assert sorted(i for indices in split.values() for i in indices) == list(range(len(smiles)))
    assert abs(sizes["train"] / len(smiles) - 0.8) < 0.02
    assert abs(sizes["valid"] / len(smiles) - 0.1) < 0.03 and abs(sizes["test"] / len(smiles) - 0.1) < 0.03
    scaffolds = {name: {scaffold_of(smiles[i]) for i in indices} for name, indices in split.items()}
    assert not scaffolds["train"] & scaffolds["valid"]
    assert not scaffolds["train"] & scaffolds["test"]
    assert not scaffolds["valid"] & scaffolds["test"]
    assert scaffold_split(list(smiles)) == split  # deterministic


def test_scaffold_sets_go_largest_first_to_train():
    # 5 benzene-scaffold molecules, 3 with a cyclohexane scaffold, one each of 2 more: sizes 5, 3, 1, 1 of 10.
    smiles = ["c1ccccc1C", "c1ccccc1O", "c1ccccc1N", "c1ccccc1CC", "c1ccccc1Cl"]
    smiles += ["C1CCCCC1C", "C1CCCCC1O", "C1CCCCC1N", "C1CC1C", "C1CCC1C"]
    split = scaffold_split(smiles)
    # equal sizes: deepchem's sort (size, first index), largest first, puts the later molecule's set first
    assert split == {"train": [0, 1, 2, 3, 4, 5, 6, 7], "valid": [9], "test": [8]}


# --- (d) invalid SMILES -------------------------------------------------------------------------------------------
def test_invalid_smiles_fail_with_their_line_numbers_or_are_skipped(tmp_path, data_root):
    rows = [["CCO", 1], ["C1CC(", 0], ["c1ccccc1", 1], ["", 0], ["CC(=O)O", 0], ["XYZ", 1]] + [["CCN", 0]] * 20
    path = write_csv(tmp_path / "bad.csv", ["smiles", "y"], rows)
    with pytest.raises(InvalidSmilesError, match=r"3 invalid SMILES in column 'smiles' at line\(s\) 3, 5, 7;"):
        load_dataset("smiles", data_root, path=str(path), target_columns=["y"], split="random")
    with pytest.warns(UserWarning, match=r"3 invalid SMILES in column 'smiles' at line\(s\) 3, 5, 7;.*left out"):
        task = load_dataset("smiles", data_root, path=str(path), target_columns=["y"], split="random", invalid="skip")
    assert task.stats == {"invalid_smiles_skipped": 3}
    assert len(task.train) + len(task.val) + len(task.test) == len(rows) - 3
    with pytest.warns(UserWarning, match="3 invalid SMILES"):  # a cache hit reports them too
        load_dataset("smiles", data_root, path=str(path), target_columns=["y"], split="random", invalid="skip")


def test_bad_options_and_cells_are_one_line_errors(tmp_path, data_root):
    path = write_csv(tmp_path / "m.csv", ["smiles", "y", "fold"], [["CCO", 2, "train"], ["CCC", 1, "dev"]])
    with pytest.raises(ValueError, match=r"line 2: column 'y' holds '2'; a classification target must be 0, 1"):
        load_dataset("smiles", data_root, path=str(path), target_columns=["y"])
    with pytest.raises(ValueError, match=r"has no column\(s\) \['z'\]; its columns: smiles, y, fold"):
        load_dataset("smiles", data_root, path=str(path), target_columns=["z"])
    with pytest.raises(ValueError, match="split column 'fold' must hold train, valid .* lines 3 \\('dev'\\)"):
        load_dataset("smiles", data_root, path=str(path), target_columns=["y"], task="regression", split="fold")
    with pytest.raises(FileNotFoundError, match="nope.csv not found"):
        load_dataset("smiles", data_root, path=str(tmp_path / "nope.csv"), target_columns=["y"])
    with pytest.raises(ValueError, match="dataset='smiles' needs dataset_kwargs.path"):
        RunConfig(dataset="smiles", dataset_kwargs={"target_columns": ["y"]}).validate()
    with pytest.raises(ValueError, match=r"unknown dataset_kwargs \['colum'\]"):
        RunConfig(dataset="smiles", dataset_kwargs={"path": "x.csv", "colum": "s"}).validate()
    with pytest.raises(ValueError, match="task must be one of 'classification', 'regression'; got 'cls'"):
        RunConfig(dataset="smiles", dataset_kwargs={"path": "x.csv", "target_columns": ["y"], "task": "cls"}).validate()
    message = r"dataset_kwargs are for datasets with options \(csbm, smiles\), not dataset='zinc'"
    with pytest.raises(ValueError, match=message):
        RunConfig(dataset="zinc", dataset_kwargs={"path": "x.csv"}).validate()


@pytest.mark.parametrize("split", ["scaffold", "random", "fold"])
@pytest.mark.parametrize("molecules", [1, 2])
def test_a_csv_too_small_to_split_says_so_in_one_line(tmp_path, data_root, split, molecules):
    """One molecule used to crash in the collation (TypeError: 'NoneType' object is not iterable); two gave an empty
    split without saying why. Each is one line naming the file, the molecule count and the three splits."""
    rows = [["CCO", 1, "train"], ["c1ccccc1", 0, "test"]][:molecules]
    path = write_csv(tmp_path / f"tiny{molecules}.csv", ["smiles", "y", "fold"], rows)
    with pytest.raises(ValueError) as caught:
        load_dataset("smiles", data_root, path=str(path), target_columns=["y"], split=split)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and f"{molecules} valid molecule" in message, message
    assert "train, valid and test" in message, message


def test_split_column(tmp_path, data_root):
    folds = ["train"] * 6 + ["Valid", "val", "TEST", "test"]
    rows = [
        [s, i * 0.5, f]
        for i, (s, f) in enumerate(zip(["C", "CC", "CCC", "CCO", "CCN", "CO", "N", "O", "CN", "S"], folds))
    ]
    path = write_csv(tmp_path / "f.csv", ["smiles", "logp", "fold"], rows)
    task = load_dataset("smiles", data_root, path=str(path), target_columns=["logp"], task="regression", split="fold")
    assert (task.metric, len(task.train), len(task.val), len(task.test)) == ("mae", 6, 2, 2)
    assert task.test[1].y.item() == 4.5


# --- (e) cache --------------------------------------------------------------------------------------------------------
def test_cache_hit_on_same_content_and_miss_after_an_edit(tmp_path):
    data_root = tmp_path / "root"  # a fresh data root: the first load must featurize and write the cache
    rows = [[s, i % 2] for i, s in enumerate(["CCO", "CCN", "c1ccccc1", "CC(=O)O", "CCCl", "C1CCCCC1", "CCBr"] * 4)]
    path = write_csv(tmp_path / "c.csv", ["smiles", "y"], rows)
    options = dict(path=str(path), target_columns=["y"], split="random")
    first = load_dataset("smiles", data_root, **options)
    cache = Path(first.train.root) / "graphs.pt"
    written = cache.stat().st_mtime_ns
    second = load_dataset("smiles", data_root, **options)
    assert Path(second.train.root) == Path(first.train.root) and cache.stat().st_mtime_ns == written  # a hit
    assert torch.equal(second.train._data.x, first.train._data.x)
    write_csv(path, ["smiles", "y"], rows[:-1] + [["CCCCCC", 1]])  # same name, other content
    edited = load_dataset("smiles", data_root, **options)
    assert Path(edited.train.root) != Path(first.train.root)
    assert edited.train._data.x.shape[0] != first.train._data.x.shape[0]
    other_seed = load_dataset("smiles", data_root, **options, split_seed=1)  # other options: another cache
    assert Path(other_seed.train.root) != Path(edited.train.root)
    assert len(list((data_root / "smiles").glob("*/graphs.pt"))) == 3
    damaged = Path(edited.train.root) / "graphs.pt"
    damaged.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="unreadable; featurizing again"):
        again = load_dataset("smiles", data_root, **options)
    assert torch.equal(again.train._data.x, edited.train._data.x) and damaged.stat().st_size > 100


# --- (f) NaN-masked loss and metric ---------------------------------------------------------------------------------
def masked_task(task_type: str, metric: str, outputs: int) -> GraphTask:
    return GraphTask(name="t", level="graph", task_type=task_type, metric=metric, num_features=9, num_outputs=outputs)


def test_nan_targets_are_left_out_of_loss_and_metric():
    generator = torch.Generator().manual_seed(0)
    outputs = torch.randn(40, 3, generator=generator)
    y = (torch.rand(40, 3, generator=generator) > 0.5).float()
    y[torch.rand(40, 3, generator=generator) < 0.3] = math.nan
    y[:, 2] = torch.where(torch.isnan(y[:, 2]), y[:, 2], torch.ones(40))  # task 2: one class only, not scored
    binary = masked_task("binary", "rocauc", 3)
    observed = ~torch.isnan(y)
    expected_loss = (
        sum(
            torch.nn.functional.binary_cross_entropy_with_logits(outputs[i, j], y[i, j], reduction="sum")
            for i, j in observed.nonzero().tolist()
        )
        / observed.sum()
    )
    assert graph_loss(binary, outputs, y).item() == pytest.approx(float(expected_loss), rel=1e-6)
    aucs = [roc_auc_score(y[observed[:, j], j].numpy(), outputs[observed[:, j], j].numpy()) for j in (0, 1)]
    assert graph_metric(binary, outputs, y) == pytest.approx(float(np.mean(aucs)), rel=1e-12)

    regression = masked_task("regression", "mae", 3)
    values = torch.randn(40, 3, generator=generator)
    values[observed.logical_not()] = math.nan
    errors = [abs(float(outputs[i, j] - values[i, j])) for i, j in observed.nonzero().tolist()]
    assert graph_loss(regression, outputs, values).item() == pytest.approx(np.mean(errors), rel=1e-6)
    assert graph_metric(regression, outputs, values) == pytest.approx(np.mean(errors), rel=1e-6)


def test_a_batch_without_labels_gives_zero_loss_with_gradient():
    outputs = torch.randn(4, 2, requires_grad=True)
    loss = graph_loss(masked_task("binary", "rocauc", 2), outputs, torch.full((4, 2), math.nan))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(outputs.grad, torch.zeros(4, 2))
