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
SPLITS = ("train", "val", "test")
SPLIT_ROLES = {"train": "the training loss", "val": "model selection", "test": "the test score"}
SHOWN_NODES = 5  # node indices or values listed in an error


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
    # A known reference accuracy, where the data's generator knows one (csbm: the Bayes-optimal accuracy from a
    # node's own features alone, which a model using the graph can beat); None for real data. A loader that sets it
    # puts it in ``stats`` too, so every run's record carries it.
    reference_accuracy: float | None = None

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
        tensors = {f"{split}.{key}": getattr(storage, key) for split, storage in graph_storages(task) for key in "xy"}
    for key, tensor in tensors.items():
        if isinstance(tensor, Tensor):
            # Graph-level targets may be NaN: a missing label (a blank cell of a multi-task CSV), masked in training.
            _reject_non_finite(tensor, f"dataset {task.name!r} {key}", nan_ok=key.endswith(".y"))


def graph_storages(task: GraphTask) -> list[tuple[str, Any]]:
    """(the splits using it, e.g. ``"train/val/test"``; collated storage) for each distinct storage behind a
    graph-level task's splits."""
    names: dict[int, list[str]] = {}
    storages: dict[int, Any] = {}
    for split in SPLITS:
        storage = getattr(getattr(task, split), "_data", None)  # the whole collated dataset behind this split
        if storage is not None:
            names.setdefault(id(storage), []).append(split)
            storages[id(storage)] = storage
    return [("/".join(names[key]), storage) for key, storage in storages.items()]


def _reject_non_finite(tensor: Tensor, what: str, nan_ok: bool = False) -> None:
    """``ValueError`` naming ``what`` and counting the NaN / inf entries of a floating-point ``tensor`` (NaN allowed
    with ``nan_ok``)."""
    if nan_ok and tensor.is_floating_point():
        tensor = tensor.nan_to_num(nan=0.0, posinf=math.inf, neginf=-math.inf)
    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{what} has {bad} NaN/inf values; clean or impute the features before training")


# --- the structure a task must have -------------------------------------------------------------------------------
def check_task(task: GraphTask) -> None:
    """Every check a loaded task passes, so that a dataset the trainer would misread is refused before training with
    one line naming the dataset, the split and the first offending nodes or values: the node graph
    (:func:`check_node_task`) or the graph splits (:func:`check_graph_task`), then finite features and targets
    (:func:`check_finite`).

    Raises:
        ValueError: the first problem found.
    """
    if task.level == "node":
        if not isinstance(task.data, Data):
            raise ValueError(f"dataset {task.name!r}: a node-level task needs data=, one torch_geometric Data graph")
        check_node_task(task)
    else:
        check_graph_task(task)
    check_finite(task)


def check_node_task(task: GraphTask) -> None:
    """A node-level graph as the trainer reads it: float32 features ``[N, num_features]`` (categorical: integer ids
    within the feature dims), int64 ``edge_index`` ``[2, E]`` within ``[0, N)``, boolean ``train_mask``, ``val_mask``
    and ``test_mask`` of ``N`` entries, each selecting nodes and no two sharing one, and labels as the task type needs
    in every split (multiclass: int64 ``[N]`` class ids in ``[0, num_outputs)``; binary: 0 or 1).

    A mask of another dtype is refused, never converted: an int64 tensor may hold 0/1 flags or node indices, and
    indexing with it reads it as indices (a 0/1 mask selects nodes 0 and 1)."""
    data, where = task.data, f"dataset {task.name!r}"
    num_nodes = data.num_nodes
    check_features(task, data.x, num_nodes, "x")
    check_edges(where, data.edge_index, num_nodes)
    masks = {split: node_mask(where, data, split, num_nodes) for split in SPLITS}
    for i, first in enumerate(SPLITS):
        for second in SPLITS[i + 1 :]:
            shared = (masks[first] & masks[second]).nonzero().view(-1)
            if shared.numel():
                raise ValueError(
                    f"{where}: the {first} and {second} splits share {shown_nodes(shared)}; a node belongs to one "
                    "split at most"
                )
    check_node_labels(task, data.y, num_nodes)
    for split, mask in masks.items():
        check_split_labels(task, mask, split)


def node_mask(where: str, data: Data, split: str, num_nodes: int) -> Tensor:
    """``data.<split>_mask``, checked to be boolean with ``num_nodes`` entries, at least one set."""
    key = f"{split}_mask"
    mask = getattr(data, key, None)
    if not isinstance(mask, Tensor):
        raise ValueError(f"{where}: the graph has no {key}; node-level datasets need boolean train/val/test masks")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{where}: {key} is {mask.dtype}, and node masks must be torch.bool (other dtypes read as node indices): "
            f"for 0/1 flags pass {key}.bool(), for node indices set those entries of a torch.zeros(num_nodes, "
            "dtype=torch.bool)"
        )
    if tuple(mask.shape) != (num_nodes,):
        raise ValueError(f"{where}: {key} has shape {tuple(mask.shape)}, not [num_nodes] = [{num_nodes}]")
    if not bool(mask.any()):
        raise ValueError(f"{where}: {key} selects no node, and the {split} split is needed ({SPLIT_ROLES[split]})")
    return mask


def check_features(task: GraphTask, x: Any, num_nodes: int, what: str) -> None:
    """Node features as the model's input layer takes them: float32 ``[num_nodes, num_features]``, or with an
    ``atom_encoder`` integer ids ``[num_nodes, columns]`` within each column's number of values."""
    where = f"dataset {task.name!r}"
    if not isinstance(x, Tensor):
        raise ValueError(f"{where}: {what} (the node features) is missing")
    if task.atom_encoder is not None:
        dims = task.atom_feature_dims or []
        if x.is_floating_point() or x.dtype == torch.bool or x.dim() != 2 or x.size(1) != len(dims):
            raise ValueError(
                f"{where}: {what} is {x.dtype} {tuple(x.shape)}; {task.atom_encoder!r} features are int64 atom ids "
                f"[num_nodes, {len(dims)}]"
            )
        sizes = torch.tensor(dims, dtype=x.dtype)
        if x.size(0) and bool(((x.amin(dim=0) < 0) | (x.amax(dim=0) >= sizes)).any()):
            column = int(((x.amin(dim=0) < 0) | (x.amax(dim=0) >= sizes)).nonzero()[0])
            values = x[:, column][(x[:, column] < 0) | (x[:, column] >= dims[column])]
            raise ValueError(
                f"{where}: {what} column {column} holds {values[:SHOWN_NODES].tolist()} outside [0, {dims[column]}) "
                f"({values.numel()} nodes); atom ids must be below the column's number of values"
            )
        return
    wanted = f"float node features must be torch.float32 [num_nodes, num_features] = [{num_nodes}, {task.num_features}]"
    if x.dtype != torch.float32:
        fix = "declare features='zinc' or 'ogb' for categorical ids, or " if not x.is_floating_point() else ""
        raise ValueError(f"{where}: {what} is {x.dtype}; {wanted}: {fix}return x.float() from the loader")
    if x.dim() != 2 or x.size(0) != num_nodes or x.size(1) != task.num_features:
        raise ValueError(f"{where}: {what} has shape {tuple(x.shape)}; {wanted} (num_features is the task's)")


def check_edges(where: str, edge_index: Any, num_nodes: int) -> None:
    """``edge_index`` is int64 ``[2, E]`` with node ids in ``[0, num_nodes)``. Stricter than
    :func:`graphnorm.checks.check_edge_index`, which models call on any integer index: a dataset's contract is int64,
    and its one-line ``ValueError`` lists the offending edges, as every dataset check does."""
    if not isinstance(edge_index, Tensor) or edge_index.dtype != torch.long or edge_index.dim() != 2:
        shown = f"{edge_index.dtype} {tuple(edge_index.shape)}" if isinstance(edge_index, Tensor) else "missing"
        raise ValueError(f"{where}: edge_index is {shown}; it must be torch.int64 [2, num_edges]")
    if edge_index.size(0) != 2:
        raise ValueError(f"{where}: edge_index has shape {tuple(edge_index.shape)}; it must be [2, num_edges]")
    bad = ((edge_index < 0) | (edge_index >= num_nodes)).any(dim=0).nonzero().view(-1)
    if bad.numel():
        pairs = ", ".join(f"{a} -> {b}" for a, b in edge_index[:, bad[:SHOWN_NODES]].t().tolist())
        raise ValueError(f"{where}: {bad.numel()} edge(s) name nodes outside [0, {num_nodes}): {pairs}")


def check_node_labels(task: GraphTask, y: Any, num_nodes: int) -> None:
    """Node labels of the shape and dtype the task type's loss takes (multiclass: int64 ``[N]`` class ids;
    binary and regression: ``num_outputs`` numbers per node)."""
    where = f"dataset {task.name!r}"
    if not isinstance(y, Tensor):
        raise ValueError(f"{where}: the graph has no labels y")
    if task.task_type == "multiclass":
        if task.num_outputs < 2:
            raise ValueError(f"{where}: a multiclass task needs num_outputs >= 2 classes, got {task.num_outputs}")
        if y.dtype != torch.long:
            raise ValueError(f"{where}: y is {y.dtype}; multiclass labels must be torch.int64 class ids: pass y.long()")
        if tuple(y.shape) != (num_nodes,):
            raise ValueError(
                f"{where}: y has shape {tuple(y.shape)}; multiclass labels are [num_nodes] = [{num_nodes}]"
            )
    elif y.size(0) != num_nodes or y.numel() != num_nodes * task.num_outputs:
        raise ValueError(
            f"{where}: y has shape {tuple(y.shape)}; {task.task_type} labels are [num_nodes, num_outputs] = "
            f"[{num_nodes}, {task.num_outputs}]"
        )


def check_split_labels(task: GraphTask, mask: Tensor, split: str, fix: str | None = None) -> None:
    """The labels of the ``mask`` nodes (split ``split``) are ones the task's metric scores: class ids in
    ``[0, num_outputs)`` (multiclass) or 0 and 1 (binary); a label out of range would be counted as wrong. ``fix``:
    the advice in the error (default: leave those nodes out of the split)."""
    if not bool(mask.any()):
        raise ValueError(f"dataset {task.name!r}: the {split} split selects no node, so it has nothing to score")
    y = task.data.y
    if task.task_type == "multiclass":
        bad, wanted = (y < 0) | (y >= task.num_outputs), f"class ids in [0, {task.num_outputs}) (num_outputs)"
    elif task.task_type == "binary":
        bad, wanted = (y != 0) & (y != 1), "0 or 1"
        bad = bad.view(y.size(0), -1).any(dim=1)
    else:
        return
    nodes = (bad & mask).nonzero().view(-1)
    if nodes.numel():
        values = y[nodes[:SHOWN_NODES]].tolist()
        raise ValueError(
            f"dataset {task.name!r}: labels {values} at {split} {shown_nodes(nodes)} are outside the task's labels, "
            f"{wanted}; fix them, or {fix or f'leave those nodes out of the {split} split'}"
        )


def shown_nodes(nodes: Tensor) -> str:
    """``"node 3"``, ``"nodes 4, 9"`` or ``"nodes 1, 2, 3, 4, 5, ... (12 in all)"``."""
    listed = ", ".join(map(str, nodes[:SHOWN_NODES].tolist()))
    more = f", ... ({nodes.numel()} in all)" if nodes.numel() > SHOWN_NODES else ""
    return f"node{'s' if nodes.numel() > 1 else ''} {listed}{more}"


def check_graph_task(task: GraphTask) -> None:
    """Graph-level splits as the trainer reads them: each split holds graphs, features as :func:`check_features`
    says, and labels the metric scores (binary: 0, 1 or NaN for a missing label; multiclass: class ids)."""
    where = f"dataset {task.name!r}"
    for split in SPLITS:
        dataset = getattr(task, split)
        if dataset is None or len(dataset) == 0:
            raise ValueError(f"{where}: the {split} split has no graph, and it is needed ({SPLIT_ROLES[split]})")
    for split, storage in graph_storages(task):
        check_features(task, storage.x, storage.x.size(0) if isinstance(storage.x, Tensor) else 0, f"{split}.x")
        y = storage.y
        if task.task_type == "binary" and isinstance(y, Tensor):
            bad = y[~torch.isnan(y.float()) & (y != 0) & (y != 1)]
            if bad.numel():
                raise ValueError(
                    f"{where}: {split}.y holds {bad[:SHOWN_NODES].tolist()}; binary labels are 0, 1 or NaN"
                )
        if task.task_type == "multiclass" and isinstance(y, Tensor):
            bad = y[(y < 0) | (y >= task.num_outputs)] if not y.is_floating_point() else y
            if bad.numel():
                raise ValueError(
                    f"{where}: {split}.y holds {bad[:SHOWN_NODES].tolist()}; multiclass labels are int64 class ids in "
                    f"[0, {task.num_outputs})"
                )
