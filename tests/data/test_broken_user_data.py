"""A user's node-level dataset (``register_dataset``) that the trainer would misread is refused when its task is
built, with one line naming the dataset, the split and the offending nodes; a valid one trains as before.

Before these checks: no training nodes trained to ``train_loss nan`` and a test accuracy, an int64 0/1 ``train_mask``
was used as node indices (training on nodes 0 and 1 only), labels out of range in the test nodes alone were counted as
wrong, and label or feature dtype mistakes reached the user as torch errors (``Target 7 is out of bounds``).

The fuzz test mutates a small valid dataset (seeded) and asserts that every mutant is either refused with a one-line
``ValueError`` naming the dataset, or is valid and trains to a finite loss and metrics.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data, InMemoryDataset

from graphnorm.config import RunConfig
from graphnorm.data import load_dataset, register_dataset
from graphnorm.data.registry import _DATASETS
from graphnorm.train import train
from graphnorm.train.loaders import clear_task_cache

pytestmark = pytest.mark.usefixtures("one_thread")

NODES, CLASSES = 40, 3


def valid_graph() -> Data:
    """40 nodes on a ring, 3 classes, 60/20/20 split by node index modulo 5."""
    generator = torch.Generator().manual_seed(0)
    nodes = torch.arange(NODES)
    y = nodes % CLASSES
    x = torch.nn.functional.one_hot(y, CLASSES).float() + 0.5 * torch.randn(NODES, CLASSES, generator=generator)
    ring = torch.stack([torch.cat([nodes, (nodes + 1) % NODES]), torch.cat([(nodes + 1) % NODES, nodes])])
    part = nodes % 5
    return Data(x=x, y=y, edge_index=ring, train_mask=part < 3, val_mask=part == 3, test_mask=part == 4)


@contextlib.contextmanager
def registered(name: str, data: Data, num_features: int = CLASSES, num_outputs: int = CLASSES) -> Iterator[str]:
    """``data`` registered as the node-level multiclass dataset ``name`` for the duration of the block."""

    @register_dataset(name, level="node", task_type="multiclass", metric="acc")
    def load(spec, root):
        return spec.task(num_features=num_features, num_outputs=num_outputs, data=data)

    try:
        yield name
    finally:
        _DATASETS.pop(name, None)
        clear_task_cache()


def run(name: str, root: Path, **keys) -> dict:
    config = RunConfig(dataset=name, model="gcn", epochs=2, hidden_channels=8, num_layers=2, data_root=str(root))
    for key, value in keys.items():
        setattr(config, key, value)
    return train(config)[2]


def refused(name: str, root: Path, *pieces: str, **keys) -> str:
    """Train ``name``; the one-line ``ValueError`` it must raise, checked to name the dataset and ``pieces``."""
    with pytest.raises(ValueError) as caught:
        run(name, root, **keys)
    message = str(caught.value)
    assert "\n" not in message and f"'{name}'" in message, message
    for piece in pieces:
        assert piece in message, message
    return message


def test_a_valid_user_dataset_still_trains(tmp_path: Path) -> None:
    with registered("mine_valid", valid_graph()) as name:
        record = run(name, tmp_path)
    assert torch.isfinite(torch.tensor(record["train_loss"])) and 0.0 <= record["test_acc"] <= 1.0


def test_no_training_nodes_is_refused_not_a_nan_loss(tmp_path: Path) -> None:
    data = valid_graph()
    data.train_mask = torch.zeros(NODES, dtype=torch.bool)
    with registered("mine_no_train", data) as name:
        refused(name, tmp_path, "train_mask", "no node")


def test_an_int_mask_is_refused_not_used_as_node_indices(tmp_path: Path) -> None:
    data = valid_graph()
    data.train_mask = data.train_mask.long()
    with registered("mine_int_mask", data) as name:
        refused(name, tmp_path, "train_mask", "torch.int64", ".bool()")


def test_labels_out_of_range_only_in_test_nodes_are_refused(tmp_path: Path) -> None:
    data = valid_graph()
    data.y = data.y.clone()
    data.y[[4, 9]] = 7  # nodes 4 and 9: test nodes (index % 5 == 4)
    with registered("mine_test_labels", data) as name:
        refused(name, tmp_path, "test", "nodes 4, 9", "7", "[0, 3)")


def test_labels_out_of_range_in_train_nodes_name_the_nodes_not_torch(tmp_path: Path) -> None:
    data = valid_graph()
    data.y = data.y.clone()
    data.y[0] = -1
    with registered("mine_train_labels", data) as name:
        refused(name, tmp_path, "train", "node 0", "-1")


def test_labels_out_of_range_outside_the_masks_are_refused_for_eval_nodes_rest(tmp_path: Path) -> None:
    data = valid_graph()
    data.y = data.y.clone()
    data.test_mask = data.test_mask.clone()
    data.test_mask[4] = False  # node 4 in no split: scored only by eval_nodes="rest"
    data.y[4] = 5
    with registered("mine_rest_labels", data) as name:
        assert run(name, tmp_path)["num_eval_nodes"] == 7  # the test mask alone: node 4 is never scored
        refused(name, tmp_path, "eval_nodes='rest'", "node 4", "5", eval_nodes="rest")


def test_float_labels_and_float64_features_are_refused_with_the_fix(tmp_path: Path) -> None:
    data = valid_graph()
    data.y = data.y.float()
    with registered("mine_float_y", data) as name:
        refused(name, tmp_path, "y", "torch.float32", ".long()")
    data = valid_graph()
    data.x = data.x.double()
    with registered("mine_float64_x", data) as name:
        refused(name, tmp_path, "x", "torch.float64", ".float()")


def test_train_nodes_shared_with_the_test_split_are_refused(tmp_path: Path) -> None:
    data = valid_graph()
    data.test_mask = data.test_mask | (torch.arange(NODES) == 0)
    with registered("mine_overlap", data) as name:
        refused(name, tmp_path, "train", "test", "node 0")


class Graphs(InMemoryDataset):
    """Collated small ring graphs (no files)."""

    def __init__(self, graphs: list[Data]) -> None:
        super().__init__(None, log=False)
        self._data, self.slices = self.collate(graphs)


def rings(label: Callable[[int], float], dtype: torch.dtype = torch.float32, count: int = 30) -> Graphs:
    generator = torch.Generator().manual_seed(0)
    graphs = []
    for i in range(count):
        nodes = torch.arange(4 + i % 3)
        ring = torch.stack(
            [torch.cat([nodes, (nodes + 1) % nodes.numel()]), torch.cat([(nodes + 1) % nodes.numel(), nodes])]
        )
        x = torch.randn(nodes.numel(), 3, generator=generator).to(dtype)
        graphs.append(Data(x=x, edge_index=ring, y=torch.tensor([[label(i)]])))
    return Graphs(graphs)


@pytest.mark.parametrize(
    ("case", "pieces"),
    [("label 2 in a test graph", ["y", "[2.0]", "0, 1 or NaN"]), ("float64 x", ["x", "torch.float64"]),
     ("no test graph", ["test split has no graph"])],
)  # fmt: skip
def test_a_broken_graph_level_user_dataset_is_refused_naming_it(tmp_path: Path, case: str, pieces: list[str]) -> None:
    """Before: sklearn's ``multi_class must be in ('ovo', 'ovr')``, torch's dtype error, ``torch.cat(): expected a
    non-empty list of Tensors``, none naming the dataset."""
    graphs = rings(lambda i: 2.0 if case.startswith("label") and i == 29 else float(i % 2))
    if case == "float64 x":
        graphs = rings(lambda i: float(i % 2), torch.float64)
    test = graphs[:0] if case == "no test graph" else graphs[25:]
    name = "mine_graphs_" + case.replace(" ", "_")

    @register_dataset(name, level="graph", task_type="binary", metric="rocauc")
    def load(spec, root):
        return spec.task(num_features=3, num_outputs=1, train=graphs[:20], val=graphs[20:25], test=test)

    try:
        refused(name, tmp_path, *pieces, batch_size=8)
    finally:
        _DATASETS.pop(name, None)
        clear_task_cache()


# --- fuzz --------------------------------------------------------------------------------------------------------
def _relabel(data: Data, split: str, value: int) -> None:
    data.y = data.y.clone()
    data.y[getattr(data, f"{split}_mask").nonzero()[0, 0]] = value


def _set(key: str, make: Callable[[Data], object]) -> Callable[[Data], None]:
    return lambda data: setattr(data, key, make(data))


BROKEN: dict[str, Callable[[Data], None]] = {
    **{
        f"{split}_mask {kind}": _set(f"{split}_mask", lambda d, s=split, k=kind: _mask_as(d[f"{s}_mask"], k))
        for split in ("train", "val", "test")
        for kind in ("int64", "uint8", "float32", "indices", "short", "empty", "missing")
    },
    **{
        f"{split} label {value}": (lambda d, s=split, v=value: _relabel(d, s, v))
        for split in ("train", "val", "test")
        for value in (-1, CLASSES, 100)
    },
    "y float32": _set("y", lambda d: d.y.float()),
    "y int32": _set("y", lambda d: d.y.int()),
    "y [N, 1]": _set("y", lambda d: d.y.view(-1, 1)),
    "x float64": _set("x", lambda d: d.x.double()),
    "x int64": _set("x", lambda d: d.x.long()),
    "x float16": _set("x", lambda d: d.x.half()),
    "x nan": _set("x", lambda d: torch.where(torch.arange(NODES)[:, None] == 3, float("nan"), d.x)),
    "x inf": _set("x", lambda d: torch.where(torch.arange(NODES)[:, None] == 3, float("inf"), d.x)),
    "x too wide": _set("x", lambda d: torch.cat([d.x, d.x], dim=1)),
    "x 1-D": _set("x", lambda d: d.x[:, 0]),
    "train overlaps test": _set("test_mask", lambda d: d.test_mask | d.train_mask),
    "train overlaps val": _set("val_mask", lambda d: d.val_mask | (torch.arange(NODES) == 0)),
    "edge out of range": _set("edge_index", lambda d: torch.cat([d.edge_index, torch.tensor([[0], [NODES]])], 1)),
    "edge negative": _set("edge_index", lambda d: torch.cat([d.edge_index, torch.tensor([[0], [-1]])], 1)),
    "edge float": _set("edge_index", lambda d: d.edge_index.float()),
}

BENIGN: dict[str, Callable[[Data], None]] = {
    "labels permuted": _set("y", lambda d: (d.y + 1) % CLASSES),
    "two classes used": _set("y", lambda d: d.y % 2),
    "extra attribute": _set("weight", lambda d: torch.ones(NODES)),
    "fewer edges": _set("edge_index", lambda d: d.edge_index[:, ::2]),
    "no edges": _set("edge_index", lambda d: torch.empty(2, 0, dtype=torch.long)),
    "one train node": _set("train_mask", lambda d: torch.arange(NODES) == 0),
    "nodes in no split": _set("test_mask", lambda d: d.test_mask & (torch.arange(NODES) < 20)),
    "features scaled": _set("x", lambda d: d.x * 1e3),
}


def _mask_as(mask: torch.Tensor, kind: str) -> torch.Tensor | None:
    return {
        "int64": lambda: mask.long(),
        "uint8": lambda: mask.to(torch.uint8),
        "float32": lambda: mask.float(),
        "indices": lambda: mask.nonzero().view(-1),
        "short": lambda: mask[:-1],
        "empty": lambda: torch.zeros_like(mask),
        "missing": lambda: None,
    }[kind]()


FUZZ_CASES = 80
FUZZ_SEED = 35


def fuzz_cases() -> list[tuple[str, list[str], bool]]:
    """(dataset name, mutation names, whether the mutant is broken): each mutation once alone, then seeded draws of
    a benign mutation followed by a broken or a benign one."""
    draw = random.Random(FUZZ_SEED)
    cases = [[name] for name in BROKEN] + [[name] for name in BENIGN]
    while len(cases) < FUZZ_CASES:
        last = draw.choice(sorted(BROKEN) + sorted(BENIGN))
        cases.append([draw.choice(sorted(BENIGN)), last])  # a broken mutation last: nothing undoes it
    return [(f"fuzz_{i}", names, any(name in BROKEN for name in names)) for i, names in enumerate(cases)]


def test_fuzz_every_mutant_is_refused_with_its_name_or_trains(tmp_path: Path) -> None:
    """Every mutant: refused by ``load_dataset`` with a one-line ``ValueError`` naming the dataset (the broken
    ones), or loaded and trained to a finite loss with metrics in [0, 1] (the valid ones)."""
    failures = []
    for name, mutations, broken in fuzz_cases():
        data = valid_graph()
        for mutation in mutations:
            {**BROKEN, **BENIGN}[mutation](data)
        outcome = _fuzz_outcome(name, data, tmp_path)
        if outcome != ("refused" if broken else "trained"):
            failures.append(f"{mutations}: {outcome}")
    assert not failures, f"{len(failures)} of {FUZZ_CASES} mutants misread:\n" + "\n".join(failures)


def _fuzz_outcome(name: str, data: Data, root: Path) -> str:
    """``"refused"`` (a one-line ValueError naming ``name``), ``"trained"`` (finite loss, metrics in [0, 1]), or
    what went wrong."""
    with registered(name, data) as dataset:
        try:
            load_dataset(dataset, root)
        except ValueError as error:
            message = str(error)
            return "refused" if "\n" not in message and f"'{dataset}'" in message else f"unclear error: {message}"
        except Exception as error:  # noqa: BLE001 - the fuzz reports any other error as a failure
            return f"{type(error).__name__}: {error}"
        try:
            record = run(dataset, root)
        except Exception as error:  # noqa: BLE001
            return f"accepted, then {type(error).__name__}: {str(error)[:120]}"
    finite = torch.isfinite(torch.tensor([record["train_loss"], record["val_acc"], record["test_acc"]])).all()
    in_range = 0.0 <= record["val_acc"] <= 1.0 and 0.0 <= record["test_acc"] <= 1.0
    return (
        "trained" if bool(finite) and in_range else f"accepted silently: {record['train_loss']}, {record['test_acc']}"
    )
