"""Graphormer through ``graphnorm.train.run`` on real ZINC and MolHIV graphs: learning, SepNorm, OGB ROC-AUC, the
probe's node and token rows, checkpoint resume after a kill, max_nodes, and the time budget."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch.optim.optimizer import register_optimizer_step_post_hook

from graphnorm.config import RunConfig, model_keywords
from graphnorm.data.size_buckets import SizeBucketBatchSampler
from graphnorm.models import build_model, model_outputs
from graphnorm.train.checkpoints import checkpoint_path, load_checkpoint
from graphnorm.train.graph_level import evaluate_graphs
from graphnorm.train.loaders import graph_loaders, graphormer_splits, prepare_task, size_order
from graphnorm.train.loop import run, train

# Keys that measure time or how the run was executed, not what it computed.
TIMING_KEYS = ("wall_time_s", "probe_time_s", "train_graphs_per_s", "resumed_at_epoch")


# Many tiny tensor ops: on a shared 2-core machine one intra-op thread is faster (see conftest).
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_graphormer(data_root: Path, **overrides) -> RunConfig:
    values = dict(
        dataset="zinc",
        data_root=str(data_root),
        limit_graphs=120,
        model="graphormer",
        num_layers=2,
        hidden_channels=32,
        num_heads=4,
        model_kwargs={"ffn_channels": 32, "multi_hop_max_dist": 3},
        norm="layernorm",
        dropout=0.1,
        optimizer="adamw",
        scheduler="polynomial",
        lr=5e-3,
        weight_decay=0.0,
        warmup_steps=4,
        grad_clip=5.0,
        batch_size=12,
        epochs=8,
        probe_graphs=16,
    )
    values.update(overrides)
    return RunConfig.from_dict(values)


def without_timing(record: dict) -> dict:
    """The record without its timings, the history's ``train_time_s`` included."""
    kept = {key: value for key, value in record.items() if key not in TIMING_KEYS}
    kept["history"] = [{k: v for k, v in row.items() if k != "train_time_s"} for row in record["history"]]
    return kept


def _run_in_child(config: RunConfig) -> None:
    torch.set_num_threads(1)
    run(config)


@pytest.mark.parametrize(("bucket_batches", "ema_decay"), [(1, None), (3, 0.8)])
def test_zinc_run_learns_probes_tokens_and_resumes_after_a_kill_to_the_same_record(
    data_root: Path, tmp_path, bucket_batches: int, ema_decay: float | None
) -> None:
    """An uninterrupted run learns; a second run of the same config (same seed) is killed after a few epochs in
    another process and resumed from its checkpoint here: it ends with exactly the first run's record. Also with
    size-grouped batches, whose permutations come from the checkpointed generator, and with a weight EMA, whose
    average is checkpointed."""
    config = tiny_graphormer(data_root, bucket_batches=bucket_batches, ema_decay=ema_decay)
    train_loader = graph_loaders(prepare_task(config), config, torch.Generator(), "graphormer")[0]
    assert isinstance(train_loader.batch_sampler, SizeBucketBatchSampler) == (bucket_batches > 1)
    record = run(config)
    # (10 batches of 12 graphs: grouped by size, 8 epochs learn a little less than plain shuffling)
    assert record["train_loss"] < (0.95 if bucket_batches == 1 else 1.0) * record["train_loss_first"], record
    assert 0.0 < record["test_mae"] < 10.0 and 0.0 < record["val_mae"] < 10.0
    assert record["epochs_run"] == 8 and record["steps"] == 8 * 10 and not record["stopped_by_time"]
    assert record["resumed_at_epoch"] is None and record["dropped_graphs_train"] == 0
    rows = {row["rows"] for row in record["layers"]}
    assert rows == {"node", "token"}, "the probe reports Graphormer's node rows and graph-token rows"
    assert {row["layer_name"] for row in record["layers"]} == {"embedding", "layer_1", "layer_2"}
    history = record["history"]  # the learning curve: one row per epoch, the last one the record's last epoch
    assert [row["epoch"] for row in history] == list(range(8)) and [row["step"] for row in history][-1] == 80
    assert history[0]["train_loss"] == record["train_loss_first"] and history[-1]["train_loss"] == record["train_loss"]
    assert history[-1]["val_mae"] == record["val_mae_last"] and history[-1]["test_mae"] == record["test_mae_last"]
    assert history[record["best_epoch"]]["val_mae"] == record["val_mae"] == min(row["val_mae"] for row in history)
    assert history[-1]["lr"] < history[2]["lr"]  # polynomial decay
    times = [row["train_time_s"] for row in history]
    assert times == sorted(times) and times[0] > 0

    resumable = tiny_graphormer(
        data_root, bucket_batches=bucket_batches, ema_decay=ema_decay, checkpoint_dir=str(tmp_path / "checkpoints")
    )
    path = checkpoint_path(resumable)
    child = multiprocessing.get_context("fork").Process(target=_run_in_child, args=(resumable,))
    child.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.is_alive():
            if path.exists() and load_checkpoint(path)["state"]["epoch"] >= 2:
                break
            time.sleep(0.05)
        assert child.is_alive(), "the run ended before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join()
    stopped = load_checkpoint(path)["state"]
    assert 2 <= stopped["epoch"] < 8 and not stopped["done"]

    resumed = run(resumable)
    assert resumed["resumed_at_epoch"] == stopped["epoch"]
    assert without_timing(resumed) == without_timing(record)  # the history's epochs before the kill included
    assert load_checkpoint(path)["state"]["done"]
    assert without_timing(run(resumable)) == without_timing(record)  # a finished run only reports again


def test_evaluation_runs_in_size_order_and_scores_as_dataset_order(data_root: Path) -> None:
    """Val/test batches are cut from the split sorted by graph size (less padding); every graph is scored once and
    the metric equals the one over dataset-order batches, for MAE and for OGB's ROC-AUC."""
    for dataset, limit in [("zinc", 120), ("molhiv", 1000)]:
        config = tiny_graphormer(data_root, dataset=dataset, limit_graphs=limit)
        task = prepare_task(config)
        val_loader = graph_loaders(task, config, torch.Generator(), "graphormer")[1]
        val = val_loader.dataset
        order = list(val_loader.sampler)
        assert sorted(order) == list(range(len(val)))
        sizes = [int(val[i].num_nodes) for i in order]
        assert sizes == sorted(sizes) and sizes != [int(graph.num_nodes) for graph in val]
        assert order == size_order(val)
        dataset_order = torch.utils.data.DataLoader(val, batch_size=config.batch_size, collate_fn=val_loader.collate_fn)
        torch.manual_seed(0)
        model = build_model(config.model, task, **model_keywords(config, task.level))
        ordered = evaluate_graphs(model, val_loader, task, torch.device("cpu"))
        plain = evaluate_graphs(model, dataset_order, task, torch.device("cpu"))
        assert ordered == pytest.approx(plain, rel=1e-5, abs=1e-6), dataset


def test_sepnorm_graphormer_run(data_root: Path) -> None:
    config = tiny_graphormer(data_root, norm="sepnorm", epochs=2, limit_graphs=100)
    record = run(config)
    assert torch.isfinite(torch.tensor([record["val_mae"], record["test_mae"], record["train_loss"]])).all()
    token_rows = [row for row in record["layers"] if row["rows"] == "token"]
    assert token_rows and all(row["split"] == "val_sample" for row in token_rows)


def test_molhiv_graphormer_run_scores_with_ogb_rocauc(data_root: Path) -> None:
    config = tiny_graphormer(
        data_root, dataset="molhiv", limit_graphs=300, epochs=1, batch_size=50, warmup_steps=1, probe=False
    )
    model, task, record = train(config)
    assert len(task.val) == 300 and record["num_params"] > 0
    # One epoch: the best-validation weights are the final ones, so the validation ROC-AUC can be recomputed.
    splits, _ = graphormer_splits(task, config)
    loader = torch.utils.data.DataLoader(splits["val"], batch_size=64, collate_fn=_collate(config))
    with torch.no_grad():
        batches = list(loader)
        scores = torch.cat([model_outputs(model, batch) for batch in batches]).view(-1)
    labels = torch.cat([batch.y for batch in batches]).view(-1)
    assert 0 < int(labels.sum()) < 300
    assert record["val_rocauc"] == pytest.approx(roc_auc_score(labels.numpy(), scores.numpy()), abs=1e-6)
    assert 0.0 <= record["test_rocauc"] <= 1.0


def _collate(config: RunConfig):
    import functools

    from graphnorm.data.graphormer_preprocess import collate_graphormer

    return functools.partial(collate_graphormer, multi_hop_max_dist=config.model_kwargs["multi_hop_max_dist"])


def test_graphs_above_max_nodes_are_an_error_or_dropped_and_counted(data_root: Path) -> None:
    with pytest.raises(ValueError, match="more than max_nodes=25"):
        run(tiny_graphormer(data_root, max_nodes=25, limit_graphs=50, epochs=1))
    config = tiny_graphormer(data_root, max_nodes=25, drop_large_graphs=True, limit_graphs=50, epochs=1, warmup_steps=1)
    task = prepare_task(config)
    large = {split: sum(int(g.num_nodes) > 25 for g in getattr(task, split)) for split in ("train", "val", "test")}
    assert all(0 < count < 50 for count in large.values()), large
    record = run(config)
    assert {split: record[f"dropped_graphs_{split}"] for split in large} == large
    steps = -(-(50 - large["train"]) // config.batch_size)  # ceil: the dropped graphs are not trained on
    assert record["steps"] == steps


def test_time_budget_stops_training_cleanly(data_root: Path) -> None:
    config = tiny_graphormer(data_root, max_train_minutes=0.002, epochs=50, limit_graphs=100, probe=False)
    record = run(config)
    # stopped by the clock, not by the epoch count (no wall-time assertion: CI machines are shared)
    assert record["stopped_by_time"] and 1 <= record["epochs_run"] < 50 and record["steps"] >= 1
    assert torch.isfinite(torch.tensor(record["test_mae"]))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"scheduler": "polynomial"}, "optimizer=adamw"),
        ({"scheduler": "polynomial", "optimizer": "adamw", "warmup_steps": 10, "total_steps": 10}, "total_steps"),
        ({"warmup_steps": 10}, "scheduler='polynomial'"),
        ({"model_kwargs": {"ffn_dim": 8}}, "unknown model_kwargs"),
        ({"max_nodes": 0}, "max_nodes"),
        ({"drop_large_graphs": True}, "needs max_nodes"),
        ({"max_train_minutes": 0}, "max_train_minutes"),
        ({"virtual_node": True}, "graph token"),
        ({"model": "gcn", "max_nodes": 30}, "model='graphormer'"),
        ({"ema_decay": 1.0}, "ema_decay must be in"),
        ({"ema_decay": 0.0}, "ema_decay must be in"),
        ({"dataset": "cora", "model": "gcn", "ema_decay": 0.99}, "graph-level"),
    ],
)
def test_impossible_graphormer_configs_fail_before_running(values: dict, message: str) -> None:
    base = {"dataset": "zinc", "model": "graphormer", "hidden_channels": 32, "num_heads": 4}
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict({**base, **values})


def test_graphormer_experiment_configs_are_valid_with_equal_budgets() -> None:
    import yaml

    from graphnorm.sweep import expand_grid, load_sweep_config

    experiments = Path(__file__).resolve().parents[2] / "experiments"
    # ZINC: Graphormer-slim (12 layers); MolHIV: 4 layers with PyTorch's init, the recipe in which LayerNorm learns.
    # Each sweep: SepNorm vs ShareNorm (LayerNorm everywhere), plus BatchNorm on MolHIV (its preset's norm).
    for dataset, layers, preset, third_norm in (
        ("zinc", 12, "zinc_graphormer", "layernorm"),
        ("molhiv", 4, "molhiv_graphormer_layernorm", "batchnorm"),
    ):
        with open(experiments / "runs" / f"{preset}.yaml") as f:
            single = RunConfig.from_dict(yaml.safe_load(f))
        shape = (single.model, single.num_layers, single.hidden_channels, single.num_heads)
        assert shape == ("graphormer", layers, 80, 8)
        assert single.model_kwargs["ffn_channels"] == 80 and single.scheduler == "polynomial"
        assert single.grad_clip == 5.0 and single.max_train_minutes is not None and single.checkpoint_dir
        configs = expand_grid(load_sweep_config(experiments / "sweeps" / f"{dataset}_sepnorm_vs_sharenorm.yaml"))
        norms = sorted({"layernorm", "sepnorm", third_norm})
        assert sorted((c.norm, c.seed) for c in configs) == [(n, s) for n in norms for s in range(3)]
        # Equal budget: the runs differ only in norm and seed, and follow the single-run recipe over at most its
        # epochs and minutes (fewer epochs, so that each comparison fits in one sitting; no time limit: epochs only).
        budgets = {(c.epochs, c.max_train_minutes, c.checkpoint_dir) for c in configs}
        assert len(budgets) == 1
        epochs, minutes, _ = next(iter(budgets))
        assert epochs < single.epochs and (minutes is None or minutes <= single.max_train_minutes)

        def recipe(c: RunConfig) -> tuple:
            return (
                c.num_layers,
                c.hidden_channels,
                c.num_heads,
                c.batch_size,
                c.lr,
                c.warmup_steps,
                c.dropout,
                c.weight_decay,
                c.attention_bias_lr_scale,
                c.bucket_batches,
                c.model_kwargs,
            )

        assert all(recipe(c) == recipe(single) for c in configs)
        # a weight EMA as the single run's, over at most its horizon (a shorter budget averages fewer steps)
        assert all((c.ema_decay is None) == (single.ema_decay is None) for c in configs)
        assert all(c.ema_decay is None or c.ema_decay <= single.ema_decay for c in configs)


def test_ema_is_the_moving_average_of_the_trained_weights(data_root: Path) -> None:
    """With ema_decay the weights evaluated and returned are e_1 = w_1, e_k = d e_(k-1) + (1 - d) w_k over the
    weights w_k after every optimizer step; training itself (and so every w_k) is the same as without it."""
    decay = 0.7
    plain = tiny_graphormer(data_root, epochs=1, probe=False)
    after_steps: list[dict[int, torch.Tensor]] = []

    def snapshot(optimizer, args, kwargs) -> None:
        after_steps.append({id(p): p.detach().clone() for group in optimizer.param_groups for p in group["params"]})

    handle = register_optimizer_step_post_hook(snapshot)
    try:
        plain_model, _, plain_record = train(plain)
    finally:
        handle.remove()
    assert len(after_steps) == plain_record["steps"] == 10
    names = {id(p): name for name, p in plain_model.named_parameters()}
    expected = {names[key]: value for key, value in after_steps[0].items()}
    for weights in after_steps[1:]:
        for key, value in weights.items():
            expected[names[key]] = decay * expected[names[key]] + (1 - decay) * value

    ema_model, _, ema_record = train(tiny_graphormer(data_root, epochs=1, probe=False, ema_decay=decay))
    assert ema_record["train_loss"] == plain_record["train_loss"]  # the EMA does not change training
    assert ema_record["val_mae"] != plain_record["val_mae"]  # but it is what is evaluated
    for name, parameter in ema_model.named_parameters():
        torch.testing.assert_close(parameter, expected[name], rtol=1e-5, atol=1e-6, msg=name)
