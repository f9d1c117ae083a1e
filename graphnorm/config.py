"""One run's configuration: a plain dataclass (:class:`RunConfig`, nanoGPT style), shared by training, sweeps and
the CLI; what each key does is said beside its field.

A sweep expands a YAML grid into many ``RunConfig``s; each is executed by ``graphnorm.train.run``. Unknown keys and
impossible values are errors *before* anything runs: :meth:`RunConfig.validate` raises a one-line ``ValueError``
naming the key, for types (:func:`check_types`), choices and ranges, the rules between keys, the model's and the
dataset's own rules (from their registrations), norms a model cannot run (:func:`unsupported_norm_reason`) and a
model whose training outgrows this machine's memory (:func:`check_model_fits`); values are quoted cut short
(:func:`shown`), never expanded in full. A run's id (:func:`config_run_id`) hashes its config but not where files
live (:data:`NOT_HASHED`), so setting ``data_root``, ``checkpoint_dir`` or ``tensorboard_dir`` never re-runs a
finished sweep. Key-value overrides (``epochs=5``, ``base.seed=[0,1]``): :func:`apply_overrides`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import math
import re
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from graphnorm.files import MAX_YAML_VALUES, parse_yaml

# The adjacency, layer order and readout choices are DeepGCN's (graphnorm.models.gcn), imported where they are checked
# so that importing this module stays free of torch.
FEATURE_NORMS = ("none", "row_l1")
EVAL_NODES = ("test", "rest")
OPTIMIZERS = ("adam", "adamw")
SCHEDULERS = ("none", "cosine", "plateau", "polynomial")
DEVICES = ("cpu", "cuda", "auto")
# RunConfig keys a model receives when its constructor has a parameter of that name (readout at graph level only);
# its other constructor keywords come through model_kwargs, and the task's (in/out channels, feature kinds) from the
# dataset (graphnorm.models.registry.TASK_KEYWORDS).
MODEL_CONFIG_KEYS = (
    "num_layers",
    "hidden_channels",
    "num_heads",
    "norm",
    "norm_kwargs",
    "dropout",
    "residual",
    "adjacency",
    "layer_order",
    "shared_layernorm",
    "readout",
    "virtual_node",
)


@dataclass
class RunConfig:
    """Every key of one run, with its default; :meth:`from_dict` builds and validates one from a mapping.

    The defaults (dropout 0.5, Adam at lr 0.01, weight decay 5e-4, 200 epochs) are the GCN protocol's; the protocol
    presets set their keys explicitly (``experiments/runs/*.yaml``, ``experiments/sweeps/*.yaml``): Kipf & Welling's
    GCN on Cora (``cora_depth.yaml``), the ContraNorm / PairNorm deep GCN on Cora (``cora_contranorm_protocol.yaml``:
    row-normalized adjacency, dropout before each convolution, ContraNorm with a shared LayerNorm, last-epoch
    accuracy on the nodes outside train+val), Graphormer-slim on ZINC (``zinc_graphormer.yaml``, a CPU budget's
    recipe: AdamW, the per-step polynomial schedule, gradient clipping; the paper's optimizer settings are the
    defaults of :func:`graphnorm.train.schedules.polynomial_optimizer`).
    """

    # --- data ---
    dataset: str = "cora"  # a registered dataset (graphnorm.data.available_datasets())
    # which standard split, for datasets with several (graphnorm.data.datasets_with_splits(): the 10 geom-gcn
    # splits of actor, cornell, texas, wisconsin); None: split 0 there, and the only split of every other dataset
    split: int | None = None
    # keywords of the dataset's loader; dataset=smiles: path (required), smiles_column, target_columns, task, split,
    # invalid, split_seed (see graphnorm.data.smiles)
    dataset_kwargs: dict[str, Any] = field(default_factory=dict)
    data_root: str | None = None  # None: $GRAPHNORM_DATA, else the user cache
    feature_norm: str = "none"  # none | row_l1 (row-L1-normalized node features, Kipf/PairNorm/ContraNorm protocol)
    eval_nodes: str = "test"  # node-level only: test (public test mask) | rest (all nodes outside train+val)
    limit_graphs: int | None = None  # graph-level smoke runs: a fixed random subset of at most this many graphs/split
    max_nodes: int | None = None  # graphormer: largest graph allowed (dense [n, n] inputs); larger ones -> error
    drop_large_graphs: bool = False  # graphormer: drop graphs above max_nodes instead (counted in the record)
    # --- model ---
    model: str = "gcn"  # a registered model (graphnorm.models.available_models())
    num_layers: int = 2  # number of graph convolutions (or transformer layers)
    hidden_channels: int = 64
    norm: str = "none"
    norm_kwargs: dict[str, Any] = field(default_factory=dict)
    dropout: float = 0.5
    residual: bool = False
    adjacency: str = "sym"  # sym: D^-1/2 (A+I) D^-1/2 (Kipf & Welling) | row: D^-1 (A+I) (PairNorm, ContraNorm)
    layer_order: str = "conv-norm-act-dropout"  # or dropout-conv-norm-act (Kipf, PairNorm, ContraNorm code)
    shared_layernorm: bool = False  # one LayerNorm shared by all hidden layers, after the norm (ContraNorm code)
    readout: str = "mean"  # graph-level datasets: mean | sum (pool node rows) | virtual (read the virtual node)
    virtual_node: bool = False  # graph-level datasets: add one virtual node per graph, linked to all its nodes
    num_heads: int = 4  # attention heads (graphormer; gat: of every hidden layer)
    model_kwargs: dict[str, Any] = field(default_factory=dict)  # extra model-specific constructor keywords
    # --- training ---
    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    optimizer: str = "adam"  # adam | adamw
    # none | cosine (per epoch, after warmup) | plateau (on the validation metric) | polynomial (graph level, per
    # optimizer step: linear warmup over warmup_steps, then linear decay to end_lr at total_steps; the Graphormer
    # recipe, needs optimizer=adamw)
    scheduler: str = "none"
    warmup_epochs: int = 0  # linear learning-rate warmup before the scheduler
    warmup_steps: int = 0  # scheduler=polynomial: optimizer steps of linear warmup
    total_steps: int | None = None  # scheduler=polynomial: step at which lr reaches end_lr; None: all steps of the run
    end_lr: float = 1e-9  # scheduler=polynomial: final learning rate
    # scheduler=polynomial, graphormer: lr multiplier of the attention-bias tables (graphnorm.train.schedules)
    attention_bias_lr_scale: float = 1.0
    grad_clip: float = 0.0  # max gradient norm; 0 disables clipping
    # early stopping: end the run once the best-validation epoch is this many epochs old (GCNII paper: 100);
    # None: run all epochs
    patience: int | None = None
    # graph level: evaluate, select and keep an exponential moving average of the weights (and buffers), updated
    # after every optimizer step: ema = decay * ema + (1 - decay) * weights; None: the weights themselves
    ema_decay: float | None = None
    batch_size: int = 128  # graph-level mini-batch size (node-level training is full-batch)
    # graphormer: sort each window of this many shuffled training batches by graph size (less padding in the dense
    # attention; see graphnorm.data.size_buckets); 1: plain shuffled batches
    bucket_batches: int = 1
    seed: int = 0
    device: str = "cpu"  # cpu | cuda | auto
    max_train_minutes: float | None = None  # graph level: stop training once the training loop used this much time
    # the model file <dir>/<run_id>.model.pt when the run ends; graph level: also the resume state <dir>/<run_id>.pt
    checkpoint_dir: str | None = None
    # TensorBoard scalars (loss, metrics, lr per epoch; collapse metrics per layer) in <dir>/<run_id>; like data_root
    # and checkpoint_dir, not part of the run id (see graphnorm.train.tensorboard_log)
    tensorboard_dir: str | None = None
    # --- analysis ---
    probe: bool = True  # collapse metrics at every layer of the final model, written to the sweep's layers.csv
    probe_graphs: int = 64  # graph-level datasets: size of the fixed validation sample the probe measures
    # how the probe keeps each layer's rows: "float64" (the reference) or "float32" (half the memory; every sum still
    # accumulates in float64, see graphnorm.analysis.collapse.collapse_records)
    probe_precision: str = "float64"
    # collapse over training: probe the weights being trained at step 0 and every this many optimizer steps (node
    # level: one step per epoch), written to the record's collapse_steps and a sweep's steps.csv; 0: off
    # (graphnorm.train.collapse_steps)
    probe_every_steps: int = 0

    @classmethod
    def field_names(cls) -> list[str]:
        """The config's keys, in field order."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any], check_device: bool = True) -> RunConfig:
        """Build and validate from a mapping; unknown keys raise ``ValueError`` listing the valid ones.
        ``check_device``: see :meth:`validate`."""
        if not isinstance(values, dict):
            raise ValueError(f"a run config must be a mapping of RunConfig keys, got {shown(values)}")
        valid = set(cls.field_names())
        unknown = sorted((key for key in values if key not in valid), key=str)
        if unknown:
            raise ValueError(f"unknown config key(s) {shown(unknown)}; valid keys: {', '.join(cls.field_names())}")
        config = cls(**values)
        config.validate(check_device=check_device)
        return config

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def is_node_level(self) -> bool:
        """Whether the config's dataset is node-level (its registration says)."""
        from graphnorm.data import dataset_spec

        return dataset_spec(self.dataset).level == "node"

    def validate(self, check_device: bool = True) -> None:
        """Raise a one-line ``ValueError`` naming the first impossible value: sizes and types, then ranges, then the
        rules between keys, then whether the model fits this machine's memory. ``check_device=False`` skips what
        judges this machine, whether ``device`` exists and the memory (for a driver that only plans runs for other
        machines)."""
        check_types(self)
        check_choices(self)
        check_ranges(self)
        check_schedule_rules(self)
        check_model_rules(self)
        check_dataset_rules(self)
        check_norm_rules(self)
        if check_device:
            check_device_available(self)
            check_model_fits(self)


# --- types: one check over every field, driven by its annotation ----------------------------------------------
MAX_INT = 2**63 - 1  # torch's int64; also the largest count tqdm and range() take
MAX_SEED = 2**32 - 1  # numpy's seed range (the run seeds numpy too)
# Typo guards on the model's size, far beyond this project's models (at most 64 layers, 80 channels; a 65536 x 65536
# weight alone is 16 GiB): larger values fail inside torch (an overflowing allocation) or spend hours building layers.
MAX_SIZES = {"num_layers": 10_000, "hidden_channels": 65_536, "ffn_channels": 65_536}
SHOWN_CHARS = 80  # a value quoted in an error message is cut to this many characters
# The most items (list items, mapping keys and values, nested ones counted in full) one config value may hold; the
# YAML reader's bound on a document with its aliases expanded, so that a value built in Python obeys it too.
MAX_VALUE_ITEMS = MAX_YAML_VALUES
# A number written without a dot or without an exponent sign, which YAML 1.1 (PyYAML) reads as a string.
YAML_STRING_NUMBER = re.compile(r"([-+]?)(\d*)(\.\d*)?([eE])([-+]?)(\d+)")


class _ShortRepr(reprlib.Repr):
    """``reprlib``'s bounded ``repr`` (a few items per level, a few levels), whose work does not grow with the
    value: a list that aliases expand to billions of items costs what its first few cost."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxset, self.maxfrozenset = 3, 6, 6, 6, 6
        self.maxdict, self.maxstring, self.maxother = 4, SHOWN_CHARS, SHOWN_CHARS

    def repr_str(self, x: str, level: int) -> str:
        return repr(x[: self.maxstring + 1])  # its start, cut with "..." by shown() as a whole

    def repr_int(self, x: int, level: int) -> str:
        # repr of an int over 4300 digits raises (sys.set_int_max_str_digits)
        return super().repr_int(x, level) if x.bit_length() <= 256 else f"<an integer of {x.bit_length()} bits>"


_SHORT_REPR = _ShortRepr()


def shown(value: Any) -> str:
    """``repr(value)`` cut short, without computing the whole of it, for a one-line error message (``repr``
    escapes newlines)."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def check_value_size(key: str, value: Any) -> None:
    """``ValueError`` naming ``key`` when ``value`` holds more than :data:`MAX_VALUE_ITEMS` items, nested ones
    counted in full (so a list repeated by reference counts every time): later checks and the run id walk it whole.
    Stops counting there, so a huge or recursive value costs no more than that."""
    count, pending = 0, [value]
    while pending:
        item = pending.pop()
        if not isinstance(item, (dict, list, tuple, set, frozenset)):
            continue
        count += len(item) * (2 if isinstance(item, dict) else 1)
        if count > MAX_VALUE_ITEMS:
            raise ValueError(
                f"{key} holds more than {MAX_VALUE_ITEMS} values (nested lists and mappings counted in full, each "
                f"time they are repeated): {shown(value)}"
            )
        pending.extend([*item.keys(), *item.values()] if isinstance(item, dict) else item)


def matches(value: Any, expected: Any) -> bool:
    """Whether ``value`` is an instance of the annotation ``expected`` (``int``, ``float | None``, ``dict[str, Any]``,
    ...). Strict where YAML makes mistakes easy: a bool is not a number, a float (even 2.0) is not an int, a float must
    be finite; an int is a valid float."""
    origin = get_origin(expected)
    if expected is Any:
        return True
    if expected is None or expected is type(None):
        return value is None
    if origin in (Union, UnionType):
        return any(matches(value, option) for option in get_args(expected))
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return isinstance(value, int) or math.isfinite(value)
    if origin is dict:
        key_type = get_args(expected)[0] if get_args(expected) else Any
        return isinstance(value, dict) and all(matches(key, key_type) for key in value)
    return isinstance(value, origin or expected)


def describe(expected: Any) -> str:
    """The annotation in an error message's words: ``int | None`` -> 'an integer or null'."""
    if get_origin(expected) in (Union, UnionType):
        options = get_args(expected)
        words = " or ".join(describe(option) for option in options if option is not type(None))
        return words + " or null" * (type(None) in options)
    names = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string", dict: "a mapping"}
    return names.get(get_origin(expected) or expected, f"a {getattr(expected, '__name__', expected)}")


def type_hint(value: Any, expected: Any) -> str:
    """The likely cause of a wrong type, for the usual mistakes (a quoted or YAML-string number, 2.0 for 2, true)."""
    wants_number = matches(1, expected)
    if isinstance(value, bool) and wants_number:
        return " (true/false is not a number)"
    if isinstance(value, str) and wants_number:
        try:
            number = float(value)
        except ValueError:
            return ""
        yaml_string = YAML_STRING_NUMBER.fullmatch(value.strip())
        if yaml_string and math.isfinite(number):
            sign, whole, fraction, e, exponent_sign, exponent = yaml_string.groups()
            fixed = f"{sign}{whole or '0'}{fraction if fraction and len(fraction) > 1 else '.0'}{e}"
            return f" (YAML reads {value} as a string: write {fixed}{exponent_sign or '+'}{exponent})"
        return " (a quoted number is a string: write it without quotes)" * math.isfinite(number)
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT and not matches(value, expected):
        return f" (write {int(value)})"
    return ""


def check_value_type(key: str, value: Any, expected: Any) -> None:
    """``ValueError`` naming ``key`` unless ``value`` fits the annotation ``expected`` (ints within int64)."""
    if not matches(value, expected):
        if isinstance(value, dict) and describe(expected).startswith("a mapping"):  # so a key is not a string
            raise ValueError(f"{key} must be a mapping with string keys, got {shown(value)}")
        raise ValueError(f"{key} must be {describe(expected)}, got {shown(value)}{type_hint(value, expected)}")
    if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value <= MAX_INT:
        raise ValueError(f"{key} must be at most 2**63 - 1 in size, got {shown(value)}")


@functools.cache
def annotations(function_or_class: Any) -> dict[str, Any]:
    """``typing.get_type_hints``, evaluated once per function or class."""
    return get_type_hints(function_or_class)


def check_keyword_types(where: str, keywords: dict[str, Any], function: Any) -> None:
    """Check each keyword's value against ``function``'s annotation for it (``where.key`` names it)."""
    hints = annotations(function)
    for key, value in keywords.items():
        if key in hints:
            check_value_type(f"{where}.{key}", value, hints[key])


def check_types(config: RunConfig) -> None:
    """Every field against its annotation (:func:`check_value_type`), strictly: an ``int`` key takes an integer only
    (``2.0``, ``"2"`` and ``true`` are rejected, as YAML writes an integer without a dot or quotes), a ``float`` key
    takes an integer or a finite float (given ``lr: 1``, the config keeps the int 1), ``X | None`` also takes ``null``.
    A number PyYAML reads as a string (``5e-4``, ``1e5``: YAML 1.1 wants a dot and a signed exponent) is named as
    such, with its fix (``5.0e-4``)."""
    hints = annotations(RunConfig)
    for f in dataclasses.fields(RunConfig):
        check_value_size(f.name, getattr(config, f.name))
        check_value_type(f.name, getattr(config, f.name), hints[f.name])


# --- ranges of single values --------------------------------------------------------------------------------------
def check_size(key: str, value: Any) -> None:
    """``ValueError`` if ``value`` is above the typo guard ``MAX_SIZES`` of ``key`` (the last part of a dotted key)."""
    limit = MAX_SIZES[key.rsplit(".", 1)[-1]]
    if isinstance(value, int) and value > limit:
        raise ValueError(f"{key} must be <= {limit} (a guard against typos), got {value}")


def check_choices(config: RunConfig) -> None:
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


def check_ranges(config: RunConfig) -> None:
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


# --- rules between keys ---------------------------------------------------------------------------------------
def check_schedule_rules(config: RunConfig) -> None:
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


def check_model_rules(config: RunConfig) -> None:
    """The model predicts at the dataset's level; keys another model owns keep their defaults; then the model's own
    rules (``check_config`` of its registration: :mod:`graphnorm.models.registry`) and its keywords."""
    from graphnorm.data import available_datasets
    from graphnorm.models import available_models, model_spec

    spec = model_spec(config.model)
    level = "node" if config.is_node_level else "graph"
    if level not in spec.levels:
        wanted = spec.levels[0]
        raise ValueError(
            f"model={config.model!r} predicts per {wanted}: use a {wanted}-level dataset "
            f"({', '.join(available_datasets(wanted))}), not dataset={config.dataset!r}"
        )
    defaults = RunConfig()
    for other in available_models():
        for key, message in model_spec(other).own_keys.items():
            if other != spec.name and getattr(config, key) != getattr(defaults, key):
                raise ValueError(message)
    if config.drop_large_graphs and config.max_nodes is None:
        raise ValueError("drop_large_graphs needs max_nodes")
    if spec.check_config is not None:
        spec.check_config(config)
    check_model_kwargs(config)


def model_keywords(config: RunConfig, level: str) -> dict[str, Any]:
    """The keywords of ``config.model``'s constructor that the config sets: every :data:`MODEL_CONFIG_KEYS` key the
    constructor takes (``readout`` at graph level only), then ``model_kwargs``. A key the model does not take must
    keep its default (else ``ValueError``: it would be silently ignored)."""
    from graphnorm.models import model_spec

    accepted = model_spec(config.model).keywords()
    defaults = RunConfig()
    keywords = {}
    for key in MODEL_CONFIG_KEYS:
        if key == "readout" and level == "node":
            continue
        if key in accepted:
            keywords[key] = getattr(config, key)
        elif getattr(config, key) != getattr(defaults, key):
            raise ValueError(
                f"{key}={shown(getattr(config, key))} is not an option of model {config.model!r}: leave {key} at "
                f"{getattr(defaults, key)!r}"
            )
    return {**keywords, **config.model_kwargs}


def check_model_kwargs(config: RunConfig) -> None:
    """Unknown keys, then value types (from the model constructor's annotations), then the constructor's own checks,
    run on the meta device so that nothing is allocated."""
    from graphnorm.models import model_spec

    spec = model_spec(config.model)
    model_class = spec.factory
    valid = [key for key in spec.keywords() if key not in MODEL_CONFIG_KEYS]
    unknown = sorted(set(config.model_kwargs) - set(valid))
    if unknown:
        raise ValueError(f"unknown model_kwargs {shown(unknown)} for {config.model}; valid: {', '.join(valid)}")
    check_keyword_types(
        "model_kwargs", config.model_kwargs, model_class.__init__ if isinstance(model_class, type) else model_class
    )
    model_keywords(config, "node" if config.is_node_level else "graph")
    if not config.model_kwargs:  # the config's own keys are checked already
        return
    for key in sorted(config.model_kwargs.keys() & MAX_SIZES.keys()):
        check_size(f"model_kwargs.{key}", config.model_kwargs[key])
    arguments = meta_arguments(config)
    error = construction_error(model_class, **arguments, **config.model_kwargs)
    if error is not None:
        raise ValueError(f"model_kwargs for model {config.model!r} are invalid: {error}")


# What a model takes from the task, at its smallest: model_kwargs are checked by building the model with these.
META_TASK_ARGUMENTS = {"in_channels": 1, "out_channels": 1, "atom_feature_dims": [1], "bond_feature_dims": [1]}


def meta_arguments(config: RunConfig) -> dict[str, Any]:
    """The smallest model that judges ``model_kwargs``: one layer, no norm (its keywords are checked apart), a
    one-feature task, and the config's width and heads (which the keywords must fit), each where the model's
    constructor takes it."""
    from graphnorm.models import model_spec

    accepted = model_spec(config.model).parameters()
    size = {"num_layers": 1, "norm": "none", "hidden_channels": config.hidden_channels, "num_heads": config.num_heads}
    arguments = {**META_TASK_ARGUMENTS, **size}
    return {key: value for key, value in arguments.items() if key in accepted}


def check_split(config: RunConfig) -> None:
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


def check_dataset_kwargs(config: RunConfig) -> None:
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


def check_dataset_rules(config: RunConfig) -> None:
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


def check_norm_rules(config: RunConfig) -> None:
    """The norm exists, its keywords are known and valid (it is built once, on the meta device), and it can run on
    the model."""
    from graphnorm.norms import build_norm, norm_class, norm_keywords

    norm_class(config.norm)  # unknown norm -> ValueError listing the valid ones
    valid = norm_keywords(config.norm)
    unknown = sorted(set(config.norm_kwargs) - set(valid))
    if unknown:
        raise ValueError(f"unknown norm_kwargs {shown(unknown)} for norm {config.norm!r}; valid: {', '.join(valid)}")
    check_keyword_types("norm_kwargs", config.norm_kwargs, norm_class(config.norm).__init__)
    error = construction_error(build_norm, config.norm, config.hidden_channels, **config.norm_kwargs)
    if error is not None:
        where = f"norm {config.norm!r} (hidden_channels={config.hidden_channels})"
        raise ValueError(f"norm_kwargs for {where} are invalid: {error}")
    reason = unsupported_norm_reason(config)
    if reason is not None:
        raise ValueError(reason)


def check_device_available(config: RunConfig) -> None:
    """``device="cuda"`` only where CUDA is available."""
    import torch

    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but CUDA is not available on this machine; use device='cpu' or 'auto'")


# Bytes a parameter takes in training: its float32 weight, gradient and Adam's two moments.
TRAINING_BYTES_PER_PARAMETER = 16
_PARAMETER_COUNTS: dict[str, int | None] = {}  # parameter_count's memo


def model_parameters(config: RunConfig) -> int | None:
    """About how many parameters (and buffer entries) ``config``'s model has on a one-feature task, counted on the
    meta device (nothing allocated); ``None`` if it cannot be built so. A model deeper than four layers is counted
    at three and four and extrapolated: each layer between the first and the last is the same size."""
    from graphnorm.models import model_spec

    spec = model_spec(config.model)
    accepted = spec.parameters()
    keywords = {**model_keywords(config, "node" if config.is_node_level else "graph"), "norm": "none"}
    keywords["norm_kwargs"] = {}  # a norm's few weights per channel do not matter here
    keywords = {key: value for key, value in keywords.items() if key in accepted}
    depth = keywords.pop("num_layers", None)
    if depth is None or depth <= 4:
        return parameter_count(config.model, keywords, depth)
    three, four = parameter_count(config.model, keywords, 3), parameter_count(config.model, keywords, 4)
    return None if three is None or four is None else three + (four - three) * (depth - 3)


def parameter_count(model: str, keywords: dict[str, Any], num_layers: int | None) -> int | None:
    """Parameters and buffer entries of ``model`` built on the meta device with ``keywords`` (and ``num_layers``
    where not ``None``) on a one-feature task; ``None`` if it cannot be built. Memoized."""
    import torch

    from graphnorm.models import model_spec

    key = repr((model, num_layers, sorted(keywords.items())))
    if key not in _PARAMETER_COUNTS:
        if len(_PARAMETER_COUNTS) >= 4096:
            _PARAMETER_COUNTS.clear()
        spec = model_spec(model)
        task = {name: value for name, value in META_TASK_ARGUMENTS.items() if name in spec.parameters()}
        depth = {} if num_layers is None else {"num_layers": num_layers}
        try:
            with torch.device("meta"):
                built = spec.factory(**task, **keywords, **depth)
            _PARAMETER_COUNTS[key] = sum(t.numel() for t in (*built.parameters(), *built.buffers()))
        except Exception:  # noqa: BLE001 (the model's own checks report its errors: nothing to count)
            _PARAMETER_COUNTS[key] = None
    return _PARAMETER_COUNTS[key]


def check_model_fits(config: RunConfig) -> None:
    """``ValueError`` (a :class:`graphnorm.memory.InsufficientMemoryError`) when training the model takes more
    memory than this machine has, counting only its parameters (:data:`TRAINING_BYTES_PER_PARAMETER` each): a width
    and depth far beyond the machine fail here, not after building layer upon layer. Runs on CUDA are not judged."""
    import torch

    from graphnorm.memory import check_fits

    if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()):
        return
    from graphnorm.models import model_spec

    parameters = model_parameters(config)
    if parameters is None:
        return
    sizes = [f"{key}={getattr(config, key)}" for key in ("num_layers", "hidden_channels", "num_heads")]
    sizes = sizes[:2] + sizes[2:] * ("num_heads" in model_spec(config.model).parameters())
    sizes += [f"model_kwargs={shown(config.model_kwargs)}"] * bool(config.model_kwargs)
    check_fits(
        parameters * TRAINING_BYTES_PER_PARAMETER,
        f"training model={config.model!r} with {', '.join(sizes)} (about {parameters:.3g} parameters, "
        f"{TRAINING_BYTES_PER_PARAMETER} bytes each with gradients and Adam's moments)",
        "lower its sizes",
    )


_CONSTRUCTION_ERRORS: dict[str, str | None] = {}  # construction_error's memo


def construction_error(build: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """The one-line message of the error ``build(*args, **kwargs)`` raises, or ``None`` if it succeeds.

    It runs on the meta device (shapes only: no memory, so absurd sizes cost nothing) and is memoized, since a sweep
    checks the same keywords for each of its grid points. Any exception counts: these constructors receive the
    config's values, so whatever they raise on them is the config's error.
    """
    import torch

    key = repr((build, args, sorted(kwargs.items())))
    if key not in _CONSTRUCTION_ERRORS:
        if len(_CONSTRUCTION_ERRORS) >= 4096:
            _CONSTRUCTION_ERRORS.clear()
        try:
            with torch.device("meta"):
                build(*args, **kwargs)
            _CONSTRUCTION_ERRORS[key] = None
        except Exception as e:  # noqa: BLE001
            _CONSTRUCTION_ERRORS[key] = one_line(e)
    return _CONSTRUCTION_ERRORS[key]


def one_line(error: BaseException) -> str:
    """An exception's message on one line (whitespace, line breaks included, collapsed to single spaces)."""
    return " ".join(str(error).split()) or type(error).__name__


def unsupported_norm_reason(config: RunConfig) -> str | None:
    """Why ``config.norm`` cannot run on ``config.model`` (one line), or ``None`` when it can.

    Only the model context is judged here (which rows, masks and edges the model hands its norms), not the norm's
    own keyword values; a sweep uses it to leave such norms out of ``norm: all``.
    """
    norm = config.norm.lower() if isinstance(config.norm, str) else config.norm
    if norm != "sepnorm":
        return None
    if not has_token_rows(config):
        return f"sepnorm needs graph-token rows: {token_rows_hint()}"
    norm_kwargs = config.norm_kwargs if isinstance(config.norm_kwargs, dict) else {}
    token_kwargs = norm_kwargs.get("token_kwargs") or {}
    if (
        isinstance(norm_kwargs.get("token_norm"), str)
        and norm_kwargs["token_norm"].lower() == "contranorm"
        and isinstance(token_kwargs, dict)
        and token_kwargs.get("exclude_neighbors", True)
    ):
        # SepNorm hands its token norm the token rows alone, without edges (tokens have no neighbours).
        return "sepnorm's token rows have no edges: token_norm=contranorm needs token_kwargs exclude_neighbors=false"
    return None


def has_token_rows(config: RunConfig) -> bool:
    """Whether ``config.model`` hands its norms graph-token rows in this run (as its registration declares); an
    unknown model has none."""
    from graphnorm.models import available_models, model_spec

    return config.model in available_models() and model_spec(config.model).has_token_rows(config)


def token_rows_hint() -> str:
    """How to get graph-token rows: the models that always have them, or the default model with a virtual node."""
    from graphnorm.models import available_models, model_spec

    always = " or ".join(f"model={name}" for name in available_models() if model_spec(name).token_rows)
    return f"use {always}, or model={RunConfig().model} with virtual_node=true on a graph-level dataset"


# --- run ids and overrides ---------------------------------------------------------------------------------------
# Config fields that do not change a run's result, left out of its run_id so a sweep resumes on another machine.
NOT_HASHED = ("data_root", "checkpoint_dir", "tensorboard_dir")


def config_run_id(config: RunConfig) -> str:
    """Stable, readable id: ``<norm>-L<layers>-s<seed>-<hash of the config's non-default values>``.

    Only values that differ from ``RunConfig``'s defaults are hashed, so a later graphnorm version that adds a
    config key (with a default that keeps the old behaviour) still recognises the runs of an existing sweep.
    ``dataset_kwargs`` are hashed as the dataset declares (:func:`dataset_identity`): a SMILES CSV by its content,
    so an edited file is a new run and a moved one the same run.
    """
    float_fields = {f.name for f in dataclasses.fields(RunConfig) if f.type in ("float", float)}

    def normalized(values: dict[str, Any]) -> dict[str, Any]:
        # lr: 1 and lr: 1.0 are the same run.
        return {k: float(v) if k in float_fields and isinstance(v, int) else v for k, v in values.items()}

    defaults = normalized(RunConfig().to_dict())
    values = {
        k: v for k, v in normalized(config.to_dict()).items() if k not in NOT_HASHED and v != defaults.get(k, object())
    }
    if "dataset_kwargs" in values:
        values["dataset_kwargs"] = dataset_identity(config)
    digest = hashlib.sha1(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{config.norm}-L{config.num_layers}-s{config.seed}-{digest}"


def dataset_identity(config: RunConfig) -> dict[str, Any]:
    """What the run id hashes of ``dataset_kwargs``: the dataset's declared ``identity`` (a user's file by its
    content, not its path: :class:`graphnorm.data.registry.DatasetSpec`), else the options themselves."""
    from graphnorm.data import available_datasets, dataset_spec

    if config.dataset in available_datasets():
        identity = dataset_spec(config.dataset).identity
        if identity is not None:
            return identity(dict(config.dataset_kwargs))
    return config.dataset_kwargs


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"base.epochs=50"`` -> ``(["base", "epochs"], 50)``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {shown(text)} must look like key=value (e.g. base.epochs=50 or grid.seed=[0,1])")
    parts = key.strip().split(".")
    if any(not p for p in parts):
        raise ValueError(f"override {shown(text)} has an empty key component")
    parsed = parse_yaml(value, f"override {shown(text)}")
    return parts, parsed


def apply_overrides(mapping: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """A copy of ``mapping`` with each ``a.b.c=value`` override set (intermediate mappings are created)."""
    result = copy.deepcopy(mapping)
    for text in overrides:
        parts, value = parse_override(text)
        node = result
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ValueError(f"override {shown(text)}: {where} is a {type(child).__name__}, not a mapping")
            node = child
        node[parts[-1]] = value
    return result
