"""Early-warning signals of the LayerNorm Graphormer's collapse on ogbg-molhiv: the first training steps of a variant
of ``experiments/runs/molhiv_graphormer.yaml`` with ``norm: layernorm``, measured every K steps.

With the original N(0, 0.02) initialization the graph-token rows of all molecules turn to one direction and the model
stays at the constant prior; the :data:`SIGNALS` show it long before an epoch ends. The :data:`VARIANTS` (joined
with ``+``) change the recipe, the layout or the initialization one at a time.

    python -m experiments.graphormer_early_warning --variant ref_recipe+post_ln --steps 300
    python -m experiments.graphormer_early_warning --table batchnorm layernorm torch_init

The first writes ``runs/early_warning/ref_recipe+post_ln.csv`` (columns step, signal, value), the second prints the
markdown tables of CSVs already written. One thread (numbers depend on it); offline data: ``GRAPHNORM_DATA_MIRROR``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch_geometric import seed_everything

from graphnorm.analysis.probe import CollapseProbe, evaluation_sample
from graphnorm.config import RunConfig, apply_overrides, model_keywords
from graphnorm.data import GraphTask
from graphnorm.data.scoring import score, task_loss
from graphnorm.data.size_buckets import SizeBucketBatchSampler
from graphnorm.files import load_yaml_file
from graphnorm.models import Graphormer, build_model, model_outputs, model_spec, register_model
from graphnorm.models.graphormer import GraphAttentionBias, check_graphormer_config
from graphnorm.norms import build_norm
from graphnorm.train.collapse_steps import preserved_rng
from graphnorm.train.graph_level import evaluate_graphs
from graphnorm.train.loaders import graph_loaders, model_sample, prepare_task
from graphnorm.train.schedules import TrainingSchedule, clip_gradients

REPO = Path(__file__).resolve().parents[1]
PRESET = REPO / "experiments" / "runs" / "molhiv_graphormer.yaml"
DEFAULT_OUT = REPO / "runs" / "early_warning"
SIGNAL_GRAPHS = 256  # validation graphs of the logit and ROC-AUC signals
TABLE_STEPS = (0, 50, 100, 200, 300, 400, 500)  # rows of --table (and the last step measured)
AUCS = "val AUC (256) | val AUC (all)"

# Registered so that a variant names them as `model`; Graphormer's keywords (the registry reads the signature).
register_graphormer_variant = functools.partial(
    register_model, levels=("graph",), inputs="graphormer", check_config=check_graphormer_config, token_rows=True
)


@register_graphormer_variant("graphormer_ref")
class ReferenceLayoutGraphormer(Graphormer):
    """microsoft/Graphormer's layout: a LayerNorm on the input rows (graph token included;
    ``encoder_normalize_before``) and no final norm (the reference builds one in pre-LN but never applies it)."""

    @functools.wraps(Graphormer.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.embedding_norm = build_norm("layernorm", self.hidden_channels)
        self.final_norm = build_norm("none", self.hidden_channels)

    def embed(self, batch: Any) -> Tensor:
        rows = super().embed(batch)
        return self.embedding_norm(
            rows,
            batch=batch.row_batch,
            batch_size=batch.num_graphs,
            edge_index=batch.row_edge_index,
            token_mask=batch.token_mask,
        )


@register_graphormer_variant("graphormer_token0")
class ZeroTokenGraphormer(Graphormer):
    """The graph token starts at zero: no part shared by all token rows at initialization."""

    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.zeros_(self.graph_token)


def reset_linear_and_embedding(model: nn.Module, attention_bias: bool) -> None:
    """PyTorch's default initialization for the Linear and Embedding modules inside (``attention_bias=True``) or
    outside the attention-bias tables (spatial and edge encodings)."""
    inside = {id(m) for bias in model.modules() if isinstance(bias, GraphAttentionBias) for m in bias.modules()}
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and (id(module) in inside) == attention_bias:
            module.reset_parameters()


@register_graphormer_variant("graphormer_bias_init")
class BiasInitGraphormer(Graphormer):
    """Only the attention-bias tables at PyTorch's N(0, 1); everything else as Graphormer initializes it."""

    def reset_parameters(self) -> None:
        super().reset_parameters()
        reset_linear_and_embedding(self, attention_bias=True)


@register_graphormer_variant("graphormer_rest_init")
class RestInitGraphormer(Graphormer):
    """PyTorch's default initialization everywhere but the attention-bias tables, graph token N(0, 1)."""

    def reset_parameters(self) -> None:
        super().reset_parameters()
        reset_linear_and_embedding(self, attention_bias=False)
        nn.init.normal_(self.graph_token, std=1.0)


# RunConfig overrides of the preset with norm: layernorm; warmup_fraction: warmup as a fraction of the run's steps.
VARIANTS: dict[str, dict[str, Any]] = {
    "batchnorm": {"norm": "batchnorm"},  # the preset itself: the baseline that learns
    "layernorm": {},  # stays at the prior
    "ref_recipe": {"lr": 2e-4, "warmup_fraction": 0.16, "weight_decay": 0.0, "batch_size": 128},
    "post_ln": {"model_kwargs": {"pre_ln": False}},
    "ref_layout": {"model": "graphormer_ref"},  # embedding LayerNorm, no final norm
    "torch_init": {"model_kwargs": {"init": "pytorch"}},  # PyTorch's Linear/Embedding init, N(0, 1) graph token
    "ref_layout_torch_init": {"model": "graphormer_ref", "model_kwargs": {"init": "pytorch"}},
    "token0": {"model": "graphormer_token0"},
    "bias_init": {"model": "graphormer_bias_init"},
    "rest_init": {"model": "graphormer_rest_init"},
    "lr5e-5": {"lr": 5e-5},
    "lr2e-4": {"lr": 2e-4},
    "lr2e-3": {"lr": 2e-3},
    "no_wd": {"weight_decay": 0.0},
    "bs128": {"batch_size": 128},
    "warm16": {"warmup_fraction": 0.16},
}


def variant_overrides(name: str) -> dict[str, Any]:
    """The overrides of ``name``, or of ``a+b+...`` merged left to right (model_kwargs merged key by key)."""
    merged: dict[str, Any] = {}
    for part in name.split("+"):
        if part not in VARIANTS:
            raise ValueError(f"unknown variant {part!r}; known: {', '.join(VARIANTS)} (combine with '+')")
        for key, value in VARIANTS[part].items():
            merged[key] = {**merged.get(key, {}), **value} if key == "model_kwargs" else value
    return merged


def variant_name(name: str) -> str:
    """argparse type of --variant / --table: the name, once every part of it is known."""
    try:
        variant_overrides(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return name


def variant_config(name: str, limit_graphs: int | None, overrides: list[str]) -> tuple[RunConfig, float | None]:
    """The variant's validated RunConfig (``overrides``: ``key=value`` applied last) and its warmup fraction."""
    values = load_yaml_file(PRESET, "config")
    values.update(norm="layernorm", checkpoint_dir=None, probe=False, limit_graphs=limit_graphs)
    changes = variant_overrides(name)
    warmup_fraction = changes.pop("warmup_fraction", None)
    for key, value in changes.items():
        values[key] = {**values.get(key, {}), **value} if key == "model_kwargs" else value
    values = apply_overrides(values, overrides)
    # Graphormer's own keys (attention_bias_lr_scale, bucket_batches) are refused for every other model name, a
    # subclass's included: validate as graphormer (the same constructor), then name the subclass.
    model = values.pop("model")
    config = RunConfig.from_dict({**values, "model": "graphormer"})
    return dataclasses.replace(config, model=model), warmup_fraction


# --- signals ----------------------------------------------------------------------------------------------------
SIGNALS = """signals (the CSV's signal column), at step 0 (before the first update) and every K steps, of the trained
weights (ema_*: of the weight EMA, which the trainer evaluates):
  train_bce         mean training BCE over the last K steps (step 0: the first batch's, before its update)
  window_prior_bce  BCE of the constant prior (the training positive rate) on the same batches; train_bce minus it
                    is the excess BCE, which stays >= 0 while the model has learnt nothing about the molecules
  prior_entropy     binary entropy (nats) of the training positive rate: the prior's expected BCE
  val_bce, logit_std, val_rocauc, ema_*   on a fixed sample of 256 validation graphs (eval mode)
  token_cos, node_cos, node_cos_pooled    CollapseProbe mean cosine at the last layer's output (before the final
                    norm) on the probe's validation sample: graph-token rows (one set across graphs), node rows (mean
                    over graphs of the within-graph mean cosine; all node rows pooled)
  full_val_rocauc   on the whole validation split, every --full-val-every steps (the sample holds 5 positives)
  lr, elapsed_s, loadavg_1m"""


def positive_rate(task: GraphTask) -> float:
    labels = task.train.y.view(-1).float()
    return float(labels[~torch.isnan(labels)].mean())


def binary_entropy(p: float) -> float:
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def prior_bce(task: GraphTask, labels: Tensor, rate: float) -> float:
    """BCE on ``labels`` of the constant prediction of the training positive rate (the prior)."""
    return float(task_loss(task, torch.full((labels.numel(), 1), math.log(rate / (1 - rate))), labels))


@torch.no_grad()
def output_signals(model: nn.Module, batch: Any, task: GraphTask) -> dict[str, float]:
    """val_bce, logit_std, val_rocauc of ``model`` in eval mode on ``batch`` (its mode restored after)."""
    was_training = model.training
    model.eval()
    logits = model_outputs(model, batch)
    model.train(was_training)
    return {
        "val_bce": float(task_loss(task, logits, batch.y)),
        "logit_std": float(logits.std()),
        "val_rocauc": score(task, logits, batch.y),
    }


def collapse_signals(model: nn.Module, batch: Any) -> dict[str, float]:
    """Mean cosine of the token and node rows at the last layer's output (CollapseProbe on ``batch``)."""
    last_layer = list(model.collapse_layers())[-1:]
    records = CollapseProbe(model, layers=last_layer, num_singular_values=0).probe_records(batch)
    names = {("node", "mean"): "node_cos", ("node", "pooled"): "node_cos_pooled", ("token", "value"): "token_cos"}
    return {
        names[(r["rows"], r["stat"])]: float(r["value"])
        for r in records
        if r["metric"] == "mean_cosine" and (r["rows"], r["stat"]) in names
    }


# --- the run ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class EarlyWarningRun:
    """What the steps train and measure: model, data, loaders, optimizer, schedule and weight EMA built by graphnorm's
    own functions in train_graph_level's order (the random draws follow it). The schedule is the full run's (epochs x
    steps per epoch of the variant's batch size), so warmup and decay are where the preset puts them."""

    config: RunConfig
    task: GraphTask
    model: nn.Module
    train_loader: Any
    val_loader: Any
    schedule: TrainingSchedule
    ema: AveragedModel
    signal_sample: Any  # SIGNAL_GRAPHS validation graphs, collated for the model
    probe_sample: Any  # the collapse probe's validation sample (config.probe_graphs)

    @classmethod
    def build(cls, config: RunConfig, warmup_fraction: float | None) -> EarlyWarningRun:
        seed_everything(config.seed)  # as graphnorm.train.loop.train
        task = prepare_task(config)
        seed_everything(config.seed)
        model = build_model(config.model, task, **model_keywords(config, task.level))
        generator = torch.Generator().manual_seed(config.seed)  # shuffles the training batches
        inputs = model_spec(config.model).inputs
        train_loader, val_loader, _, _ = graph_loaders(task, config, generator, inputs)
        if warmup_fraction is not None:
            total_steps = config.epochs * len(train_loader)
            config = dataclasses.replace(config, warmup_steps=round(warmup_fraction * total_steps))
        schedule = TrainingSchedule(config, model, len(train_loader), task.higher_is_better)
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(config.ema_decay), use_buffers=True)
        signal_sample, probe_sample = (
            model_sample(evaluation_sample(task.val, num_graphs=graphs, seed=0), config, inputs)
            for graphs in (SIGNAL_GRAPHS, config.probe_graphs)
        )
        return cls(config, task, model, train_loader, val_loader, schedule, ema, signal_sample, probe_sample)

    def signals(self, full_val: bool) -> dict[str, float]:
        """The weights' signals now; the global RNG is left as it was (a DataLoader draws a seed from it)."""
        with preserved_rng():
            values = output_signals(self.model, self.signal_sample, self.task)
            ema_values = output_signals(self.ema.module, self.signal_sample, self.task)
            values.update({f"ema_{k}": v for k, v in ema_values.items()})
            values.update(collapse_signals(self.model, self.probe_sample))
            if full_val:
                values["full_val_rocauc"] = evaluate_graphs(self.model, self.val_loader, self.task, torch.device("cpu"))
                self.model.train()
        return values


def run_variant(name: str, args: argparse.Namespace) -> None:
    """Train ``args.steps`` steps of the variant, measuring every ``args.every``; the rows also go to the CSV after
    every measurement (a run stopped early keeps its steps). The step body is GraphTraining.train_epoch's
    (graphnorm/train/graph_level.py), replayed here to see each batch's loss and labels."""
    run = EarlyWarningRun.build(*variant_config(name, args.limit_graphs, args.set))
    config, task, model = run.config, run.task, run.model
    print(
        f"[{name}] model={config.model} norm={config.norm} lr={config.lr} wd={config.weight_decay} "
        f"batch={config.batch_size} warmup={config.warmup_steps}/{config.epochs * len(run.train_loader)} steps "
        f"init={config.model_kwargs.get('init', 'graphormer')} pre_ln={config.model_kwargs.get('pre_ln', True)}",
        flush=True,
    )
    rate, rows, path, start = positive_rate(task), [], args.out / f"{name}.csv", time.perf_counter()

    def record(step: int, train_bce: float, window_prior_bce: float) -> None:
        values = {"train_bce": train_bce, "window_prior_bce": window_prior_bce, "prior_entropy": binary_entropy(rate)}
        values.update(run.signals(full_val=step % args.full_val_every == 0))
        values.update(lr=run.schedule.lr, elapsed_s=time.perf_counter() - start, loadavg_1m=os.getloadavg()[0])
        rows.extend({"step": step, "signal": k, "value": v} for k, v in values.items())
        write_csv(rows, path)
        shown = ("train_bce", "logit_std", "val_rocauc", "node_cos", "token_cos")
        print(f"[{name}] step {step:4d} " + " ".join(f"{k} {values[k]:.4f}" for k in shown), flush=True)

    step, loss_sum, prior_sum, graphs = 0, 0.0, 0.0, 0
    model.train()
    for epoch in range(math.ceil(args.steps / len(run.train_loader))):
        run.schedule.start_epoch(epoch)
        for batch in run.train_loader:
            run.schedule.optimizer.zero_grad()
            loss = task_loss(task, model_outputs(model, batch), batch.y)
            if step == 0:
                record(0, loss.item(), prior_bce(task, batch.y, rate))
            loss.backward()
            clip_gradients(model, config)
            run.schedule.optimizer.step()
            run.schedule.after_step()
            run.ema.update_parameters(model)
            step += 1
            loss_sum += loss.item() * batch.num_graphs
            prior_sum += prior_bce(task, batch.y, rate) * batch.num_graphs
            graphs += batch.num_graphs
            if step % args.every == 0:
                record(step, loss_sum / graphs, prior_sum / graphs)
                loss_sum, prior_sum, graphs = 0.0, 0.0, 0
            if step == args.steps:
                break
    print(f"[{name}] wrote {path}; wall {time.perf_counter() - start:.0f} s", flush=True)


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "signal", "value"])
        writer.writeheader()
        writer.writerows(rows)


# --- the table ----------------------------------------------------------------------------------------------------
def read_csv(path: Path) -> dict[int, dict[str, float]]:
    """{step: {signal: value}} of a CSV the run wrote."""
    by_step: dict[int, dict[str, float]] = {}
    with open(path) as handle:
        for row in csv.DictReader(handle):
            by_step.setdefault(int(row["step"]), {})[row["signal"]] = float(row["value"])
    return by_step


def replay_window_prior_bce(config: RunConfig, steps: int, every: int) -> dict[int, float]:
    """window_prior_bce for a CSV written before the run measured it: the size-bucketed training batches replayed
    from the run's seeded generator (their labels do not depend on the model), without a model."""
    if config.bucket_batches <= 1 or config.max_nodes is not None:
        raise ValueError("the replay follows graph_loaders' size-bucket sampler over every training graph only")
    task = prepare_task(config)
    labels, rate = task.train.y, positive_rate(task)
    sizes = [int(graph.num_nodes) for graph in task.train]
    generator = torch.Generator().manual_seed(config.seed)
    sampler = SizeBucketBatchSampler(sizes, config.batch_size, config.bucket_batches, generator)
    result, step, prior_sum, graphs = {}, 0, 0.0, 0
    while step < steps:
        for indices in sampler:
            batch_prior = prior_bce(task, labels[indices], rate)
            result.setdefault(0, batch_prior)
            step, prior_sum, graphs = step + 1, prior_sum + batch_prior * len(indices), graphs + len(indices)
            if step % every == 0:
                result[step], prior_sum, graphs = prior_sum / graphs, 0.0, 0
            if step == steps:
                break
    return result


def print_table(name: str, by_step: dict[int, dict[str, float]]) -> None:
    """The markdown table of one variant at TABLE_STEPS and its last step; excess = train BCE - prior BCE."""
    last = max(by_step)
    entropy, wall = by_step[0]["prior_entropy"], by_step[last]["elapsed_s"]
    print(f"\n### {name} (prior entropy {entropy:.3f}; wall to step {last} {wall:.0f} s)")
    print(f"| step | train BCE | prior BCE same batches | excess | logit std | {AUCS} | node cos | token cos |")
    print("|---|---|---|---|---|---|---|---|---|")
    for step in sorted(set(TABLE_STEPS) & set(by_step) | {last}):
        v = by_step[step]
        full = f"{v['full_val_rocauc']:.3f}" if "full_val_rocauc" in v else ""
        excess = v["train_bce"] - v["window_prior_bce"]
        print(
            f"| {step} | {v['train_bce']:.4f} | {v['window_prior_bce']:.4f} | {excess:+.4f} | {v['logit_std']:.4f} "
            f"| {v['val_rocauc']:.3f} | {full} | {v['node_cos']:.3f} | {v['token_cos']:.4f} |"
        )


def print_tables(names: list[str], args: argparse.Namespace) -> None:
    for name in names:
        by_step = read_csv(args.out / f"{name}.csv")
        if "window_prior_bce" not in by_step[0]:  # written before the run measured it
            config, _ = variant_config(name, args.limit_graphs, args.set)
            steps = sorted(by_step)
            replayed = replay_window_prior_bce(config, steps[-1], steps[1] if len(steps) > 1 else 1)
            for step, values in by_step.items():
                values["window_prior_bce"] = replayed[step]
        print_table(name, by_step)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=SIGNALS, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--variant", type=variant_name, help=f"one of {', '.join(VARIANTS)}, or a+b combinations")
    mode.add_argument(
        "--table",
        type=variant_name,
        nargs="+",
        metavar="VARIANT",
        help="print the CSVs' tables (with the runs' --limit-graphs and --set, if any)",
    )
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--every", type=int, default=50, help="measure every K steps (and at step 0)")
    parser.add_argument("--full-val-every", type=int, default=250, help="ROC-AUC on the whole validation split")
    parser.add_argument("--limit-graphs", type=int, default=None, help="smoke runs: at most this many graphs per split")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="RunConfig overrides (applied last)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the CSVs' folder (runs/early_warning)")
    args = parser.parse_args(argv)
    if min(args.steps, args.every, args.full_val_every) < 1:
        parser.error("--steps, --every and --full-val-every must be >= 1")
    torch.set_num_threads(1)
    if args.variant:
        run_variant(args.variant, args)
    print_tables(args.table or [args.variant], args)


if __name__ == "__main__":
    main()
