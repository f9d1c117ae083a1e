"""The task a dataset loader returns (:class:`GraphTask`), with the checks every loaded task passes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data, Dataset

from graphnorm.data.scoring import get_metric

ZINC_NUM_BOND_TYPES = 4  # NONE, SINGLE, DOUBLE, TRIPLE


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
        """Whether a larger value of the task's metric is better."""
        return get_metric(self.metric).higher_is_better

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


def check_finite(task: GraphTask) -> None:
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
    """``ValueError`` naming ``what`` and counting the NaN / inf entries of a floating-point ``tensor`` (NaN allowed
    with ``nan_ok``)."""
    if nan_ok and tensor.is_floating_point():
        tensor = tensor.nan_to_num(nan=0.0, posinf=math.inf, neginf=-math.inf)
    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{what} has {bad} NaN/inf values; clean or impute the features before training")
