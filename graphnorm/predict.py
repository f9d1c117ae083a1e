"""``graphnorm predict MODEL INPUT.csv --out predictions.csv``: score new molecules with a trained model.

The model file (:mod:`graphnorm.model_file`) rebuilds the model with its best-validation (or EMA) weights. Every
SMILES is featurized as in training (``ogb.utils.smiles2graph``), so the model must have been trained on OGB-featurized
molecules (``molhiv`` or a ``smiles`` CSV). The output has one row per input data row, in input order: ``line`` (its
line in the input file), the SMILES column, ``valid`` (``false`` for a SMILES RDKit cannot parse, whose prediction
cells stay empty) and one column per target: a probability (sigmoid of the logit) for classification, the value for
regression.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from graphnorm.config import RunConfig
from graphnorm.data.loaders import collate_for
from graphnorm.data.smiles import file_text, read_smiles_csv, smiles_graph
from graphnorm.model_file import load_model_file
from graphnorm.models import model_outputs, model_spec
from graphnorm.sweep_tables import atomic_write_text

DEFAULT_BATCH_SIZE = 256


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
    """Write the predictions for every row of ``input_csv`` to ``out_csv`` (see the module docstring); returns
    ``rows``, ``invalid`` and ``seconds`` (featurizing and scoring, without loading the model)."""
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
    writer.writerow(["line", smiles_column, "valid", *target_names])
    for line, text, values in zip(lines, smiles, predictions):
        cells = [repr(value) for value in values] if values is not None else [""] * len(target_names)
        writer.writerow([line, text, "true" if values is not None else "false", *cells])
    atomic_write_text(out, buffer.getvalue())
