"""Datasets by registry: ``load_dataset(name, root=None, split=None, **options) -> GraphTask`` for every registered
dataset (:func:`available_datasets`: cora, citeseer, zinc, molhiv, the heterophilic actor, cornell, texas and
wisconsin, smiles, and the generated csbm); :func:`register_dataset` adds one from user code. Importing this package
registers the built-in datasets."""

from graphnorm.data import csbm, heterophilic, smiles  # noqa: F401  (they register their datasets)
from graphnorm.data.datasets import DatasetNotFoundError, GraphTask
from graphnorm.data.registry import (
    DatasetSpec,
    available_datasets,
    dataset_spec,
    datasets_with_splits,
    load_dataset,
    register_dataset,
)
from graphnorm.data.root import resolve_root, seed_from_mirror

__all__ = [
    "DatasetNotFoundError",
    "DatasetSpec",
    "GraphTask",
    "available_datasets",
    "dataset_spec",
    "datasets_with_splits",
    "load_dataset",
    "register_dataset",
    "resolve_root",
    "seed_from_mirror",
]
