"""Datasets: ``load_dataset(name, root=None, split=None) -> GraphTask`` for cora, citeseer, zinc, molhiv and the
heterophilic actor, cornell, texas and wisconsin."""

from graphnorm.data.datasets import DATASET_NAMES, DatasetNotFoundError, GraphTask, load_dataset
from graphnorm.data.root import resolve_root, seed_from_mirror

__all__ = ["DATASET_NAMES", "DatasetNotFoundError", "GraphTask", "load_dataset", "resolve_root", "seed_from_mirror"]
