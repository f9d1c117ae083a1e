"""A run's data: the dataset with the config's data options (:func:`prepare_task`), the graph-level loaders
(:func:`graph_loaders`), PyG mini-batches or, for a model with Graphormer inputs, every split preprocessed once
(shortest paths, edge paths, degrees; cached next to the dataset's processed files) and collated by
:func:`collate_graphormer`, and the fixed sample the collapse probes measure (:func:`probe_sample`)."""

from __future__ import annotations

import collections
import copy
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch_geometric.transforms as T
from torch import Tensor, nn
from torch.utils.data import RandomSampler
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader

from graphnorm.data.graphormer_preprocess import (
    GraphormerPreprocess,
    collate_graphormer,
    filter_max_nodes,
    preprocess_dataset,
)
from graphnorm.data.registry import dataset_spec, load_dataset
from graphnorm.data.root import resolve_root
from graphnorm.data.scoring import get_metric
from graphnorm.data.size_buckets import SizeBucketBatchSampler
from graphnorm.data.task import GraphTask, check_split_labels
from graphnorm.models import model_spec
from graphnorm.train.distributed import Ranks, ShardSampler

if TYPE_CHECKING:
    from graphnorm.config import RunConfig

SPLITS = ("train", "val", "test")
GRAPHORMER_DEFAULT_HOPS = 5  # Graphormer's multi_hop_max_dist default


def prepare_task(config: RunConfig) -> GraphTask:
    """Load the dataset (from this process's :func:`cached_task` after the first run) and apply the config's data
    options (feature normalization, graph subsets)."""
    # dataset_kwargs (dataset=smiles) may name the SMILES loader's own split rule; config.split is null there
    task = cached_task(config.dataset, config.data_root, {"split": config.split, **config.dataset_kwargs})
    if task.level == "node" and config.eval_nodes == "rest":
        # The loader's checks cover the three masks; "rest" scores every node outside train and val as well.
        rest = ~(task.data.train_mask | task.data.val_mask)
        check_split_labels(
            task, rest, "eval_nodes='rest' (outside train and val)", "score the test mask (eval_nodes: test)"
        )
    if config.feature_norm == "row_l1":
        # PyG's NormalizeFeatures: each row divided by its sum (exact row-L1 for the non-negative Planetoid features).
        task.data = T.NormalizeFeatures()(task.data.clone())
    if config.limit_graphs is not None:
        # A fixed random subset (seed 0, independent of the run seed): every seed sees the same graphs.
        generator = torch.Generator().manual_seed(0)
        for split in SPLITS:
            dataset = getattr(task, split)
            if len(dataset) > config.limit_graphs:
                keep = torch.randperm(len(dataset), generator=generator)[: config.limit_graphs].sort().values
                setattr(task, split, dataset[keep])
    check_both_classes(task, config)
    return task


def has_both_classes(labels: Tensor) -> bool:
    """Whether some target (column) of ``labels`` holds both 0 and 1 among its known (non-NaN) entries: what
    ROC-AUC needs to be defined (OGB's evaluator skips the other targets)."""
    labels = labels.float().view(labels.shape[0], -1)
    known = ~torch.isnan(labels)
    return any(
        bool((column[seen] == 1).any() and (column[seen] == 0).any()) for column, seen in zip(labels.t(), known.t())
    )


def check_both_classes(task: GraphTask, config: RunConfig) -> None:
    """``ValueError`` before training when the metric needs both classes (ROC-AUC) and a split it scores has one
    class only, which would fail after the first epoch: val and test, and with ``limit_graphs`` (a subset) train too."""
    if task.level != "graph" or not get_metric(task.metric).needs_both_classes:
        return
    for split in SPLITS if config.limit_graphs is not None else ("val", "test"):
        labels = getattr(task, split).y
        if has_both_classes(labels):
            continue
        if config.limit_graphs is not None:
            raise ValueError(
                f"limit_graphs={config.limit_graphs} leaves the {split} split of {config.dataset} with one "
                "class only, so ROC-AUC is undefined: raise limit_graphs (a rare class needs many graphs)"
            )
        raise ValueError(
            f"the {split} split ({labels.shape[0]} graphs) has one class only in every target, so its "
            f"{task.metric} is undefined: the data needs both classes (0 and 1) in every split"
        )


# Loaded tasks kept by this process (a sweep worker runs many configs of one dataset): key -> (task, fingerprint)
_TASKS: collections.OrderedDict[tuple, tuple[GraphTask, tuple]] = collections.OrderedDict()
TASK_CACHE_SIZE = 2  # datasets kept per process (least recently used dropped)


def cached_task(name: str, root: str | None, options: dict[str, Any]) -> GraphTask:
    """``load_dataset(name, root, **options)``, loaded once per process and ``(name, data root, options)``.

    A sweep worker runs many short runs of one dataset; loading it again each time (reading the processed files,
    the finiteness check) would be a large part of a short run (``bench_sweep_overhead``). Each call returns a shallow
    copy (its own ``GraphTask`` and ``Data`` objects around the shared tensors), so a run may reassign the task's fields
    and the graph's attributes (``data.to(device)``, ``data.x = ...``) without touching the cache. A run that
    modifies a shared tensor in place, or a cached object's attributes, changes its fingerprint (tensor identities
    and version counters), and the next call loads the dataset afresh.
    """
    # A dataset read from a user's file declares its identity (the file's hash): an edited file is a new key.
    identity = dataset_spec(name).identity
    described = identity(options) if identity is not None else options
    key = (name, str(resolve_root(root)), json.dumps(described, sort_keys=True, default=repr))
    entry = _TASKS.get(key)
    if entry is None or task_fingerprint(entry[0]) != entry[1]:
        task = load_dataset(name, root, **options)
        entry = (task, task_fingerprint(task))
        _TASKS[key] = entry
        while len(_TASKS) > TASK_CACHE_SIZE:
            _TASKS.popitem(last=False)
    _TASKS.move_to_end(key)
    return _task_copy(entry[0])


def clear_task_cache() -> None:
    """Forget the tasks :func:`cached_task` keeps (the next call loads from disk)."""
    _TASKS.clear()


def task_fingerprint(task: GraphTask) -> tuple:
    """Identity and version counter of every tensor a task holds (node level: its graph's attributes; graph
    level: each split's collated storage and its index): any in-place change or reassignment changes it."""
    parts: list[Any] = [id(task.data)]
    stores = [task.data] if task.data is not None else []
    for split in SPLITS:
        dataset = getattr(task, split)
        parts.append(id(dataset))
        if dataset is not None:
            stores.append(getattr(dataset, "_data", None))
            parts.append(_tensor_state("_indices", getattr(dataset, "_indices", None)))
    for store in stores:
        if store is not None:
            parts.extend(_tensor_state(key, value) for key, value in sorted(store.to_dict().items()))
    return tuple(parts)


def _tensor_state(key: str, value: Any) -> tuple:
    if isinstance(value, torch.Tensor):
        return key, id(value), value._version  # views share their base's version counter
    return key, id(value)


def _task_copy(task: GraphTask) -> GraphTask:
    """A copy whose fields (and its graph's attributes) can be reassigned without affecting ``task``."""
    copied = copy.copy(task)
    if task.data is not None:
        copied.data = copy.copy(task.data)
    copied.stats = dict(task.stats)
    return copied


def collate_for(graphs: list, config: RunConfig, inputs: str) -> Any:
    """One batch of ``graphs`` for a model of input kind ``inputs``: a PyG ``Batch``, or (``"graphormer"``) the graphs
    preprocessed and collated as in training."""
    if inputs == "pyg":
        return Batch.from_data_list(graphs)
    hops = graphormer_hops(config)
    graphs = GraphormerPreprocess(hops, config.max_nodes).process_many(graphs)
    return collate_graphormer(graphs, multi_hop_max_dist=hops)


def model_sample(sample: Any, config: RunConfig, inputs: str) -> Any:
    """A PyG batch of graphs as a model of input kind ``inputs`` takes it: itself, or preprocessed and collated for
    Graphormer (graphs above ``max_nodes`` left out when ``drop_large_graphs``); what the collapse probe feeds it."""
    if inputs == "pyg":
        return sample
    graphs = sample.to_data_list()
    if config.max_nodes is not None and config.drop_large_graphs:
        graphs, _ = filter_max_nodes(graphs, config.max_nodes)
    return collate_for(graphs, config, inputs)


def probe_sample(model: nn.Module, task: GraphTask, config: RunConfig) -> tuple[Any, str]:
    """What the run's collapse probes measure, and its split's name: node level the whole graph (``"all"``); graph
    level the fixed validation sample of :func:`graphnorm.analysis.probe.evaluation_sample` (``config.probe_graphs``
    graphs, seed 0; ``"val_sample"``), as the model takes it (:func:`model_sample`)."""
    from graphnorm.analysis.probe import evaluation_sample

    if task.level == "node":
        return task.data, "all"
    sample = evaluation_sample(task.val, num_graphs=config.probe_graphs, seed=0)
    return model_sample(sample, config, model_spec(config.model).inputs), "val_sample"


def graphormer_hops(config: RunConfig) -> int:
    """Hops of a path the Graphormer edge encoding uses (and that preprocessing stores)."""
    return int(config.model_kwargs.get("multi_hop_max_dist", GRAPHORMER_DEFAULT_HOPS))


def graphormer_splits(task: GraphTask, config: RunConfig) -> tuple[dict[str, list], dict[str, int]]:
    """Every split preprocessed for Graphormer (list of ``Data`` with shortest paths, edge paths, degrees) and the
    number of graphs dropped per split for having more than ``max_nodes`` nodes (only with ``drop_large_graphs``;
    otherwise such a graph is an error, before any preprocessing).

    The preprocessing is cached as ``graphormer_<split>_h<hops>[_limit<n>][_max<m>].pt`` in the dataset's processed
    folder: a ``limit_graphs`` subset or a filtered split gets its own file, and the cache re-checks the hop count and
    the graphs' node and edge counts before it is used.
    """
    hops = graphormer_hops(config)
    splits, dropped = {}, {}
    for split in SPLITS:
        dataset = getattr(task, split)
        graphs = [dataset[i] for i in range(len(dataset))]
        name = f"graphormer_{split}_h{hops}"
        if config.limit_graphs is not None:
            name += f"_limit{config.limit_graphs}"
        dropped[split] = 0
        if config.max_nodes is not None:
            sizes = [int(g.num_nodes) for g in graphs]
            large = sum(n > config.max_nodes for n in sizes)
            if large and not config.drop_large_graphs:
                raise ValueError(
                    f"{task.name} {split}: {large} graph(s) have more than max_nodes={config.max_nodes} nodes "
                    f"(largest: {max(sizes)}); raise max_nodes, or set drop_large_graphs: true to leave them out "
                    "(counted in the record)"
                )
            if large:
                graphs, dropped[split] = filter_max_nodes(graphs, config.max_nodes)
                name += f"_max{config.max_nodes}"
                if not graphs:
                    raise ValueError(f"{task.name} {split}: every graph has more than max_nodes={config.max_nodes}")
        cache = Path(dataset.processed_dir) / f"{name}.pt"
        splits[split] = preprocess_dataset(graphs, hops, config.max_nodes, cache_path=cache)
    return splits, dropped


def size_order(graphs: list) -> list[int]:
    """Indices of ``graphs`` by node count (stable): the evaluation order of Graphormer's padded batches."""
    return sorted(range(len(graphs)), key=lambda i: int(graphs[i].num_nodes))


def graph_loaders(
    task: GraphTask, config: RunConfig, generator: torch.Generator, inputs: str = "pyg", ranks: Ranks | None = None
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """Train (shuffled by ``generator``), val and test loaders, plus extra record entries (Graphormer: drop counts).
    ``inputs``: the model's input kind (:data:`graphnorm.models.registry.INPUTS`): PyG batches, or Graphormer's
    preprocessed padded batches. With several ``ranks`` the train loader yields this rank's share of each epoch's
    order (:class:`graphnorm.train.distributed.ShardSampler`); val and test stay whole (rank 0 evaluates)."""
    if inputs == "pyg":
        if ranks is not None and ranks.active:
            order = ShardSampler(RandomSampler(task.train, generator=generator), ranks)
            train_loader = DataLoader(task.train, batch_size=config.batch_size, sampler=order, generator=generator)
        else:
            train_loader = DataLoader(task.train, batch_size=config.batch_size, shuffle=True, generator=generator)
        val_loader = DataLoader(task.val, batch_size=config.batch_size)
        test_loader = DataLoader(task.test, batch_size=config.batch_size)
        return train_loader, val_loader, test_loader, {}
    splits, dropped = graphormer_splits(task, config)
    collate = functools.partial(collate_graphormer, multi_hop_max_dist=graphormer_hops(config))
    if config.bucket_batches > 1:
        sizes = [int(graph.num_nodes) for graph in splits["train"]]
        sampler = SizeBucketBatchSampler(sizes, config.batch_size, config.bucket_batches, generator)
        train_loader = torch.utils.data.DataLoader(splits["train"], batch_sampler=sampler, collate_fn=collate)
    elif ranks is not None and ranks.active:
        order = ShardSampler(RandomSampler(splits["train"], generator=generator), ranks)
        train_loader = torch.utils.data.DataLoader(
            splits["train"], batch_size=config.batch_size, sampler=order, generator=generator, collate_fn=collate
        )
    else:
        train_loader = torch.utils.data.DataLoader(
            splits["train"], batch_size=config.batch_size, shuffle=True, generator=generator, collate_fn=collate
        )
    # Evaluation in eval mode does not depend on which graphs share a batch (tested), and the metrics do not depend
    # on the order of the graphs, so val/test run in size order: each batch pads to graphs of about its own size.
    val_loader, test_loader = (
        torch.utils.data.DataLoader(
            splits[split], batch_size=config.batch_size, sampler=size_order(splits[split]), collate_fn=collate
        )
        for split in ("val", "test")
    )
    return train_loader, val_loader, test_loader, {f"dropped_graphs_{split}": dropped[split] for split in SPLITS}
