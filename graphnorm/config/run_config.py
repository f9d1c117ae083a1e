"""One run's configuration: a plain dataclass (:class:`RunConfig`, nanoGPT style), shared by training, sweeps and
the CLI; what each key does is said beside its field. :meth:`RunConfig.validate` runs the checks of this package's
other modules, in order.

A run's id (:func:`config_run_id`) hashes its config but not where files live (:data:`NOT_HASHED`), so setting
``data_root``, ``checkpoint_dir`` or ``tensorboard_dir`` never re-runs a finished sweep. Key-value overrides
(``epochs=5``, ``base.seed=[0,1]``): :func:`apply_overrides`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from graphnorm.config.fits import check_model_fits
from graphnorm.config.model_rules import check_model_rules
from graphnorm.config.norm_rules import check_norm_rules
from graphnorm.config.ranges import check_choices, check_ranges
from graphnorm.config.rules import check_dataset_rules, check_device_available, check_schedule_rules
from graphnorm.config.value_types import check_types, shown
from graphnorm.files import parse_yaml


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
    limit_graphs: int | None = None  # graph level: a fixed random subset of at most this many graphs per split
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
