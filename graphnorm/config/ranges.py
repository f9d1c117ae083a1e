"""Each single key of a run config within its range or among its choices (:func:`check_ranges`,
:func:`check_choices`), and the typo guards on a model's size (:data:`MAX_SIZES`, :func:`check_size`).
"""

from __future__ import annotations

from typing import Any

from graphnorm.config.value_types import shown

# The adjacency, layer order and readout choices are DeepGCN's (graphnorm.models.gcn), imported where they are checked
# so that importing this module stays free of torch.
FEATURE_NORMS = ("none", "row_l1")
EVAL_NODES = ("test", "rest")
OPTIMIZERS = ("adam", "adamw")
SCHEDULERS = ("none", "cosine", "plateau", "polynomial")
DEVICES = ("cpu", "cuda", "auto")
MAX_SEED = 2**32 - 1  # numpy's seed range (the run seeds numpy too)
# Typo guards on the model's size, far beyond this project's models (at most 64 layers, 80 channels; a 65536 x 65536
# weight alone is 16 GiB): larger values fail inside torch (an overflowing allocation) or spend hours building layers.
MAX_SIZES = {"num_layers": 10_000, "hidden_channels": 65_536, "ffn_channels": 65_536}


def check_size(key: str, value: Any) -> None:
    """``ValueError`` if ``value`` is above the typo guard ``MAX_SIZES`` of ``key`` (the last part of a dotted key)."""
    limit = MAX_SIZES[key.rsplit(".", 1)[-1]]
    if isinstance(value, int) and value > limit:
        raise ValueError(f"{key} must be <= {limit} (a guard against typos), got {value}")


def check_choices(config: Any) -> None:
    from graphnorm.analysis.collapse import PRECISIONS
    from graphnorm.data import available_datasets
    from graphnorm.models import available_models
    from graphnorm.models.gcn import ADJACENCIES, LAYER_ORDERS, READOUTS

    choices = {
        "dataset": tuple(available_datasets()),
        "model": tuple(available_models()),
        "adjacency": ADJACENCIES,
        "feature_norm": FEATURE_NORMS,
        "layer_order": LAYER_ORDERS,
        "readout": READOUTS,
        "eval_nodes": EVAL_NODES,
        "optimizer": OPTIMIZERS,
        "scheduler": SCHEDULERS,
        "device": DEVICES,
        "probe_precision": PRECISIONS,
    }
    for key, valid in choices.items():
        value = getattr(config, key)
        if value not in valid:
            raise ValueError(f"{key} must be one of {', '.join(valid)}; got {shown(value)}")


def check_ranges(config: Any) -> None:
    """Each single value within its range (sizes, counts, rates, seed, paths), a ``ValueError`` naming the first one
    that is not."""
    at_least_one = ("num_layers", "hidden_channels", "num_heads", "epochs", "batch_size", "probe_graphs")
    for key in at_least_one:
        if getattr(config, key) < 1:
            raise ValueError(f"{key} must be >= 1, got {getattr(config, key)}")
    for key in ("num_layers", "hidden_channels"):
        check_size(key, getattr(config, key))
    for key in ("limit_graphs", "max_nodes", "patience"):
        if getattr(config, key) is not None and getattr(config, key) < 1:
            raise ValueError(f"{key} must be >= 1 or null, got {getattr(config, key)}")
    if config.probe_every_steps < 0:
        raise ValueError(f"probe_every_steps must be >= 0 (0: off), got {config.probe_every_steps}")
    if config.bucket_batches < 1:
        raise ValueError(f"bucket_batches must be a positive integer, got {config.bucket_batches!r}")
    if not 0 <= config.seed <= MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**32 - 1] (numpy's seed range), got {config.seed}")
    if not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {config.dropout}")
    if config.lr <= 0:
        raise ValueError(f"lr must be > 0, got {config.lr}")
    for key in ("weight_decay", "warmup_steps"):
        if getattr(config, key) < 0:
            raise ValueError(f"{key} must be >= 0, got {getattr(config, key)}")
    if config.grad_clip < 0:
        raise ValueError(f"grad_clip must be >= 0 (0 disables), got {config.grad_clip}")
    if not config.attention_bias_lr_scale > 0:
        raise ValueError(f"attention_bias_lr_scale must be > 0, got {config.attention_bias_lr_scale}")
    if config.ema_decay is not None and not 0.0 < config.ema_decay < 1.0:
        raise ValueError(f"ema_decay must be in (0, 1) or null, got {config.ema_decay}")
    if config.max_train_minutes is not None and not config.max_train_minutes > 0:
        raise ValueError(f"max_train_minutes must be > 0 or null, got {config.max_train_minutes}")
    for key in ("data_root", "checkpoint_dir"):
        if getattr(config, key) == "":
            raise ValueError(f"{key} must be a non-empty path or null, got ''")
