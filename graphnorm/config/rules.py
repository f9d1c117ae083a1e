"""The run config's rules between keys, besides the model's and the norm's: the learning-rate schedule, the dataset
(its split, its loader's options, keys that are for one level only) and the device.

``config`` below is a :class:`~graphnorm.config.RunConfig` (the module that defines it imports these rules).
"""

from __future__ import annotations

from typing import Any

from graphnorm.config.value_types import check_keyword_types, shown


def check_schedule_rules(config: Any) -> None:
    """The learning-rate keys fit together: warmup within the run, ``end_lr <= lr``, and the per-step keys
    (``warmup_steps``, ``total_steps``) only with ``scheduler="polynomial"``, which needs AdamW."""
    if not 0 <= config.warmup_epochs < config.epochs:
        raise ValueError(f"warmup_epochs must be in [0, epochs={config.epochs}), got {config.warmup_epochs}")
    if config.total_steps is not None and config.total_steps <= config.warmup_steps:
        raise ValueError(f"total_steps must be > warmup_steps={config.warmup_steps}, got {config.total_steps}")
    if not 0 <= config.end_lr <= config.lr:
        raise ValueError(f"end_lr must be in [0, lr={config.lr}], got {config.end_lr}")
    if config.scheduler == "polynomial":
        if config.optimizer != "adamw":
            raise ValueError("scheduler='polynomial' is the Graphormer recipe with AdamW: set optimizer=adamw")
        if config.warmup_epochs:
            raise ValueError("scheduler='polynomial' warms up per step: use warmup_steps, not warmup_epochs")
    elif config.warmup_steps or config.total_steps is not None:
        raise ValueError(f"warmup_steps and total_steps are for scheduler='polynomial', not {config.scheduler!r}")


def check_split(config: Any) -> None:
    """``split`` names one of the dataset's standard splits; a dataset with a single split takes none."""
    if config.split is None:
        return
    from graphnorm.data import dataset_spec, datasets_with_splits

    num_splits = dataset_spec(config.dataset).num_splits
    if num_splits == 1:
        raise ValueError(
            f"split={config.split} is for datasets with several standard splits ({', '.join(datasets_with_splits())}); "
            f"dataset={config.dataset!r} has one: leave split null"
        )
    if not 0 <= config.split < num_splits:
        raise ValueError(
            f"split must be in [0, {num_splits - 1}] for dataset={config.dataset!r} ({num_splits} standard splits), "
            f"got {config.split}"
        )


def check_dataset_kwargs(config: Any) -> None:
    """``dataset_kwargs`` are the dataset loader's own keywords (:meth:`DatasetSpec.options`): known names, the
    required ones given, value types from the loader's annotations, then the dataset's own ``check_options``."""
    import inspect

    from graphnorm.data import available_datasets, dataset_spec

    spec = dataset_spec(config.dataset)
    valid = spec.options()
    if not valid:
        if config.dataset_kwargs:
            with_options = [name for name in available_datasets() if dataset_spec(name).options()]
            raise ValueError(
                f"dataset_kwargs are for datasets with options ({', '.join(with_options)}), not "
                f"dataset={config.dataset!r}: leave it empty"
            )
        return
    unknown = sorted(set(config.dataset_kwargs) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown dataset_kwargs {shown(unknown)} for dataset {spec.name!r}; valid: {', '.join(valid)}"
        )
    parameters = inspect.signature(spec.loader).parameters
    for name in valid:
        if parameters[name].default is inspect.Parameter.empty and name not in config.dataset_kwargs:
            raise ValueError(f"dataset={spec.name!r} needs dataset_kwargs.{name}")
    check_keyword_types("dataset_kwargs", config.dataset_kwargs, spec.loader)
    if spec.check_options is None:
        return
    try:
        spec.check_options(**config.dataset_kwargs)
    except ValueError as error:
        raise ValueError(f"dataset_kwargs for dataset {spec.name!r} are invalid: {error}") from None


def check_dataset_rules(config: Any) -> None:
    """The split and the dataset's options are valid, and every key that is for one level only (node or graph) keeps
    its default at the other."""
    check_split(config)
    check_dataset_kwargs(config)
    if config.is_node_level:
        for key in ("max_train_minutes", "ema_decay"):
            if getattr(config, key) is not None:
                raise ValueError(f"{key} is for graph-level datasets, not dataset={config.dataset!r}")
        if config.scheduler == "polynomial":
            raise ValueError(
                f"scheduler='polynomial' steps per mini-batch (graph level), not for dataset={config.dataset!r}"
            )
        if config.virtual_node:
            raise ValueError(f"virtual_node is for graph-level datasets, not dataset={config.dataset!r}")
        if config.limit_graphs is not None:
            raise ValueError(f"limit_graphs is for graph-level datasets, not dataset={config.dataset!r}")
    else:
        if config.feature_norm != "none":
            raise ValueError(
                f"feature_norm={config.feature_norm!r} needs float node features; dataset={config.dataset!r} "
                "has categorical atom features"
            )
        if config.eval_nodes != "test":
            raise ValueError(f"eval_nodes is for node-level datasets, not dataset={config.dataset!r}")
    if config.readout == "virtual" and not config.virtual_node:
        raise ValueError("readout='virtual' reads the virtual node: set virtual_node=true")


def check_device_available(config: Any) -> None:
    """``device="cuda"`` only where CUDA is available."""
    import torch

    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but CUDA is not available on this machine; use device='cpu' or 'auto'")
