"""One registry for every dataset: ``register_dataset(name, ...)`` on a loader, ``load_dataset(name)`` by name.

Each dataset declares what the rest of the package needs to know about it in one :class:`DatasetSpec`: its level
(node or graph), task type, metric (and so whether higher is better: :data:`graphnorm.data.scoring.METRICS`), the
kind of its node features (``None``: float features; ``"zinc"``/``"ogb"``: categorical atom and bond features) and
how many standard splits it has, and optionally its ``identity``: what a run's id hashes of its options, for a
dataset whose options point at data that can change (a user's CSV: its content, not its path). Config validation,
the trainer and the sweep ask the registry, and name no dataset.

A loader is called as ``loader(spec, root, **options)`` and returns ``spec.task(...)``, a
:class:`graphnorm.data.datasets.GraphTask`; :func:`load_dataset` checks that task before anyone trains on it
(:func:`graphnorm.data.task.check_task`: one ``ValueError`` naming the dataset, the split and the first problem).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphnorm.checks import check_choice, check_name
from graphnorm.data.root import resolve_root
from graphnorm.data.scoring import get_metric, metric_names
from graphnorm.data.task import GraphTask, check_task

LEVELS = ("node", "graph")
TASK_TYPES = ("multiclass", "regression", "binary")
FEATURE_KINDS = (None, "zinc", "ogb")


@dataclass(frozen=True)
class DatasetSpec:
    """What a dataset is. ``task_type``/``metric`` ``None``: chosen by the loader from its options (a user's CSV)."""

    name: str
    loader: Callable[..., Any]
    level: str
    task_type: str | None
    metric: str | None
    features: str | None = None
    num_splits: int = 1
    check_options: Callable[..., Any] | None = None  # validates the options before loading (ValueError)
    # identity(options) -> what the run id hashes in place of the options (RunConfig.dataset_kwargs); None: the
    # options themselves. A dataset read from a user's file hashes the file's content here, not its location.
    identity: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @property
    def higher_is_better(self) -> bool | None:
        """Whether a larger value of the metric is better (None while the loader chooses the metric)."""
        return None if self.metric is None else get_metric(self.metric).higher_is_better

    def options(self) -> list[str]:
        """The loader's own keywords (``RunConfig.dataset_kwargs``): its keyword-only parameters."""
        parameters = inspect.signature(self.loader).parameters.values()
        return [p.name for p in parameters if p.kind == p.KEYWORD_ONLY]

    def task(self, **fields: Any) -> GraphTask:
        """A ``GraphTask`` with this spec's name, level, task type, metric, feature kind and split count."""
        declared = dict(
            name=self.name,
            level=self.level,
            task_type=self.task_type,
            metric=self.metric,
            atom_encoder=self.features,
            num_splits=self.num_splits,
        )
        return GraphTask(**{**declared, **fields})


_DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(
    name: str,
    *,
    level: str,
    task_type: str | None,
    metric: str | None,
    features: str | None = None,
    num_splits: int = 1,
    check_options: Callable[..., Any] | None = None,
    identity: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a loader ``loader(spec, root, **options) -> GraphTask`` under ``name``
    (:data:`graphnorm.checks.NAME_PATTERN`: a lower-case letter, then a-z, 0-9 and _). The loader's keyword-only
    parameters are the dataset's options (``RunConfig.dataset_kwargs``); it gets ``split=`` only for a dataset with
    several standard splits.

    ``level``, ``task_type``, ``metric``, ``features`` and ``num_splits`` are the :class:`DatasetSpec` fields;
    ``check_options(**options)``: optional validation of the options, run by config validation before loading;
    ``identity(options)``: optional, what the run id hashes in place of the options.

    Raises:
        ValueError: ``name`` does not fit the pattern or is taken by another loader, a field is not one of its
            choices, or ``num_splits`` is not a positive integer.
    """
    check_name(name, "dataset name")
    where = f"dataset {name!r}"
    check_choice(level, LEVELS, "level", where)
    check_choice(task_type, (*TASK_TYPES, None), "task_type", where)
    check_choice(metric, (*metric_names(), None), "metric", where)
    check_choice(features, FEATURE_KINDS, "features", where)
    if not isinstance(num_splits, int) or num_splits < 1:
        raise ValueError(f"{where}: num_splits must be a positive integer, got {num_splits!r}")

    def decorator(loader: Callable[..., Any]) -> Callable[..., Any]:
        if name in _DATASETS and _DATASETS[name].loader is not loader:
            raise ValueError(f"dataset name {name!r} is already registered to {_DATASETS[name].loader.__name__}")
        _DATASETS[name] = DatasetSpec(
            name, loader, level, task_type, metric, features, num_splits, check_options, identity
        )
        return loader

    return decorator


def available_datasets(level: str | None = None) -> list[str]:
    """Sorted names of the registered datasets (of one ``level`` when given)."""
    return sorted(name for name, spec in _DATASETS.items() if level is None or spec.level == level)


def dataset_spec(name: str) -> DatasetSpec:
    """The declaration of ``name`` (case-insensitive); ``ValueError`` listing the choices if unknown."""
    if not isinstance(name, str) or name.lower() not in _DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid choices: {', '.join(available_datasets())}")
    return _DATASETS[name.lower()]


def datasets_with_splits() -> list[str]:
    """Sorted names of the datasets with several standard splits."""
    return [name for name in available_datasets() if _DATASETS[name].num_splits > 1]


def load_dataset(
    name: str, root: str | Path | None = None, split: int | str | None = None, **options: Any
) -> GraphTask:
    """Load ``name`` with its standard split (for a dataset with several, number ``split``; None: split 0).

    ``root``: the data root (:func:`graphnorm.data.root.resolve_root`). ``options``: the dataset's own keywords
    (:meth:`DatasetSpec.options`); a dataset whose loader takes a ``split`` keyword of its own (the SMILES CSV's split
    rule) gets ``split`` there.

    Raises:
        ValueError: an unknown dataset or option, a ``split`` for a dataset with one, or a task the trainer would
            misread (:func:`graphnorm.data.task.check_task`: non-finite features or targets; node masks that are not
            boolean, empty or shared between splits; labels out of range in any split; features or labels of another
            dtype or shape than the task needs), named with the dataset, the split and the offending nodes or values.
    """
    spec = dataset_spec(name)
    valid = spec.options()
    if split is not None and "split" in valid:
        options["split"], split = split, None
    if split is not None and spec.num_splits == 1:
        raise ValueError(
            f"split={split!r} selects one of several standard splits, but dataset {spec.name!r} has one; leave split "
            f"unset (datasets with splits: {', '.join(datasets_with_splits())})"
        )
    unknown = sorted(set(options) - set(valid))
    if unknown and not valid:
        raise ValueError(f"dataset {spec.name!r} takes no options, got {', '.join(unknown)}")
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for dataset {spec.name!r}; valid: {', '.join(valid)}")
    if spec.num_splits > 1:
        options["split"] = split
    task = spec.loader(spec, resolve_root(root), **options)
    check_task(task)
    return task
