"""Your own molecules: a graph-level dataset from a CSV file of SMILES strings and target columns.

``load_dataset("smiles", path="mols.csv", smiles_column="smiles", target_columns=["a", "b"], task="classification",
split="scaffold")`` (:func:`load_smiles`) featurizes every SMILES with OGB's own ``ogb.utils.smiles2graph`` (RDKit),
so each graph is laid out exactly as an ``ogbg-mol*`` graph (:func:`smiles_graph`). The processed graphs and splits
are cached under ``<data root>/smiles/<file stem>-<sha256 of the file>-<hash of the options>/``, so an edited file,
or other options, are processed afresh (:func:`read_cache`); a run's id hashes the file's content in place of its
path (:func:`run_identity`).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import os
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data, InMemoryDataset

from graphnorm.checks import check_choice
from graphnorm.data.datasets import GraphTask
from graphnorm.data.registry import DatasetSpec, register_dataset
from graphnorm.data.root import dataset_lock
from graphnorm.files import atomic_write

TASKS = ("classification", "regression")
INVALID_CHOICES = ("error", "skip")
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)  # train / valid / test, as OGB's and MoleculeNet's scaffold splits
SPLIT_VALUES = {"train": "train", "valid": "valid", "val": "valid", "test": "test"}  # split column cell -> split
SHOWN_LINES = 10  # line numbers listed in an error or warning
CACHE_VERSION = 1  # bump when the cached layout or the featurization changes
OGB_BOND_FEATURES = 3


class InvalidSmilesError(ValueError):
    """The CSV has SMILES that RDKit cannot parse (and ``invalid="error"``)."""


@dataclass
class SmilesRows:
    """The rows of a SMILES CSV: line numbers (1 = header), SMILES, targets ``[rows, T]`` (NaN = blank), split cells."""

    lines: list[int]
    smiles: list[str]
    targets: Tensor
    split_cells: list[str] | None = None


# --- reading the file -----------------------------------------------------------------------------------------
def file_text(raw: bytes, path: Path) -> str:
    """The file's text (gunzipped for ``.gz``; a UTF-8 byte-order mark removed)."""
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from None


def read_smiles_csv(
    path: Path, text: str, smiles_column: str, target_columns: list[str], task: str, split_column: str | None = None
) -> SmilesRows:
    """Parse the CSV ``text`` of ``path``: one entry per non-blank data row, with the line where the row starts."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        raise ValueError(f"{path} is empty: a SMILES CSV needs a header row naming its columns")
    header = [name.strip() for name in header]
    wanted = [smiles_column, *target_columns, *([split_column] if split_column else [])]
    missing = [name for name in wanted if name not in header]
    if missing:
        raise ValueError(f"{path} has no column(s) {missing}; its columns: {', '.join(header)}")
    position = {name: header.index(name) for name in wanted}
    rows = SmilesRows(lines=[], smiles=[], targets=torch.empty(0), split_cells=[] if split_column else None)
    values: list[list[float]] = []
    start = reader.line_num + 1
    for cells in reader:
        line, start = start, reader.line_num + 1
        if not any(cell.strip() for cell in cells):
            continue  # a blank line is not a row
        cell = {name: (cells[i].strip() if i < len(cells) else "") for name, i in position.items()}
        rows.lines.append(line)
        rows.smiles.append(cell[smiles_column])
        values.append([parse_target(cell[name], name, task, path, line) for name in target_columns])
        if split_column:
            rows.split_cells.append(cell[split_column])
    rows.targets = torch.tensor(values, dtype=torch.float32).view(len(rows.lines), len(target_columns))
    return rows


def parse_target(cell: str, column: str, task: str, path: Path, line: int) -> float:
    """A target cell as a float: blank -> NaN (missing label); classification labels must be 0 or 1."""
    if cell == "":
        return math.nan
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (task == "classification" and value not in (0.0, 1.0)):
        wanted = "0, 1 or blank" if task == "classification" else "a finite number or blank"
        raise ValueError(f"{path} line {line}: column {column!r} holds {cell!r}; a {task} target must be {wanted}")
    return value


# --- molecules --------------------------------------------------------------------------------------------------
def parse_molecule(smiles: str):
    """RDKit's molecule for ``smiles``, or None when it cannot be parsed or has no atoms (RDKit's log silenced: the
    loader reports invalid rows itself)."""
    from rdkit import Chem, RDLogger

    if not smiles:
        return None
    RDLogger.DisableLog("rdApp.*")
    try:
        molecule = Chem.MolFromSmiles(smiles)
    finally:
        RDLogger.EnableLog("rdApp.*")
    return molecule if molecule is not None and molecule.GetNumAtoms() > 0 else None


def smiles_graph(smiles: str, y: Tensor | None = None) -> Data | None:
    """The OGB graph of ``smiles`` (``ogb.utils.smiles2graph``, int64 features), or None if the SMILES is invalid."""
    from ogb.utils import smiles2graph

    if parse_molecule(smiles) is None:
        return None
    graph = smiles2graph(smiles)
    data = Data(
        edge_index=torch.from_numpy(graph["edge_index"]),
        edge_attr=torch.from_numpy(graph["edge_feat"]).view(-1, OGB_BOND_FEATURES),
        x=torch.from_numpy(graph["node_feat"]),
        num_nodes=int(graph["num_nodes"]),
    )
    if y is not None:
        data.y = y.view(1, -1)
    return data


def scaffold_of(smiles: str) -> str:
    """The Bemis-Murcko scaffold SMILES (chirality kept), as deepchem/OGB compute it; '' for acyclic molecules."""
    from rdkit.Chem.Scaffolds import MurckoScaffold

    return MurckoScaffold.MurckoScaffoldSmiles(mol=parse_molecule(smiles), includeChirality=True)


# --- splits -----------------------------------------------------------------------------------------------------
def scaffold_split(smiles: list[str]) -> dict[str, list[int]]:
    """OGB/MoleculeNet scaffold split of ``smiles`` (all valid) into train/valid/test index lists (80/10/10).

    Bemis-Murcko scaffold sets (:func:`scaffold_of`), sorted by size, largest first (ties: the set whose first molecule
    comes later, as deepchem sorts); each set goes whole to train while train stays within 80%, else to valid while
    train + valid stay within 90%, else to test. Deterministic.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for index, molecule in enumerate(smiles):
        groups[scaffold_of(molecule)].append(index)
    ordered = sorted(groups.values(), key=lambda group: (len(group), group[0]), reverse=True)
    train_cutoff = SPLIT_FRACTIONS[0] * len(smiles)
    valid_cutoff = (SPLIT_FRACTIONS[0] + SPLIT_FRACTIONS[1]) * len(smiles)
    split: dict[str, list[int]] = {"train": [], "valid": [], "test": []}
    for group in ordered:
        if len(split["train"]) + len(group) > train_cutoff:
            if len(split["train"]) + len(split["valid"]) + len(group) > valid_cutoff:
                split["test"] += group
            else:
                split["valid"] += group
        else:
            split["train"] += group
    return {name: sorted(indices) for name, indices in split.items()}


def random_split(count: int, seed: int) -> dict[str, list[int]]:
    """A seeded random 80/10/10 split of ``count`` molecules."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    train_end = round(SPLIT_FRACTIONS[0] * count)
    valid_end = train_end + round(SPLIT_FRACTIONS[1] * count)
    parts = {"train": order[:train_end], "valid": order[train_end:valid_end], "test": order[valid_end:]}
    return {name: sorted(indices) for name, indices in parts.items()}


def column_split(cells: list[str], lines: list[int], column: str, path: Path) -> dict[str, list[int]]:
    """The split named in ``column`` of each row: train, valid (or val) or test, case-insensitive."""
    split: dict[str, list[int]] = {"train": [], "valid": [], "test": []}
    bad = []
    for index, (cell, line) in enumerate(zip(cells, lines)):
        name = SPLIT_VALUES.get(cell.lower())
        if name is None:
            bad.append(f"{line} ({cell!r})")
        else:
            split[name].append(index)
    if bad:
        raise ValueError(
            f"{path}: split column {column!r} must hold train, valid (or val) or test; lines {', '.join(bad[:10])}"
        )
    return split


# --- the dataset ------------------------------------------------------------------------------------------------
class SmilesGraphs(InMemoryDataset):
    """The collated graphs of one SMILES CSV; ``root`` is its cache folder (Graphormer caches go to ``processed/``)."""

    def __init__(self, root: Path, data: Data, slices: dict[str, Tensor]) -> None:
        super().__init__(str(root), log=False)
        self._data, self.slices = data, slices


def load_smiles(
    spec: DatasetSpec,
    root: Path,
    *,
    path: str,
    smiles_column: str = "smiles",
    target_columns: list[str] | None = None,
    task: str = "classification",
    split: str = "scaffold",
    invalid: str = "error",
    split_seed: int = 0,
) -> GraphTask:
    """The ``smiles`` dataset of :func:`graphnorm.data.load_dataset`: one graph per valid row, with OGB's atom and
    bond feature columns (``x`` ``[N, 9]``, ``edge_attr`` ``[E, 3]`` int64, ``atom_encoder="ogb"``), both bond
    directions in ``edge_index``, and ``y`` float32 ``[1, T]``, NaN for a blank cell (a missing label, left out of the
    loss and the metric).

    Args:
        spec: the registry's declaration of ``smiles``.
        root: the data root.
        path: the CSV file (gzipped when it ends in ``.gz``).
        smiles_column: the column of SMILES strings.
        target_columns: the target columns, one output each.
        task: ``"classification"`` (targets 0, 1 or blank; ROC-AUC) or ``"regression"`` (MAE).
        split: ``"scaffold"`` (:func:`scaffold_split`, deterministic), ``"random"`` (80/10/10, seeded by
            ``split_seed``), or the name of a column holding ``train``, ``valid`` (or ``val``) or ``test`` per row.
        invalid: for SMILES that RDKit cannot parse (or without atoms), never dropped silently: ``"error"`` stops
            with one line naming their CSV lines; ``"skip"`` leaves them out with a warning naming them, and the
            run's record counts them (``invalid_smiles_skipped``).
        split_seed: the seed of ``split="random"``.

    Raises:
        FileNotFoundError: no file at ``path``.
        InvalidSmilesError: invalid SMILES with ``invalid="error"``.
        ValueError: a bad option, a missing column, a bad target or split cell, no valid molecule, or an empty split.
    """
    options = check_options(path, smiles_column, target_columns, task, split, invalid, split_seed)
    file = csv_file(path)
    raw = file.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    key = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:10]
    relative = f"smiles/{file.name.split('.')[0]}-{digest[:16]}-{key}"
    cache = root / relative / "graphs.pt"
    with dataset_lock(root, relative):
        payload = read_cache(cache, digest, options)
        if payload is None:
            payload = process(file, file_text(raw, file), options)
            payload.update(version=CACHE_VERSION, sha256=digest, options=options)
            write_cache(cache, payload)
    report_invalid(file, smiles_column, payload["invalid_lines"], invalid)
    graphs = SmilesGraphs(root / relative, Data(**payload["tensors"]), payload["slices"])
    parts = {
        name: graphs[torch.tensor(payload["split"][name], dtype=torch.long)] for name in ("train", "valid", "test")
    }
    sizes = "/".join(str(len(part)) for part in parts.values())
    for name, part in parts.items():
        if len(part) == 0:
            raise ValueError(
                f"{file}: the {name} split is empty: split={split!r} divides the {len(graphs)} valid molecules into "
                f"train, valid and test of {sizes}; add molecules (a scaffold split keeps each scaffold's molecules "
                "together), or use another split"
            )
    classification = task == "classification"
    return spec.task(
        task_type="binary" if classification else "regression",
        metric="rocauc" if classification else "mae",
        num_features=9,  # OGB's atom feature columns
        num_outputs=len(options["target_columns"]),
        train=parts["train"],
        val=parts["valid"],
        test=parts["test"],
        target_names=list(options["target_columns"]),
        stats={"invalid_smiles_skipped": len(payload["invalid_lines"])},
    )


def csv_file(path: str | os.PathLike) -> Path:
    """The CSV at ``path`` (``~`` expanded, resolved); ``FileNotFoundError`` naming it if it is not a file."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"SMILES CSV {file} not found (dataset_kwargs.path)")
    return file


# file, inode, size, mtime -> sha256 of files hashed at least TRUSTED_AGE_NS after their last change
_DIGESTS: dict[tuple[str, int, int, int], str] = {}
TRUSTED_AGE_NS = 2_000_000_000


def content_sha256(file: Path) -> str:
    """The sha256 of ``file``'s bytes, remembered while its stat (inode, size, mtime) is unchanged. A digest taken
    within ``TRUSTED_AGE_NS`` of the file's last change is not remembered: a same-size edit inside one timestamp
    tick would keep the stat (git's "racily clean" case)."""
    stat = file.stat()
    key = (str(file), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    if time.time_ns() - stat.st_mtime_ns > TRUSTED_AGE_NS:
        _DIGESTS[key] = digest
    return digest


def run_identity(options: dict[str, Any]) -> dict[str, Any]:
    """What a run's id hashes of its ``dataset_kwargs``: the options with the CSV's sha256 in place of its path, so
    an edited file is another run and the same file elsewhere the same run (the path only says where the data
    lives, as ``data_root`` does)."""
    identity = {key: value for key, value in options.items() if key != "path"}
    return {**identity, "sha256": content_sha256(csv_file(options["path"]))}


def check_options(
    path: Any,
    smiles_column: Any = "smiles",
    target_columns: Any = None,
    task: Any = "classification",
    split: Any = "scaffold",
    invalid: Any = "error",
    split_seed: Any = 0,
) -> dict[str, Any]:
    """One-line errors for bad loader options (without reading the file: a run config is checked with it); the
    options that make up the cache key."""
    if not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise ValueError(f"dataset 'smiles' needs path: the CSV file of SMILES, got {path!r}")
    if not isinstance(target_columns, (list, tuple)) or not target_columns:
        raise ValueError(
            f"dataset 'smiles' needs target_columns: a non-empty list of column names, got {target_columns!r}"
        )
    if not all(isinstance(name, str) for name in [smiles_column, *target_columns]):
        raise ValueError("smiles_column and target_columns must be column names (strings)")
    if len(set(target_columns)) != len(target_columns) or smiles_column in target_columns:
        raise ValueError(f"target_columns {list(target_columns)} repeat a column or name the SMILES column")
    check_choice(task, TASKS, "task")
    check_choice(invalid, INVALID_CHOICES, "invalid")
    if not isinstance(split, str) or not split:
        raise ValueError(f"split must be 'scaffold', 'random' or the name of a split column; got {split!r}")
    if not isinstance(split_seed, int) or isinstance(split_seed, bool):
        raise ValueError(f"split_seed must be an integer, got {split_seed!r}")
    options = {
        "smiles_column": smiles_column,
        "target_columns": list(target_columns),
        "task": task,
        "split": split,
        "invalid": invalid,
        "split_seed": split_seed if split == "random" else 0,
        "version": CACHE_VERSION,
    }
    return options


def process(file: Path, text: str, options: dict[str, Any]) -> dict[str, Any]:
    """Featurize every row and split the valid molecules: the cache payload (tensors and plain lists only)."""
    split = options["split"]
    split_column = None if split in ("scaffold", "random") else split
    rows = read_smiles_csv(
        file, text, options["smiles_column"], options["target_columns"], options["task"], split_column
    )
    graphs, kept, invalid_lines = [], [], []
    for index, (line, smiles) in enumerate(zip(rows.lines, rows.smiles)):
        graph = smiles_graph(smiles, rows.targets[index])
        if graph is None:
            invalid_lines.append(line)
        else:
            graphs.append(graph)
            kept.append(index)
    if invalid_lines and options["invalid"] == "error":
        report_invalid(file, options["smiles_column"], invalid_lines, "error")  # raises, before the slow split
    if not graphs:
        raise ValueError(f"{file} has no valid SMILES in column {options['smiles_column']!r}")
    if split == "scaffold":
        parts = scaffold_split([rows.smiles[i] for i in kept])
    elif split == "random":
        parts = random_split(len(kept), options["split_seed"])
    else:
        parts = column_split([rows.split_cells[i] for i in kept], [rows.lines[i] for i in kept], split, file)
    if len(graphs) < len(SPLIT_FRACTIONS):
        raise ValueError(
            f"{file} has {len(graphs)} valid molecule(s) in column {options['smiles_column']!r}, too few to split: "
            "train, valid and test need one molecule each at least (a useful dataset has hundreds)"
        )
    data, slices = InMemoryDataset.collate(graphs)
    tensors = {key: data[key] for key in ("edge_index", "edge_attr", "x", "y")}
    return {
        "tensors": tensors,
        "slices": dict(slices),
        "split": parts,
        "lines": [rows.lines[i] for i in kept],
        "invalid_lines": invalid_lines,
    }


def report_invalid(file: Path, column: str, lines: list[int], invalid: str) -> None:
    """Raise (``invalid="error"``) or warn (``"skip"``) about the rows with invalid SMILES, naming their lines."""
    if not lines:
        return
    shown = ", ".join(map(str, lines[:SHOWN_LINES])) + (", ..." if len(lines) > SHOWN_LINES else "")
    where = f"{file}: {len(lines)} invalid SMILES in column {column!r} at line(s) {shown}"
    if invalid == "error":
        raise InvalidSmilesError(f"{where}; fix or remove those rows, or set invalid='skip' to leave them out")
    warnings.warn(f"{where}; these rows are left out (invalid='skip')", stacklevel=3)


# --- cache ------------------------------------------------------------------------------------------------------
def read_cache(cache: Path, digest: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """The cached payload, or None when it is absent, unreadable (with a warning) or made from other content or
    options. Tensors and plain lists only, loaded with ``weights_only=True``."""
    if not cache.exists():
        return None
    try:
        payload = torch.load(cache, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - a damaged cache is rebuilt, never trusted
        warnings.warn(f"SMILES cache {cache} is unreadable; featurizing again", stacklevel=3)
        return None
    if not isinstance(payload, dict) or (payload.get("version"), payload.get("sha256")) != (CACHE_VERSION, digest):
        return None
    return payload if payload.get("options") == options else None


def write_cache(cache: Path, payload: dict[str, Any]) -> None:
    """``torch.save`` atomically (:func:`graphnorm.files.atomic_write`); a cache that cannot be written is skipped
    with a warning."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(cache, lambda handle: torch.save(payload, handle))
    except (OSError, RuntimeError) as error:
        warnings.warn(f"cannot write the SMILES cache {cache} ({error}); it will be featurized again", stacklevel=3)


# task type and metric come from the options (task: classification -> binary, rocauc; regression -> mae)
register_dataset(
    "smiles",
    level="graph",
    task_type=None,
    metric=None,
    features="ogb",
    check_options=check_options,
    identity=run_identity,
)(load_smiles)
