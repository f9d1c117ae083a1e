"""Heterophilic node classification: Actor (film) and the WebKB pages Cornell, Texas and Wisconsin.

These are the graphs where neighbours mostly disagree (Pei et al., "Geom-GCN", ICLR 2020): Actor has 7,600 actors,
932 bag-of-words features and 5 classes; Cornell / Texas / Wisconsin have 183 / 183 / 251 web pages with 1,703
features and 5 classes. They come with the 10 standard geom-gcn splits (files ``*_split_0.6_0.2_<k>.npz``) that
every paper since averages over. Despite the file names, each split holds 48% / 32% / 20% of the nodes for
train / val / test (60% of 80% for training), and the three masks cover every node.

PyG's ``Actor`` and ``WebKB`` loaders read them (masks ``[N, 10]``); :func:`load_heterophilic` keeps the masks of
one split, so the training code sees the same 1-D masks as on Cora. The graphs are used as PyG loads them: the
geom-gcn edge lists, directed, not symmetrized.
"""

from __future__ import annotations

from pathlib import Path

from graphnorm.data.datasets import GraphTask, _prepare
from graphnorm.data.registry import DatasetSpec, register_dataset

MASKS = ("train_mask", "val_mask", "test_mask")
NUM_HETEROPHILIC_SPLITS = 10  # the geom-gcn splits


def heterophilic_folder(name: str) -> tuple[str, str]:
    """(folder under the data root, file prefix of the raw files) of ``name``: ``Actor`` / ``film`` for Actor,
    ``WebKB/<name>`` / ``<name>`` for the WebKB pages."""
    return ("Actor", "film") if name == "actor" else (f"WebKB/{name}", name)


def required_raw_files(name: str) -> list[str]:
    """The raw files PyG's loader needs (relative to the dataset folder): node features and labels, edges, splits."""
    _, prefix = heterophilic_folder(name)
    splits = [f"raw/{prefix}_split_0.6_0.2_{k}.npz" for k in range(NUM_HETEROPHILIC_SPLITS)]
    return ["raw/out1_node_feature_label.txt", "raw/out1_graph_edges.txt", *splits]


def register_heterophilic(name: str) -> None:
    """Register ``name`` (actor | cornell | texas | wisconsin) with :func:`load_heterophilic` as its loader."""
    register_dataset(name, level="node", task_type="multiclass", metric="acc", num_splits=NUM_HETEROPHILIC_SPLITS)(
        load_heterophilic
    )


def load_heterophilic(spec: DatasetSpec, root: Path, split: int | None = None) -> GraphTask:
    """``spec.name`` (actor | cornell | texas | wisconsin) with the 1-D masks of standard split ``split`` (None: 0).

    Raises:
        ValueError: ``split`` is not an integer in ``[0, 9]``.
    """
    from torch_geometric.datasets import Actor, WebKB

    name = spec.name
    split = 0 if split is None else split
    if isinstance(split, bool) or not isinstance(split, int) or not 0 <= split < NUM_HETEROPHILIC_SPLITS:
        raise ValueError(
            f"split must be an integer in [0, {NUM_HETEROPHILIC_SPLITS - 1}] for dataset {name!r} "
            f"({NUM_HETEROPHILIC_SPLITS} standard splits), got {split!r}"
        )
    relative, _ = heterophilic_folder(name)

    def construct():
        if name == "actor":
            return Actor(root=str(root / relative))
        return WebKB(root=str(root / "WebKB"), name=name)

    dataset = _prepare(name, root, relative, required_raw_files(name), construct)
    data = dataset[0]
    for mask in MASKS:
        data[mask] = data[mask][:, split].clone()  # [N, 10] -> this split's [N]
    return spec.task(num_features=dataset.num_features, num_outputs=dataset.num_classes, data=data, split=split)


for _name in ("actor", "cornell", "texas", "wisconsin"):
    register_heterophilic(_name)
