"""The benchmark datasets behind one loader: ``load_dataset(name, root=None, split=None) -> GraphTask``.

* ``cora``, ``citeseer``: PyG ``Planetoid``, public split (node classification, accuracy).
* ``actor``, ``cornell``, ``texas``, ``wisconsin``: heterophilic node classification (PyG ``Actor`` / ``WebKB``),
  10 standard geom-gcn splits, one chosen by ``split`` (default 0); see :mod:`graphnorm.data.heterophilic`.
* ``zinc``: PyG ``ZINC(subset=True)``, 10000/1000/1000 graphs (graph regression, MAE).
* ``molhiv``: OGB ``PygGraphPropPredDataset('ogbg-molhiv')``, scaffold split, ROC-AUC by OGB's ``Evaluator``.
* ``smiles``: your own molecules from a CSV (``load_dataset("smiles", path=..., target_columns=[...])``), featurized
  like OGB's molecule datasets; see :mod:`graphnorm.data.smiles` for its keywords.

Root: the ``root`` argument, else ``$GRAPHNORM_DATA``, else the user cache (:func:`resolve_root`). Missing raw files
are copied from ``$GRAPHNORM_DATA_MIRROR`` first (:func:`seed_from_mirror`); only then do the loaders try to download.
Copying and processing run under a per-dataset file lock; a processing attempt that fails deletes the files it wrote
under ``processed/``, and processed files that cannot be read are reported with the folder to delete.
"""

from __future__ import annotations

import errno
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import URLError

import torch
from torch import Tensor
from torch_geometric.data import Data, Dataset
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage

from graphnorm.data.root import (
    ENV_MIRROR,
    ENV_ROOT,
    DataRootError,
    dataset_lock,
    mirror_root,
    resolve_root,
    seed_from_mirror,
    unwritable_root_error,
)

HETEROPHILIC_NAMES = ("actor", "cornell", "texas", "wisconsin")  # loaded by graphnorm.data.heterophilic
NUM_HETEROPHILIC_SPLITS = 10  # the geom-gcn splits
DATASET_NAMES = ("cora", "citeseer", "zinc", "molhiv", *HETEROPHILIC_NAMES, "smiles")

ZINC_NUM_ATOM_TYPES = 28  # benchmarking-gnns atom_dict: ids 0..27
ZINC_NUM_BOND_TYPES = 4  # NONE, SINGLE, DOUBLE, TRIPLE
OGB_RELEASE_FILE = "RELEASE_v1.txt"  # ogb asks an interactive input() when a dataset folder lacks it

# The three PyG classes pickled in ogb's processed file: torch>=2.6 loads with weights_only=True by default.
OGB_SAFE_GLOBALS = [DataEdgeAttr, DataTensorAttr, GlobalStorage]

# A write under the data root failed for lack of space or permission (not a missing dataset).
UNWRITABLE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


class DatasetNotFoundError(FileNotFoundError):
    """Raw files are missing, no mirror provides them and the download failed."""


@dataclass
class GraphTask:
    """A dataset with its standard split, in the one shape the training code understands.

    Node level (``level="node"``): ``data`` is the single graph, with boolean ``train_mask``/``val_mask``/``test_mask``.
    Graph level (``level="graph"``): ``train``/``val``/``test`` are PyG datasets of graphs with ``y`` ``[1, 1]``.

    ``num_features`` is the width of ``x`` for float features; with an ``atom_encoder`` it is the atom vocabulary
    size (``"zinc"``: 28 atom types, ``x`` ``[N, 1]`` long) or the 9 OGB atom feature columns (``"ogb"``).

    Missing graph-level labels are NaN in ``y``; the loss and the metric leave them out.

    ``num_splits``: how many standard splits the dataset has (10 for the heterophilic graphs, else 1); ``split``:
    which one the masks hold (``None`` for a dataset with a single split).
    """

    name: str
    level: str  # node | graph
    task_type: str  # multiclass | regression | binary
    metric: str  # acc | mae | rocauc
    num_features: int
    num_outputs: int
    atom_encoder: str | None = None  # None (float features) | zinc | ogb
    # categorical features: values per node (atom) and edge (bond) feature column; None: float features / no edge
    # features. Set from atom_encoder when not given (zinc: [28] and [4]; ogb: OGB's molecule featurization).
    atom_feature_dims: list[int] | None = None
    bond_feature_dims: list[int] | None = None
    data: Data | None = None
    train: Dataset | None = None
    val: Dataset | None = None
    test: Dataset | None = None
    evaluator: object | None = None  # ogb.graphproppred.Evaluator for molhiv
    num_splits: int = 1
    split: int | None = None
    target_names: list[str] | None = None  # graph level: names of the output columns (SMILES CSV target columns)
    stats: dict[str, Any] = field(default_factory=dict)  # loading facts the run's record carries (invalid SMILES)

    def __post_init__(self) -> None:
        if self.atom_feature_dims is None and self.atom_encoder is not None:
            self.atom_feature_dims, self.bond_feature_dims = categorical_feature_dims(
                self.atom_encoder, self.num_features
            )

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "mae"

    def __repr__(self) -> str:
        if self.level == "node":
            sizes = f"nodes={self.data.num_nodes}"
            if self.split is not None:
                sizes += f", split={self.split} of {self.num_splits}"
        else:
            sizes = f"graphs={len(self.train)}/{len(self.val)}/{len(self.test)}"
        return f"GraphTask({self.name}, {self.level}, {self.task_type}, metric={self.metric}, {sizes})"


def categorical_feature_dims(atom_encoder: str, num_features: int) -> tuple[list[int], list[int]]:
    """Values per atom and per bond feature column of a categorical feature kind."""
    if atom_encoder == "zinc":
        return [num_features], [ZINC_NUM_BOND_TYPES]
    if atom_encoder == "ogb":
        from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

        return list(get_atom_feature_dims()), list(get_bond_feature_dims())
    raise ValueError(f"unknown categorical feature kind {atom_encoder!r}; valid: zinc, ogb")


def load_dataset(
    name: str, root: str | Path | None = None, split: int | str | None = None, **options: Any
) -> GraphTask:
    """Load ``name`` (one of ``DATASET_NAMES``) with its standard split; for the heterophilic graphs, standard split
    number ``split`` of 10 (None: split 0). ``split`` on a dataset with a single split is an error. ``options``:
    the ``smiles`` dataset's keywords (:func:`graphnorm.data.smiles.load_smiles`; its ``split`` is "scaffold",
    "random" or a split column); other datasets take none."""
    if not isinstance(name, str) or name.lower() not in DATASET_NAMES:
        raise ValueError(f"unknown dataset {name!r}; valid choices: {', '.join(DATASET_NAMES)}")
    name = name.lower()
    if name == "smiles" and split is not None:
        options["split"], split = split, None  # the SMILES loader's own split rule
    if split is not None and name not in HETEROPHILIC_NAMES:
        raise ValueError(
            f"split={split!r} selects one of several standard splits, but dataset {name!r} has one; leave split "
            f"unset (datasets with splits: {', '.join(HETEROPHILIC_NAMES)})"
        )
    if options and name != "smiles":
        raise ValueError(f"dataset {name!r} takes no options, got {', '.join(sorted(options))}")
    data_root = resolve_root(root)
    if name == "smiles":
        from graphnorm.data.smiles import load_smiles

        task = load_smiles(data_root, **options)
    elif name in HETEROPHILIC_NAMES:
        from graphnorm.data.heterophilic import load_heterophilic

        task = load_heterophilic(name, data_root, split)
    elif name in ("cora", "citeseer"):
        task = _load_planetoid(name, data_root)
    elif name == "zinc":
        task = _load_zinc(data_root)
    else:
        task = _load_molhiv(data_root)
    _check_finite(task)
    return task


def _load_planetoid(name: str, root: Path) -> GraphTask:
    from torch_geometric.datasets import Planetoid

    title = {"cora": "Cora", "citeseer": "CiteSeer"}[name]
    relative = f"Planetoid/{title}"
    required = [f"raw/ind.{name}.{part}" for part in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")]
    dataset = _prepare(name, root, relative, required, lambda: Planetoid(root=str(root / "Planetoid"), name=title))
    data = dataset[0]
    return GraphTask(
        name=name,
        level="node",
        task_type="multiclass",
        metric="acc",
        num_features=dataset.num_features,
        num_outputs=dataset.num_classes,
        data=data,
    )


def _load_zinc(root: Path) -> GraphTask:
    from torch_geometric.datasets import ZINC

    required = [f"raw/{split}.{ext}" for split in ("train", "val", "test") for ext in ("pickle", "index")]

    def construct() -> dict[str, ZINC]:
        return {split: ZINC(str(root / "ZINC"), subset=True, split=split) for split in ("train", "val", "test")}

    splits = _prepare("zinc", root, "ZINC", required, construct)
    return GraphTask(
        name="zinc",
        level="graph",
        task_type="regression",
        metric="mae",
        num_features=ZINC_NUM_ATOM_TYPES,
        num_outputs=1,
        atom_encoder="zinc",
        train=splits["train"],
        val=splits["val"],
        test=splits["test"],
    )


def _load_molhiv(root: Path) -> GraphTask:
    from ogb.graphproppred import Evaluator, PygGraphPropPredDataset

    relative = "ogb/ogbg_molhiv"
    required = [OGB_RELEASE_FILE, "raw/edge.csv.gz", "raw/node-feat.csv.gz", "raw/edge-feat.csv.gz"]
    folder = root / relative

    def construct() -> PygGraphPropPredDataset:
        if folder.is_dir() and not (folder / OGB_RELEASE_FILE).exists():
            # ogb would stop at an interactive input() here and may delete the folder.
            raise DatasetNotFoundError(
                f"{folder} exists but has no {OGB_RELEASE_FILE}, so ogb would ask an interactive question. "
                f"Delete that folder, or copy the full ogbg_molhiv folder (with {OGB_RELEASE_FILE}) there."
            )
        # Scoped allow-list: ogb 1.3.6 calls torch.load without weights_only on its own processed file.
        with torch.serialization.safe_globals(OGB_SAFE_GLOBALS):
            return PygGraphPropPredDataset(name="ogbg-molhiv", root=str(root / "ogb"))

    dataset = _prepare("molhiv", root, relative, required, construct)
    split = dataset.get_idx_split()  # train/valid/test index tensors (scaffold split)
    return GraphTask(
        name="molhiv",
        level="graph",
        task_type="binary",
        metric="rocauc",
        num_features=dataset.num_features,
        num_outputs=dataset.num_tasks,
        atom_encoder="ogb",
        train=dataset[split["train"]],
        val=dataset[split["valid"]],
        test=dataset[split["test"]],
        evaluator=Evaluator("ogbg-molhiv"),
    )


def _prepare(name: str, root: Path, relative: str, required: list[str], construct):
    """Under the dataset's lock: copy missing raw files from the mirror, then run the loader (which processes them
    the first time). A failure is reported as one clear error, and leaves no partial processed file behind."""
    with dataset_lock(root, relative):
        seed_from_mirror(root, relative, required)
        folder = root / relative
        existed, had_processed = folder.exists(), _processed_files(folder)
        started = time.time_ns()
        try:
            return construct()
        except DatasetNotFoundError:
            raise
        except Exception as error:
            _remove_written_since(folder, started)
            if not all((folder / r).exists() for r in required):
                if isinstance(error, (URLError, OSError)):
                    raise _not_found(name, root, relative, required, existed, error) from error
                raise
            if isinstance(error, OSError) and error.errno in UNWRITABLE_ERRNOS:
                raise unwritable_root_error(root, f"processing {name!r}", error) from error
            if had_processed:
                # ``from None``: torch's message may advise weights_only=False, unsafe for a damaged file.
                folders = sorted({str(path.parent) for path in had_processed})
                raise DataRootError(
                    f"cannot read the processed files of {name!r} in {', '.join(folders)} ({type(error).__name__}): "
                    "they are damaged (e.g. a process killed while writing them) or from another library version; "
                    "delete that folder and load again to rebuild it from raw/"
                ) from None
            raise


def _processed_files(folder: Path) -> list[Path]:
    return [path for path in folder.glob("**/processed/*") if path.is_file()] if folder.exists() else []


def _remove_written_since(folder: Path, started_ns: int) -> None:
    """Delete processed files written since ``started_ns`` (by a failed attempt, maybe half-written), and the
    processed folders this leaves empty, so that the next load processes afresh."""
    for path in _processed_files(folder):
        if path.stat().st_mtime_ns >= started_ns:
            path.unlink(missing_ok=True)
    for processed in folder.glob("**/processed") if folder.exists() else []:
        if processed.is_dir() and not any(processed.iterdir()):
            processed.rmdir()


def _not_found(
    name: str, root: Path, relative: str, required: list[str], existed: bool, error: Exception
) -> DatasetNotFoundError:
    """The raw files are missing and could not be downloaded: say which, and where we looked."""
    folder = root / relative
    missing = [r for r in required if not (folder / r).exists()]
    if not existed and folder.exists():
        shutil.rmtree(folder)  # only the empty folders the failed download created
    mirror = mirror_root()
    looked = f"{folder}" + (f" and the mirror {mirror / relative}" if mirror else f" (${ENV_MIRROR} is unset)")
    lacking = "" if len(missing) == len(required) else f" (missing {', '.join(missing)})"
    return DatasetNotFoundError(
        f"dataset {name!r} not found{lacking}: looked in {looked}, and the download failed ({error}). "
        f"Provide it by setting ${ENV_MIRROR} to a folder holding {relative}/ (e.g. ../shared/data), "
        f"or ${ENV_ROOT} to a data root that already holds it, or run once with internet access."
    )


def _check_finite(task: GraphTask) -> None:
    """Reject NaN/inf features or targets with a message naming the dataset and tensor."""
    if task.level == "node":
        tensors = {"x": task.data.x, "y": task.data.y}
    else:
        # Check each underlying storage once: ``split.x`` on an index view would rebuild every graph (slow).
        tensors, seen = {}, set()
        for split in ("train", "val", "test"):
            storage = getattr(task, split)._data  # the whole collated dataset behind this split
            if id(storage) not in seen:
                seen.add(id(storage))
                tensors[f"{split}.x"] = storage.x
                tensors[f"{split}.y"] = storage.y
    for key, tensor in tensors.items():
        # Graph-level targets may be NaN: a missing label (a blank cell of a multi-task CSV), masked in training.
        _reject_non_finite(tensor, f"{task.name} {key}", nan_ok=key.endswith(".y"))


def _reject_non_finite(tensor: Tensor, what: str, nan_ok: bool = False) -> None:
    if nan_ok and tensor.is_floating_point():
        tensor = tensor.nan_to_num(nan=0.0, posinf=math.inf, neginf=-math.inf)
    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{what} has {bad} NaN/inf values; clean or impute the features before training")
