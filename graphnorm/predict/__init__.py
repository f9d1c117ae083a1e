"""``graphnorm predict``: score new molecules, or a split of the run's own dataset, with a trained model.

The model file (:mod:`graphnorm.train.model_file`) rebuilds the model with its best-validation (or EMA) weights.
``graphnorm predict MODEL INPUT.csv --out predictions.csv`` scores the SMILES of a CSV (:func:`predict_csv`);
``graphnorm predict MODEL --split test --out predictions.csv`` scores a part of the run's own dataset and recomputes
its metric beside the run's record (:func:`predict_split`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from graphnorm.config import RunConfig
from graphnorm.data import GraphTask
from graphnorm.data.scoring import score
from graphnorm.data.smiles import file_text, read_smiles_csv, smiles_graph
from graphnorm.escaping import csv_text
from graphnorm.files import atomic_write_text
from graphnorm.models import model_outputs, model_spec
from graphnorm.train.command_input import check_outside_data_root
from graphnorm.train.loaders import SPLITS, collate_for, prepare_task
from graphnorm.train.model_file import load_model_file
from graphnorm.train.node_level import node_eval_mask, sparse_features_help

DEFAULT_BATCH_SIZE = 256


DEVICE_TYPES = ("cpu", "cuda", "mps")  # where a model file can be loaded and scored


def check_device(name: str) -> torch.device:
    """The torch device ``name`` (``cpu``, ``cuda``, ``cuda:<index>``, ``mps``), or ``ValueError`` in one line when
    it is no device name, or names a device this machine does not have."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device {name!r} is not a torch device; use cpu, cuda, cuda:<index> or mps") from None
    if device.type not in DEVICE_TYPES:
        raise ValueError(f"--device {name!r}: predict runs on {', '.join(DEVICE_TYPES)}; use --device cpu")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"--device {name!r} but CUDA is not available on this machine; use --device cpu")
        if device.index is not None and device.index >= count:
            raise ValueError(f"--device {name!r} but this machine has {count} CUDA device(s) (cuda:0..{count - 1})")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name!r} but MPS is not available on this machine; use --device cpu")
    return device


@torch.no_grad()
def score_graphs(model: nn.Module, config: RunConfig, graphs: list, batch_size: int) -> Tensor:
    """The model's outputs ``[len(graphs), outputs]`` for PyG graphs, in their order (Graphormer: preprocessed and
    collated as in training)."""
    device = next(model.parameters()).device
    inputs = model_spec(config.model).inputs
    outputs = []
    for start in range(0, len(graphs), batch_size):
        batch = collate_for(graphs[start : start + batch_size], config, inputs)
        outputs.append(model_outputs(model, batch.to(device)).cpu())
    return torch.cat(outputs) if outputs else torch.empty(0)


def predict_smiles(
    model: nn.Module, config: RunConfig, task_type: str, smiles: list[str], batch_size: int = DEFAULT_BATCH_SIZE
) -> list[list[float] | None]:
    """One prediction list per SMILES (probabilities or values, one per target), ``None`` for an invalid SMILES."""
    graphs = [smiles_graph(text) for text in smiles]
    valid = [graph for graph in graphs if graph is not None]
    scores = score_graphs(model, config, valid, batch_size) if valid else torch.empty(0)
    if task_type == "binary":
        scores = torch.sigmoid(scores)
    rows = iter(scores.double().tolist())
    return [next(rows) if graph is not None else None for graph in graphs]


def predict_rows(model_file: str | Path, smiles: list[str], device: str = "cpu") -> list[list[float] | None]:
    """:func:`predict_smiles` with the model of ``model_file``."""
    model, config, task = checked_model(model_file, device)
    return predict_smiles(model, config, task.task_type, smiles)


def checked_model(model_file: str | Path, device: str):
    """The model file's model, config and task, refusing models that do not take OGB molecule graphs."""
    model, config, task = load_model_file(model_file, device)
    if task.atom_encoder != "ogb":
        raise ValueError(
            f"{model_file} was trained on {task.name!r} ({task.atom_encoder or 'float'} features); predict featurizes "
            "SMILES like OGB's molecule datasets, so it scores models trained on molhiv or a smiles CSV"
        )
    return model, config, task


def predict_csv(
    model_file: str | Path,
    input_csv: str | Path,
    out_csv: str | Path,
    smiles_column: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str = "cpu",
) -> dict[str, float]:
    """Write the predictions for every row of ``input_csv`` to ``out_csv``; returns ``rows``, ``invalid`` and
    ``seconds`` (featurizing and scoring, without loading the model).

    Every SMILES is featurized as in training (``ogb.utils.smiles2graph``), so the model must have been trained on
    OGB-featurized molecules (``molhiv`` or a ``smiles`` CSV; else ``ValueError``). The output has one row per input
    data row, in input order: ``line`` (its line in the input file), the SMILES column, ``valid`` (``false`` for a
    SMILES RDKit cannot parse, whose prediction cells stay empty) and one column per target: a probability (sigmoid
    of the logit) for classification, the value for regression. ``FileNotFoundError`` for a missing input.
    """
    model, config, task = checked_model(model_file, device)
    if smiles_column is None:  # the training CSV's column name, else "smiles"
        smiles_column = config.dataset_kwargs.get("smiles_column", "smiles")
    path = Path(input_csv)
    if not path.is_file():
        raise FileNotFoundError(f"input CSV {path} not found")
    rows = read_smiles_csv(path, file_text(path.read_bytes(), path), smiles_column, [], "regression")
    start = time.perf_counter()
    predictions = predict_smiles(model, config, task.task_type, rows.smiles, batch_size)
    seconds = time.perf_counter() - start
    write_predictions(Path(out_csv), rows.lines, rows.smiles, predictions, smiles_column, task.target_names)
    invalid = sum(prediction is None for prediction in predictions)
    return {"rows": len(predictions), "invalid": invalid, "seconds": seconds}


def write_predictions(
    out: Path,
    lines: list[int],
    smiles: list[str],
    predictions: list[list[float] | None],
    smiles_column: str,
    target_names: list[str],
) -> None:
    """The predictions CSV, written to a temporary file and renamed (a kill leaves no partial output)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    # Text from the user's file (SMILES, column and target names) could read as a formula in a spreadsheet
    writer.writerow(["line", csv_text(smiles_column), "valid", *map(csv_text, target_names)])
    for line, text, values in zip(lines, smiles, predictions):
        cells = [repr(value) for value in values] if values is not None else [""] * len(target_names)
        writer.writerow([line, csv_text(text), "true" if values is not None else "false", *cells])
    atomic_write_text(out, buffer.getvalue())


# --- a split of the run's own dataset -------------------------------------------------------------------------------
@dataclasses.dataclass
class SplitPart:
    """The nodes or graphs of one part of a split, scored: ``index`` (node index in the graph, or graph index in the
    dataset), ``outputs`` ``[n, outputs]`` (NaN rows where ``scored`` is false), ``labels`` as the run's metric takes
    them, and ``scored`` (false: a graph above Graphormer's ``max_nodes`` that training left out too)."""

    index: Tensor
    outputs: Tensor
    labels: Tensor
    scored: Tensor


@dataclasses.dataclass
class SplitScores:
    """What :func:`predict_split` did: the part's metric recomputed (``value``) and the run's record of it
    (``recorded``; ``None`` for ``train``, which the record does not score)."""

    split: str
    level: str
    metric: str
    value: float
    recorded: float | None
    rows: int
    unscored: int
    seconds: float


def predict_split(
    model_file: str | Path,
    split: str,
    out_csv: str | Path,
    data_root: str | None = None,
    batch_size: int | None = None,
    device: str = "cpu",
) -> SplitScores:
    """Score part ``split`` (``train``, ``val``, ``test``) of the run's own dataset with the model of ``model_file``,
    write one row per node or graph to ``out_csv`` (:func:`write_split_predictions`) and return the part's metric.

    The dataset is loaded with the run config's dataset keys (``dataset_kwargs``, ``split``, ``feature_norm``,
    ``limit_graphs``) from ``data_root``, else the run's ``data_root``, else the default root (``$GRAPHNORM_DATA``,
    else the user cache, seeded from ``$GRAPHNORM_DATA_MIRROR``). At node level ``test`` is the nodes the run
    evaluated (``eval_nodes``: the test mask, or every node outside train+val). Graphs go ``batch_size`` at a time
    (default: the run's). ``ValueError`` for another part name or a dataset that no longer matches the model."""
    model, config, saved_task = load_model_file(model_file, device)
    check_split_name(split, config)
    check_outside_data_root(Path(out_csv), data_root if data_root is not None else config.data_root, f"--out {out_csv}")
    task = load_run_task(config, saved_task, data_root)
    start = time.perf_counter()
    if task.level == "node":
        part = node_part(model, task, config, split)
    else:
        part = graph_part(model, task, config, split, batch_size or config.batch_size)
    scored = part.scored
    value = score(task, part.outputs[scored], part.labels[scored])
    seconds = time.perf_counter() - start
    write_split_predictions(Path(out_csv), task, part, saved_task.target_names)
    recorded = torch.load(model_file, map_location="cpu", weights_only=True)["scores"].get(f"{split}_{task.metric}")
    unscored = int((~scored).sum())
    return SplitScores(split, task.level, task.metric, value, recorded, len(scored), unscored, seconds)


def check_split_name(split: str, config: RunConfig) -> None:
    """``ValueError`` unless ``split`` names a part of the run's split."""
    if split in SPLITS:
        return
    hint = ""
    if config.split is not None:  # a dataset with several standard splits: the run's is fixed by its config
        hint = f"; the run used standard split {config.split} of {config.dataset!r}, set by its config's split key"
    raise ValueError(f"--split {split!r}: the run's dataset {config.dataset!r} has the parts {', '.join(SPLITS)}{hint}")


def load_run_task(config: RunConfig, saved: GraphTask, data_root: str | None) -> GraphTask:
    """The run's dataset as the run loaded it, from ``data_root`` (else the run's), checked against the model."""
    root = data_root if data_root is not None else config.data_root
    task = prepare_task(dataclasses.replace(config, data_root=root))
    loaded = (task.level, task.task_type, task.num_features, task.num_outputs)
    if loaded != (saved.level, saved.task_type, saved.num_features, saved.num_outputs):
        raise ValueError(
            f"dataset {config.dataset!r} now loads as (level, task type, features, outputs) {loaded}, but the model "
            f"was trained on {(saved.level, saved.task_type, saved.num_features, saved.num_outputs)}"
        )
    return task


@torch.no_grad()
def node_part(model: nn.Module, task: GraphTask, config: RunConfig, split: str) -> SplitPart:
    """The nodes of ``split``, scored on the whole graph as in training (``test``: the nodes the run evaluated)."""
    mask = node_eval_mask(task, config.eval_nodes) if split == "test" else getattr(task.data, f"{split}_mask")
    data = task.data.to(next(model.parameters()).device)
    if sparse_features_help(model, data.x):  # the input the run evaluated, so the same rounding
        data = data.clone()
        data.x = data.x.to_sparse()
    outputs = model_outputs(model, data).cpu()
    labels = task.data.y.cpu()
    return SplitPart(mask.nonzero().view(-1), outputs[mask], labels[mask], torch.ones(int(mask.sum()), dtype=bool))


def graph_part(model: nn.Module, task: GraphTask, config: RunConfig, split: str, batch_size: int) -> SplitPart:
    """The graphs of ``split`` in dataset order; for Graphormer with ``drop_large_graphs``, the graphs above
    ``max_nodes`` stay unscored, as training left them out of its metric."""
    dataset = getattr(task, split)
    graphs = [dataset[i] for i in range(len(dataset))]
    scored = torch.ones(len(graphs), dtype=torch.bool)
    if model_spec(config.model).inputs != "pyg" and config.max_nodes is not None and config.drop_large_graphs:
        scored = torch.tensor([int(graph.num_nodes) <= config.max_nodes for graph in graphs], dtype=torch.bool)
    kept = [graph for graph, keep in zip(graphs, scored.tolist()) if keep]
    outputs = torch.full((len(graphs), task.num_outputs), float("nan"))
    if kept:
        outputs[scored] = score_graphs(model, config, kept, batch_size).float()
    labels = torch.cat([graph.y for graph in graphs])  # as the run's loaders batch them
    return SplitPart(torch.as_tensor(list(dataset.indices())), outputs, labels, scored)


def write_split_predictions(out: Path, task: GraphTask, part: SplitPart, target_names: list[str]) -> None:
    """One row per node (``node``) or graph (``graph``, then ``scored``). Multiclass: ``prediction`` (the arg-max
    class), ``label`` and ``prob_<class>`` (softmax); binary and regression: one column per target (probability or
    value) and its ``<target>_label``. Empty cells: a missing label, an unscored graph."""
    multiclass = task.task_type == "multiclass"
    if multiclass:
        values = torch.softmax(part.outputs.double(), dim=1)
        header = ["prediction", "label", *(f"prob_{k}" for k in range(values.shape[1]))]
    else:
        values = torch.sigmoid(part.outputs.double()) if task.task_type == "binary" else part.outputs.double()
        header = [*target_names, *(f"{name}_label" for name in target_names)]
    labels = part.labels.view(len(part.index), -1).double()
    graph_level = task.level == "graph"
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["graph", "scored", *header] if graph_level else ["node", *header])
    for i, index in enumerate(part.index.tolist()):
        scored = bool(part.scored[i])
        row = [index, "true" if scored else "false"] if graph_level else [index]
        cells = [repr(v) if scored else "" for v in values[i].tolist()]
        label = [_cell(v, multiclass) for v in labels[i].tolist()]
        if multiclass:
            row += [int(values[i].argmax()) if scored else "", *label, *cells]
        else:
            row += [*cells, *label]
        writer.writerow(row)
    atomic_write_text(out, buffer.getvalue())


def _cell(value: float, integer: bool) -> str:
    """A label cell: empty for a missing (NaN) label, an integer class id, or the value."""
    if value != value:
        return ""
    return str(int(value)) if integer else repr(value)
