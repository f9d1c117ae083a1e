"""Data-parallel training on the CPU: 2 processes under torchrun (gloo) against one process.

One torchrun launch of this file (its ``__main__``: :func:`worker`) runs every 2-process scenario and leaves each
rank's results in a folder; the tests compare them with one-process runs made here. 2 processes of batch B train on
the same global batches as one process of batch 2B (the shard sampler), so the loss trajectories agree up to float
rounding: the gradients are averaged over the two halves instead of summed in one batch, and a synced BatchNorm sums
its statistics in float64 where one process's runs in float32.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from graphnorm.config import RunConfig
from graphnorm.norms.base import NormBase
from graphnorm.train.distributed import DataParallelError, Ranks, ShardSampler, check_data_parallel
from graphnorm.train.sync_norms import SyncedBatchNorm, synchronize_norms

B = 4  # per-process batch of the 2-process runs; the one-process runs take 2 * B
# Tolerances of a 2-process run against the one-process run (relative, and absolute for weights). Measured (lr 1e-3,
# 6 Adam steps): train losses within 1e-7 relative (BatchNorm: equal), GraphNorm's metrics within 2e-7, the weights
# within 1e-6, while an unsynced BatchNorm's train losses differ by 1e-2 to 4e-2 (asserted > 1e-3 below).
LOSS_RTOL = WEIGHT_TOL = METRIC_RTOL = 1e-5
# Except where a norm cancels a bias: the conv bias before BatchNorm (GraphNorm: nearly) has a zero gradient up to
# rounding, which Adam scales up to steps of about lr, differently in each run; BatchNorm's running mean follows that
# bias, and its eval-mode metrics with it (measured 5e-4 relative).
CANCELLED = re.compile(r"conv\.bias$|running_mean$")
BATCHNORM_METRIC_RTOL = 2e-3


def tiny_config(data_root: str, norm: str, batch_size: int, **values: Any) -> RunConfig:
    """A ZINC run of a few seconds: 16 graphs per split, a 2-layer GCN of width 16, 3 epochs (2 steps each)."""
    base = dict(dataset="zinc", limit_graphs=16, num_layers=2, hidden_channels=16, dropout=0.0, lr=1e-3)
    base.update(weight_decay=0.0, epochs=3, probe=False)
    return RunConfig(data_root=data_root, norm=norm, batch_size=batch_size, **{**base, **values})


class InterruptedRunError(Exception):
    """Raised by the worker inside a run, after its first epoch's checkpoint, to be resumed."""


def worker(out: Path, data_root: str) -> None:
    """One rank of the torchrun launch: every 2-process scenario, its results in ``out/rank<r>/``."""
    from graphnorm import cli
    from graphnorm.train import loop
    from graphnorm.train.distributed import barrier, process_group
    from graphnorm.train.graph_level import GraphTraining

    torch.set_num_threads(1)
    written: list[str] = []
    runs = out / "runs"
    sys.addaudithook(lambda event, args: _log_write(event, args, runs, written))
    with process_group("cpu") as ranks:
        mine = out / f"rank{ranks.rank}"
        mine.mkdir(parents=True, exist_ok=True)

        def keep(name: str, config: RunConfig) -> None:
            model, _, record = loop.train(config)
            torch.save({"record": record, "weights": model.state_dict()}, mine / f"{name}.pt")

        keep("graphnorm", tiny_config(data_root, "graphnorm", B))
        keep("batchnorm", tiny_config(data_root, "batchnorm", B))
        unsynced = loop.synchronize_norms
        loop.synchronize_norms = lambda model: model  # the counterfactual: each rank normalizes with its own half
        keep("batchnorm_unsynced", tiny_config(data_root, "batchnorm", B))
        loop.synchronize_norms = unsynced
        resumable = dict(dropout=0.2, checkpoint_dir=str(runs / "whole"))
        keep("whole", tiny_config(data_root, "batchnorm", B, **resumable))
        checkpoint = GraphTraining.checkpoint

        def interrupt(self: GraphTraining, state: Any, generator: torch.Generator) -> dict:
            if state.epoch == 2:  # epoch 1 ran: the file holds epoch 0's end
                raise InterruptedRunError
            return checkpoint(self, state, generator)

        resumable["checkpoint_dir"] = str(runs / "resumed")
        GraphTraining.checkpoint = interrupt
        with contextlib.suppress(InterruptedRunError):
            loop.train(tiny_config(data_root, "batchnorm", B, **resumable))
        GraphTraining.checkpoint = checkpoint
        keep("resumed", tiny_config(data_root, "batchnorm", B, **resumable))
        config = out / "cli.yaml"
        if ranks.writes:
            values = f"limit_graphs: 16\nnum_layers: 2\nhidden_channels: 8\nepochs: 2\nbatch_size: {B}\nprobe: false\n"
            config.write_text(f"dataset: zinc\n{values}checkpoint_dir: {runs / 'cli_checkpoints'}\n")
        barrier()
        with open(mine / "cli_stdout.txt", "w") as stdout, contextlib.redirect_stdout(stdout):
            code = cli.main(["train", str(config), "--out", str(runs / "cli_record.json")])
        (mine / "done.json").write_text(json.dumps({"cli_code": code, "written": sorted(set(written))}))


def _log_write(event: str, args: tuple, root: Path, written: list[str]) -> None:
    """Audit hook: every file under ``root`` opened for writing (builtins.open's and os.open's ``open`` events)."""
    if event != "open" or not isinstance(args[0], (str, os.PathLike)):
        return
    path, mode, flags = args
    writes = (mode is not None and any(c in mode for c in "wax+")) or (flags & (os.O_WRONLY | os.O_RDWR))
    if writes and str(path).startswith(str(root)):
        written.append(str(path))


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, data_root: Path) -> Path:
    """Every 2-process scenario, run once by torchrun: the results folder."""
    out = tmp_path_factory.mktemp("ddp")
    (out / "runs").mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*command, __file__, str(out), str(data_root)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return out


@functools.cache
def one_process(data_root: Path, norm: str) -> dict[str, Any]:
    """The one-process run of batch 2B, as the 2-process runs keep theirs."""
    from graphnorm.train import train

    torch.set_num_threads(1)
    model, _, record = train(tiny_config(str(data_root), norm, 2 * B))
    return {"record": record, "weights": model.state_dict()}


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """Largest relative differences of the epochs' train losses and metrics, largest absolute one of the weights
    (apart from those in :data:`CANCELLED`)."""
    rows = list(zip(a["record"]["history"], b["record"]["history"], strict=True))
    found = {k: max(abs(x[k] - y[k]) / abs(y[k]) for x, y in rows) for k in ("train_loss", "val_mae", "test_mae")}
    kept = [name for name in b["weights"] if not CANCELLED.search(name)]
    found["weights"] = max((a["weights"][n].float() - b["weights"][n].float()).abs().max().item() for n in kept)
    return found


def load(out: Path, rank: int, name: str) -> dict[str, Any]:
    return torch.load(out / f"rank{rank}" / f"{name}.pt", weights_only=False)


@pytest.mark.parametrize("norm", ["graphnorm", "batchnorm"])
def test_two_processes_of_batch_b_train_as_one_of_batch_2b(two_processes: Path, data_root: Path, norm: str) -> None:
    one, two = one_process(data_root, norm), load(two_processes, 0, norm)
    assert two["record"]["world_size"] == 2 and len(two["record"]["history"]) == 3
    assert two["record"]["steps"] == one["record"]["steps"] == 6
    found = differences(two, one)
    print(f"{norm}: 2 processes x {B} vs 1 x {2 * B}, largest differences: {found}")
    assert found["train_loss"] <= LOSS_RTOL and found["weights"] <= WEIGHT_TOL
    metric_rtol = BATCHNORM_METRIC_RTOL if norm == "batchnorm" else METRIC_RTOL
    assert max(found["val_mae"], found["test_mae"]) <= metric_rtol
    other_rank = load(two_processes, 1, norm)
    for name, tensor in two["weights"].items():  # every rank ends with the same weights and running statistics
        assert torch.equal(other_rank["weights"][name], tensor)


def test_an_unsynced_batchnorm_would_not_train_as_one_process(two_processes: Path, data_root: Path) -> None:
    """The counterfactual the sync exists for: each rank's statistics over its half of the batch."""
    one, unsynced = one_process(data_root, "batchnorm"), load(two_processes, 0, "batchnorm_unsynced")
    assert differences(unsynced, one)["train_loss"] > 1e-3


PARTS = ("cli_record.json", ".model.pt", "learning_curve.png")


def test_only_rank_0_writes_and_prints(two_processes: Path) -> None:
    done = [json.loads((two_processes / f"rank{r}" / "done.json").read_text()) for r in (0, 1)]
    assert [d["cli_code"] for d in done] == [0, 0]
    assert done[1]["written"] == []
    names = {Path(path).name for path in done[0]["written"]}
    # (atomic writes: each file through a temporary file beside it, named after it)
    assert {"cli_record.json", ".model.pt", "learning_curve.png"} <= {p for n in names for p in PARTS if p in n}
    assert json.loads((two_processes / "runs" / "cli_record.json").read_text())["world_size"] == 2
    assert (two_processes / "rank1" / "cli_stdout.txt").read_text() == ""
    assert '"world_size": 2' in (two_processes / "rank0" / "cli_stdout.txt").read_text()


def test_a_resumed_two_process_run_ends_as_if_never_stopped(two_processes: Path, data_root: Path) -> None:
    whole, resumed = load(two_processes, 0, "whole"), load(two_processes, 0, "resumed")
    assert whole["record"]["resumed_at_epoch"] is None and resumed["record"]["resumed_at_epoch"] == 1
    for a, b in zip(whole["record"]["history"], resumed["record"]["history"], strict=True):
        assert {k: v for k, v in a.items() if k != "train_time_s"} == {
            k: v for k, v in b.items() if k != "train_time_s"
        }
    for name, tensor in whole["weights"].items():  # dropout 0.2: rank 1's random state came back too
        assert torch.equal(resumed["weights"][name], tensor)
    # One process cannot resume a checkpoint two processes wrote: the shares of the batches would differ.
    from graphnorm.train import run
    from graphnorm.train.checkpoints import CheckpointError

    config = tiny_config(
        str(data_root), "batchnorm", B, dropout=0.2, checkpoint_dir=str(two_processes / "runs" / "whole")
    )
    with pytest.raises(CheckpointError, match=r"written by 2 training process\(es\), this run has 1"):
        run(config)


class BatchMean(NormBase):
    """A norm with statistics across the graphs of a batch (and no per_graph): what data-parallel training refuses."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def _normalize(self, x: torch.Tensor, batch: torch.Tensor | None, batch_size: int | None) -> torch.Tensor:
        return x - x.mean(dim=0)


def test_a_norm_with_statistics_across_graphs_is_refused_in_one_line() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), BatchMean(3))
    with pytest.raises(DataParallelError, match=r"^norm BatchMean at 1 may take statistics across the graphs") as e:
        synchronize_norms(model)
    assert "\n" not in str(e.value)
    tracked = torch.nn.Sequential(torch.nn.InstanceNorm1d(3, track_running_stats=True))
    with pytest.raises(DataParallelError, match="keeps running statistics averaged over the batch's graphs"):
        synchronize_norms(tracked)
    BatchMean.statistics_within_graph = True  # a user's norm may declare per-graph statistics
    try:
        synchronize_norms(model)
    finally:
        del BatchMean.statistics_within_graph


def test_batchnorms_become_synced_in_place_and_per_graph_norms_stay() -> None:
    from torch_geometric.nn.norm import BatchNorm as PyGBatchNorm

    from graphnorm.norms import BatchNorm, GraphNorm

    model = torch.nn.ModuleList([BatchNorm(4), GraphNorm(4), PyGBatchNorm(4, allow_single_element=True)])
    keys, weight = model.state_dict().keys(), model[0].module.module.weight
    synchronize_norms(model)
    assert type(model[0].module.module) is SyncedBatchNorm and model[0].module.module.weight is weight
    assert model.state_dict().keys() == keys and type(model[1]) is GraphNorm
    assert model[2].module.single_row_running and not model[2].allow_single_element
    x = torch.randn(5, 4)
    model.eval()
    torch.testing.assert_close(model[0](x), torch.nn.functional.batch_norm(x, torch.zeros(4), torch.ones(4), eps=1e-5))


def test_node_level_and_bucketed_runs_are_refused_under_several_processes() -> None:
    two = Ranks(rank=0, world_size=2)
    with pytest.raises(DataParallelError, match="node-level task"):
        check_data_parallel(RunConfig(dataset="cora"), "node", two)
    with pytest.raises(DataParallelError, match="bucket_batches=4"):
        check_data_parallel(RunConfig(dataset="zinc", bucket_batches=4), "graph", two)
    check_data_parallel(RunConfig(dataset="cora"), "node", Ranks())  # one process: anything goes


@pytest.mark.parametrize("size", [16, 15, 1])
def test_shards_cover_the_one_process_order_batch_by_batch(size: int) -> None:
    order = list(torch.randperm(size, generator=torch.Generator().manual_seed(0)).tolist())
    shards = [list(ShardSampler(order, Ranks(rank, 2))) for rank in (0, 1)]  # type: ignore[arg-type]
    assert len(shards[0]) == len(shards[1]) == (size + 1) // 2
    padded = order + order[: len(shards[0]) * 2 - size]
    for step in range(0, len(shards[0]), B):  # step k: the union of the ranks' batches is one process's batch 2B
        union = shards[0][step : step + B] + shards[1][step : step + B]
        assert sorted(union) == sorted(padded[2 * step : 2 * step + 2 * B])


def test_a_sweep_run_function_trains_each_run_in_two_processes(data_root: Path) -> None:
    """``run_fn: graphnorm.train.launch:processes_2``: the sweep's call starts torchrun as a child; no config key."""
    import importlib

    launch = importlib.import_module("graphnorm.train.launch")
    run = launch.processes_2  # what the sweep's resolve_run_fn looks up
    assert pickle.loads(pickle.dumps(run)) is run  # the sweep pickles it for its worker processes
    output = io.StringIO()
    with contextlib.redirect_stdout(output):  # a sweep's run log
        record = run(tiny_config(str(data_root), "graphnorm", B))
    assert record["world_size"] == 2 and "epoch 3/3" in output.getvalue()
    one = one_process(data_root, "graphnorm")["record"]["history"]
    assert [r["train_loss"] for r in record["history"]] == pytest.approx([r["train_loss"] for r in one], rel=LOSS_RTOL)
    with pytest.raises(AttributeError):
        launch.processes_0  # noqa: B018


if __name__ == "__main__":
    worker(Path(sys.argv[1]), sys.argv[2])
