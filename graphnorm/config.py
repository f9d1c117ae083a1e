"""One run's configuration: a plain dataclass (nanoGPT style), shared by training, sweeps and the CLI.

A sweep expands a YAML grid into many ``RunConfig``s; each is executed by ``graphnorm.train.run``.
Unknown keys and impossible values are errors *before* anything runs.

Protocol presets in words (the YAML files set exactly these keys):

* Kipf & Welling GCN on Cora: ``num_layers=2, hidden_channels=16 or 64, dropout=0.5, lr=0.01, weight_decay=5e-4,
  epochs=200, adjacency="sym", feature_norm="row_l1", layer_order="dropout-conv-norm-act"``; test accuracy at the
  best-validation epoch (``test_acc``).
* ContraNorm / PairNorm deep GCN: ``hidden_channels=32, dropout=0.6, lr=0.005, weight_decay=5e-4, epochs=200,
  adjacency="row", feature_norm="row_l1", layer_order="dropout-conv-norm-act", norm="contranorm",
  norm_kwargs={"scale": 1.0}, shared_layernorm=True, eval_nodes="rest"``; last-epoch accuracy on the 2068 Cora
  nodes outside train+val (``test_acc_last``).
* Graphormer-slim on ZINC (Ying et al., 2021): ``model="graphormer", num_layers=12, hidden_channels=80,
  num_heads=8, model_kwargs={"ffn_channels": 80, "max_distance": 40, "multi_hop_max_dist": 5}, dropout=0.1,
  optimizer="adamw", scheduler="polynomial", lr=2e-4, weight_decay=0.01, warmup_steps=40000, total_steps=400000,
  end_lr=1e-9, grad_clip=5.0, batch_size=256``. RunConfig's defaults (dropout 0.5, lr 0.01, Adam) are the GCN
  protocol's, not Graphormer's: a Graphormer config sets these keys explicitly (``experiments/*_graphormer.yaml``).

Graph-level runs may set ``checkpoint_dir``: the run then saves everything needed to continue (model, optimizer,
scheduler, epoch, best-validation state, RNG states) after every epoch to ``<checkpoint_dir>/<run_id>.pt`` and, when
that file exists, resumes from it, so a killed run continues where it stopped and ends with the same record.
``max_train_minutes`` stops training cleanly once the training loop (steps and per-epoch evaluation) has used that
budget; the record says so (``stopped_by_time``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

DATASETS = ("cora", "citeseer", "zinc", "molhiv")
NODE_DATASETS = ("cora", "citeseer")
MODELS = ("gcn", "graphormer")
ADJACENCIES = ("sym", "row")
FEATURE_NORMS = ("none", "row_l1")
LAYER_ORDERS = ("conv-norm-act-dropout", "dropout-conv-norm-act")
READOUTS = ("mean", "sum", "virtual")
EVAL_NODES = ("test", "rest")
OPTIMIZERS = ("adam", "adamw")
SCHEDULERS = ("none", "cosine", "plateau", "polynomial")
DEVICES = ("cpu", "cuda", "auto")
# DeepGCN constructor keywords a config may pass through model_kwargs (the rest are config keys).
GCN_KWARGS = ("init",)
# Graphormer constructor keywords a config may pass through model_kwargs (see Graphormer.from_config).
GRAPHORMER_KWARGS = (
    "ffn_channels",
    "max_degree",
    "max_distance",
    "multi_hop_max_dist",
    "pre_ln",
    "attention_dropout",
    "activation_dropout",
)


@dataclass
class RunConfig:
    # --- data ---
    dataset: str = "cora"  # cora | citeseer | zinc | molhiv
    data_root: str | None = None  # None: $GRAPHNORM_DATA, else the user cache
    feature_norm: str = "none"  # none | row_l1 (row-L1-normalized node features, Kipf/PairNorm/ContraNorm protocol)
    eval_nodes: str = "test"  # node-level only: test (public test mask) | rest (all nodes outside train+val)
    limit_graphs: int | None = None  # graph-level smoke runs: a fixed random subset of at most this many graphs/split
    max_nodes: int | None = None  # graphormer: largest graph allowed (dense [n, n] inputs); larger ones -> error
    drop_large_graphs: bool = False  # graphormer: drop graphs above max_nodes instead (counted in the record)
    # --- model ---
    model: str = "gcn"  # gcn | graphormer
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
    num_heads: int = 4  # attention heads (graphormer)
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
    # scheduler=polynomial, graphormer: lr multiplier of the attention-bias tables (see graphormer_optimizer)
    attention_bias_lr_scale: float = 1.0
    grad_clip: float = 0.0  # max gradient norm; 0 disables clipping
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
    checkpoint_dir: str | None = None  # graph level: save every epoch to <dir>/<run_id>.pt and resume from it
    # --- analysis ---
    probe: bool = True  # collapse metrics at every layer of the final model, written to the sweep's layers.csv
    probe_graphs: int = 64  # graph-level datasets: size of the fixed validation sample the probe measures

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunConfig:
        """Build and validate from a mapping; unknown keys raise ``ValueError`` listing the valid ones."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ValueError(f"unknown config key(s) {unknown}; valid keys: {', '.join(cls.field_names())}")
        config = cls(**values)
        config.validate()
        return config

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def is_node_level(self) -> bool:
        return self.dataset in NODE_DATASETS

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first impossible value."""
        from graphnorm.norms import norm_class, norm_keywords

        def choice(key: str, valid: tuple[str, ...]) -> None:
            value = getattr(self, key)
            if value not in valid:
                raise ValueError(f"{key} must be one of {', '.join(valid)}; got {value!r}")

        choice("dataset", DATASETS)
        choice("model", MODELS)
        choice("adjacency", ADJACENCIES)
        choice("feature_norm", FEATURE_NORMS)
        choice("layer_order", LAYER_ORDERS)
        choice("readout", READOUTS)
        choice("eval_nodes", EVAL_NODES)
        choice("optimizer", OPTIMIZERS)
        choice("scheduler", SCHEDULERS)
        choice("device", DEVICES)
        for key in ("residual", "shared_layernorm", "virtual_node", "probe", "drop_large_graphs"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be true or false, got {getattr(self, key)!r}")
        for key in ("norm_kwargs", "model_kwargs"):
            if not isinstance(getattr(self, key), dict):
                raise ValueError(f"{key} must be a mapping, got {getattr(self, key)!r}")
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        if self.hidden_channels < 1:
            raise ValueError(f"hidden_channels must be >= 1, got {self.hidden_channels}")
        if self.num_heads < 1:
            raise ValueError(f"num_heads must be >= 1, got {self.num_heads}")
        if self.model == "graphormer" and self.hidden_channels % self.num_heads != 0:
            raise ValueError(f"num_heads={self.num_heads} must divide hidden_channels={self.hidden_channels}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_epochs < self.epochs:
            raise ValueError(f"warmup_epochs must be in [0, epochs={self.epochs}), got {self.warmup_epochs}")
        if self.grad_clip < 0:
            raise ValueError(f"grad_clip must be >= 0 (0 disables), got {self.grad_clip}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not isinstance(self.bucket_batches, int) or isinstance(self.bucket_batches, bool) or self.bucket_batches < 1:
            raise ValueError(f"bucket_batches must be a positive integer, got {self.bucket_batches!r}")
        if self.bucket_batches > 1 and self.model != "graphormer":
            raise ValueError("bucket_batches groups graphs by size against Graphormer's padding: set model=graphormer")
        if self.probe_graphs < 1:
            raise ValueError(f"probe_graphs must be >= 1, got {self.probe_graphs}")
        if self.limit_graphs is not None and self.limit_graphs < 1:
            raise ValueError(f"limit_graphs must be >= 1 or null, got {self.limit_graphs}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.total_steps is not None and self.total_steps <= self.warmup_steps:
            raise ValueError(f"total_steps must be > warmup_steps={self.warmup_steps}, got {self.total_steps}")
        if not 0 <= self.end_lr <= self.lr:
            raise ValueError(f"end_lr must be in [0, lr={self.lr}], got {self.end_lr}")
        if not self.attention_bias_lr_scale > 0:
            raise ValueError(f"attention_bias_lr_scale must be > 0, got {self.attention_bias_lr_scale}")
        if self.attention_bias_lr_scale != 1.0 and (self.model != "graphormer" or self.scheduler != "polynomial"):
            raise ValueError("attention_bias_lr_scale is for model=graphormer with scheduler=polynomial")
        if self.scheduler == "polynomial":
            if self.optimizer != "adamw":
                raise ValueError("scheduler='polynomial' is the Graphormer recipe with AdamW: set optimizer=adamw")
            if self.warmup_epochs:
                raise ValueError("scheduler='polynomial' warms up per step: use warmup_steps, not warmup_epochs")
        elif self.warmup_steps or self.total_steps is not None:
            raise ValueError(f"warmup_steps and total_steps are for scheduler='polynomial', not {self.scheduler!r}")
        if self.max_train_minutes is not None and not self.max_train_minutes > 0:
            raise ValueError(f"max_train_minutes must be > 0 or null, got {self.max_train_minutes}")
        if self.checkpoint_dir is not None and (not isinstance(self.checkpoint_dir, str) or not self.checkpoint_dir):
            raise ValueError(f"checkpoint_dir must be a non-empty path or null, got {self.checkpoint_dir!r}")
        if self.max_nodes is not None and self.max_nodes < 1:
            raise ValueError(f"max_nodes must be >= 1 or null, got {self.max_nodes}")
        if self.model == "graphormer":
            unknown = sorted(set(self.model_kwargs) - set(GRAPHORMER_KWARGS))
            if unknown:
                raise ValueError(
                    f"unknown model_kwargs {unknown} for graphormer; valid: {', '.join(GRAPHORMER_KWARGS)}"
                )
            if self.virtual_node or self.readout != "mean":
                raise ValueError("graphormer reads out its own virtual graph token: leave virtual_node and readout")
        else:
            unknown = sorted(set(self.model_kwargs) - set(GCN_KWARGS))
            if unknown:
                raise ValueError(f"unknown model_kwargs {unknown} for gcn; valid: {', '.join(GCN_KWARGS)}")
        if self.model != "graphormer" and (self.max_nodes is not None or self.drop_large_graphs):
            raise ValueError("max_nodes and drop_large_graphs are for model='graphormer'")
        if self.drop_large_graphs and self.max_nodes is None:
            raise ValueError("drop_large_graphs needs max_nodes")
        if self.ema_decay is not None and not 0.0 < self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in (0, 1) or null, got {self.ema_decay}")
        if self.is_node_level:
            for key in ("max_train_minutes", "checkpoint_dir", "ema_decay"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} is for graph-level datasets, not {self.dataset!r}")
            if self.scheduler == "polynomial":
                raise ValueError(f"scheduler='polynomial' steps per mini-batch (graph level), not for {self.dataset!r}")
            if self.virtual_node:
                raise ValueError(f"virtual_node is for graph-level datasets, not {self.dataset!r}")
            if self.limit_graphs is not None:
                raise ValueError(f"limit_graphs is for graph-level datasets, not {self.dataset!r}")
        else:
            if self.feature_norm != "none":
                raise ValueError(
                    f"feature_norm={self.feature_norm!r} needs float node features; {self.dataset!r} "
                    "has categorical atom features"
                )
            if self.eval_nodes != "test":
                raise ValueError(f"eval_nodes is for node-level datasets, not {self.dataset!r}")
        if self.readout == "virtual" and not self.virtual_node:
            raise ValueError("readout='virtual' reads the virtual node: set virtual_node=true")
        norm_class(self.norm)  # unknown norm -> ValueError listing the valid ones
        unknown = sorted(set(self.norm_kwargs) - set(norm_keywords(self.norm)))
        if unknown:
            raise ValueError(
                f"unknown norm_kwargs {unknown} for norm {self.norm!r}; valid: {', '.join(norm_keywords(self.norm))}"
            )


def unsupported_norm_reason(config: RunConfig) -> str | None:
    """Why ``config.norm`` cannot run on ``config.model`` (one line), or ``None`` when it can.

    Only the model context is judged here (which rows, masks and edges the model hands its norms), not the norm's
    own keyword values; a sweep uses it to leave such norms out of ``norm: all``.
    """
    norm = config.norm.lower() if isinstance(config.norm, str) else config.norm
    if norm != "sepnorm":
        return None
    has_token_rows = config.model == "graphormer" or (
        config.virtual_node is True and config.dataset not in NODE_DATASETS
    )
    if not has_token_rows:
        return (
            "sepnorm needs graph-token rows: use model=graphormer, or model=gcn with virtual_node=true on a "
            "graph-level dataset"
        )
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
