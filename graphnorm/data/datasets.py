"""The benchmark datasets, registered for :func:`graphnorm.data.load_dataset` (``name, root=None, split=None``).

* ``cora``, ``citeseer``: PyG ``Planetoid``, public split (node classification, accuracy).
* ``actor``, ``cornell``, ``texas``, ``wisconsin``: heterophilic node classification, 10 standard splits
  (:mod:`graphnorm.data.heterophilic`).
* ``zinc``: PyG ``ZINC(subset=True)``, 10000/1000/1000 graphs (graph regression, MAE).
* ``molhiv``: OGB ``ogbg-molhiv``, scaffold split, ROC-AUC by OGB's ``Evaluator``.
* ``smiles``: your own molecules from a CSV, featurized like OGB's (:mod:`graphnorm.data.smiles`).

Each is read from the data root (:mod:`graphnorm.data.root`: the ``root`` argument, ``$GRAPHNORM_DATA`` or the user
cache), its raw files first copied from ``$GRAPHNORM_DATA_MIRROR`` when missing; only then do the loaders download.
"""

from __future__ import annotations

import errno
import shutil
import time
from pathlib import Path
from urllib.error import URLError

import torch
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage

from graphnorm.data.registry import DatasetSpec, load_dataset, register_dataset
from graphnorm.data.root import (
    ENV_MIRROR,
    ENV_ROOT,
    DataRootError,
    dataset_lock,
    mirror_root,
    mirror_status,
    seed_from_mirror,
    unwritable_root_error,
)
from graphnorm.data.task import GraphTask, check_finite

ZINC_NUM_ATOM_TYPES = 28  # benchmarking-gnns atom_dict: ids 0..27
OGB_RELEASE_FILE = "RELEASE_v1.txt"  # ogb asks an interactive input() when a dataset folder lacks it

# The three PyG classes pickled in ogb's processed file: torch>=2.6 loads with weights_only=True by default.
OGB_SAFE_GLOBALS = [DataEdgeAttr, DataTensorAttr, GlobalStorage]

# A write under the data root failed for lack of space or permission (not a missing dataset).
UNWRITABLE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


__all__ = ["DatasetNotFoundError", "GraphTask", "check_finite", "load_dataset"]  # GraphTask, load_dataset: re-exported


class DatasetNotFoundError(FileNotFoundError):
    """Raw files are missing, no mirror provides them and the download failed."""


@register_dataset("cora", level="node", task_type="multiclass", metric="acc")
@register_dataset("citeseer", level="node", task_type="multiclass", metric="acc")
def _load_planetoid(spec: DatasetSpec, root: Path) -> GraphTask:
    """Cora or CiteSeer (PyG ``Planetoid``) with the public split's masks."""
    from torch_geometric.datasets import Planetoid

    name = spec.name
    title = {"cora": "Cora", "citeseer": "CiteSeer"}[name]
    relative = f"Planetoid/{title}"
    required = [f"raw/ind.{name}.{part}" for part in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")]
    dataset = _prepare(name, root, relative, required, lambda: Planetoid(root=str(root / "Planetoid"), name=title))
    return spec.task(num_features=dataset.num_features, num_outputs=dataset.num_classes, data=dataset[0])


@register_dataset("zinc", level="graph", task_type="regression", metric="mae", features="zinc")
def _load_zinc(spec: DatasetSpec, root: Path) -> GraphTask:
    """ZINC's 12k-molecule subset (PyG ``ZINC(subset=True)``), train / val / test as published."""
    from torch_geometric.datasets import ZINC

    required = [f"raw/{split}.{ext}" for split in ("train", "val", "test") for ext in ("pickle", "index")]

    def construct() -> dict[str, ZINC]:
        return {split: ZINC(str(root / "ZINC"), subset=True, split=split) for split in ("train", "val", "test")}

    splits = _prepare("zinc", root, "ZINC", required, construct)
    return spec.task(
        num_features=ZINC_NUM_ATOM_TYPES, num_outputs=1, train=splits["train"], val=splits["val"], test=splits["test"]
    )


@register_dataset("molhiv", level="graph", task_type="binary", metric="rocauc", features="ogb")
def _load_molhiv(spec: DatasetSpec, root: Path) -> GraphTask:
    """ogbg-molhiv with OGB's scaffold split and ``Evaluator``.

    Raises:
        DatasetNotFoundError: the dataset folder exists without ogb's release file (ogb would ask a question).
    """
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
    return spec.task(
        num_features=dataset.num_features,
        num_outputs=dataset.num_tasks,
        train=dataset[split["train"]],
        val=dataset[split["valid"]],
        test=dataset[split["test"]],
        evaluator=Evaluator("ogbg-molhiv"),
    )


def _prepare(name: str, root: Path, relative: str, required: list[str], construct):
    """Under the dataset's file lock, copy missing raw files from the mirror, then ``construct()`` the dataset (PyG
    and ogb process the raw files the first time). A failed attempt deletes the processed files it wrote.

    Args:
        name: the dataset's registry name (for messages).
        root: the data root.
        relative: the dataset's folder under ``root``.
        required: the raw files (relative to that folder) the loader needs.
        construct: builds the PyG / ogb dataset.

    Raises:
        DatasetNotFoundError: required raw files are missing and the download failed.
        DataRootError: the root is unwritable or full, or processed files already there cannot be read (damaged, or
            from another library version; the message names the folder to delete).
    """
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
    """The files in every ``processed/`` folder under ``folder``."""
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
    looked = f"{folder}" + (f" and the mirror {mirror / relative}" if mirror else f" ({mirror_status()})")
    lacking = "" if len(missing) == len(required) else f" (missing {', '.join(missing)})"
    return DatasetNotFoundError(
        f"dataset {name!r} not found{lacking}: looked in {looked}, and the download failed ({error}). "
        f"Provide it by setting ${ENV_MIRROR} to a folder holding {relative}/ (e.g. ../shared/data), "
        f"or ${ENV_ROOT} to a data root that already holds it, or run once with internet access."
    )
