"""TensorBoard logging (RunConfig.tensorboard_dir): event files read back match the run's record, one folder per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import graphnorm.train.graph_level as train_module
from graphnorm.config import RunConfig, config_run_id
from graphnorm.sweep import expand_grid, run_sweep
from graphnorm.train import run
from graphnorm.train.tensorboard_log import collapse_tag, history_tag

pytestmark = pytest.mark.usefixtures("one_thread")


def test_collapse_steps_live_apart_from_epoch_steps(tmp_path: Path) -> None:
    """Layer steps in the run folder would follow its epoch steps and read as a restart (TensorBoard drops points)."""
    from graphnorm.train.tensorboard_log import TensorBoardLog

    epochs = TensorBoardLog(str(tmp_path), "run")
    for epoch in range(5):
        epochs.epoch(epoch, {"train_loss": 1.0 / (epoch + 1)}, lr=0.1)
    epochs.close()
    layers = TensorBoardLog(str(tmp_path), "run", part="collapse")
    layers.probe(
        [{"metric": "effective_rank", "stat": "value", "rows": "node", "layer": k, "value": 2.0} for k in (1, 2)]
    )
    layers.close()
    series = scalars(tmp_path / "run")
    assert [step for step, _ in series["train/loss"]] == [0, 1, 2, 3, 4]
    assert [step for step, _ in series["collapse/effective_rank"]] == [1, 2]
    assert list((tmp_path / "run").glob("events.out.tfevents.*")) and list((tmp_path / "run/collapse").glob("events.*"))
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.is_dir()) == ["collapse"]


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in ``folder``'s event files and in its ``collapse`` sub-folder's, as (step, value) lists."""
    series = {}
    for where in (folder, folder / "collapse"):
        if where.is_dir():
            events = EventAccumulator(str(where), size_guidance={"scalars": 0})  # 0: keep every point
            events.Reload()
            series |= {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    return series


def test_tags_of_history_keys_and_probe_rows() -> None:
    assert [history_tag(k) for k in ("train_loss", "val_loss", "val_acc", "test_mae", "lr")] == [
        "train/loss",
        "val/loss",
        "val/acc",
        "test/mae",
        "lr",
    ]
    row = {"rows": "node", "metric": "effective_rank", "stat": "value", "layer": 3, "value": 2.0}
    assert collapse_tag(row) == "collapse/effective_rank"
    assert collapse_tag({**row, "stat": "pooled"}) == "collapse/effective_rank_pooled"
    assert collapse_tag({**row, "rows": "token", "stat": "mean"}) == "collapse_token/effective_rank"
    assert collapse_tag({**row, "metric": "sv_003"}) is None


def test_tensorboard_dir_leaves_the_run_id_unchanged() -> None:
    """Old sweeps resume when tensorboard_dir is set: it is where files go, not what the run computes."""
    assert config_run_id(RunConfig(num_layers=8, tensorboard_dir="/anywhere")) == config_run_id(RunConfig(num_layers=8))


def check_curves(series: dict[str, list[tuple[int, float]]], record: dict, metric: str) -> None:
    """One point per epoch run, at steps 0..epochs_run-1, equal (float32) to the record's history."""
    history = record["history"]
    steps = list(range(record["epochs_run"]))
    for key in ("train_loss", f"val_{metric}", f"test_{metric}"):
        tag = history_tag(key)
        assert [step for step, _ in series[tag]] == steps, tag
        assert [value for _, value in series[tag]] == pytest.approx([row[key] for row in history], rel=1e-6)
    assert len(series["lr"]) == record["epochs_run"]


def check_collapse(series: dict[str, list[tuple[int, float]]], record: dict) -> None:
    """collapse/<metric>: the layer index as the step, the probe's values."""
    rows = [r for r in record["layers"] if r["metric"] == "effective_rank" and r["stat"] in ("value", "mean")]
    rows = [r for r in rows if r["rows"] == "node"]
    assert [step for step, _ in series["collapse/effective_rank"]] == [r["layer"] for r in rows]
    assert [value for _, value in series["collapse/effective_rank"]] == pytest.approx([r["value"] for r in rows])
    assert not any(tag.startswith("collapse/sv_") for tag in series)


def test_sweep_writes_one_folder_per_run_matching_the_records(data_root: Path, tmp_path: Path) -> None:
    board = tmp_path / "tb"
    sweep = {
        "name": "tb",
        "base": {"dataset": "cora", "data_root": str(data_root), "epochs": 4, "tensorboard_dir": str(board)},
        "grid": {"norm": ["none", "pairnorm"], "num_layers": [3]},
    }
    run_sweep(sweep, tmp_path / "out", executor="serial", make_plots=False, log=lambda line: None)
    run_ids = [config_run_id(config) for config in expand_grid(sweep, log=None)]
    assert sorted(path.name for path in board.iterdir()) == sorted(run_ids)
    for run_id in run_ids:
        result = json.loads((tmp_path / "out" / "results" / f"{run_id}.json").read_text())
        record = {**result["record"], "history": result["history"], "layers": result["layers"]}
        series = scalars(board / run_id)
        check_curves(series, record, "acc")
        assert [v for _, v in series["val/loss"]] == pytest.approx([r["val_loss"] for r in record["history"]])
        assert [step for step, _ in series["collapse/effective_rank"]] == [1, 2, 3]
        check_collapse(series, record)


def test_a_run_started_again_hides_its_earlier_attempt(data_root: Path, tmp_path: Path) -> None:
    config = RunConfig(dataset="cora", data_root=str(data_root), epochs=3, probe=False, tensorboard_dir=str(tmp_path))
    run(config)
    record = run(config)  # the same run again, into the same folder
    series = scalars(tmp_path / config_run_id(config))
    check_curves(series, record, "acc")  # 3 points per curve, not 6


def tiny_zinc(data_root: Path, **overrides) -> RunConfig:
    values = dict(
        dataset="zinc",
        data_root=str(data_root),
        limit_graphs=40,
        num_layers=2,
        hidden_channels=16,
        epochs=3,
        batch_size=20,
        virtual_node=True,
    )
    return RunConfig.from_dict({**values, **overrides})


def test_graph_level_run_with_a_resume_logs_each_epoch_once(data_root: Path, tmp_path: Path, monkeypatch) -> None:
    """Killed while saving epoch 1's checkpoint (after logging epoch 1), resumed at epoch 1: epoch 1 is logged by
    both attempts, and TensorBoard shows it once (purge_step), with the resumed attempt's value."""
    config = tiny_zinc(data_root, checkpoint_dir=str(tmp_path / "ckpt"), tensorboard_dir=str(tmp_path / "tb"))
    save = train_module.save_checkpoint
    calls = []

    def save_then_die(path, state):
        calls.append(state["state"]["epoch"])
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed before epoch 1's checkpoint is written
        save(path, state)

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        run(config)
    folder = tmp_path / "tb" / config_run_id(config)
    assert [step for step, _ in scalars(folder)["train/loss"]] == [0, 1]  # the first attempt logged epoch 1
    monkeypatch.setattr(train_module, "save_checkpoint", save)
    record = run(config)
    assert record["resumed_at_epoch"] == 1 and record["epochs_run"] == 3
    series = scalars(folder)
    check_curves(series, record, "mae")
    check_collapse(series, record)
    token = [r for r in record["layers"] if r["rows"] == "token" and r["metric"] == "effective_rank"]
    assert [step for step, _ in series["collapse_token/effective_rank"]] == [r["layer"] for r in token]
    assert [value for _, value in series["collapse_token/effective_rank"]] == pytest.approx([r["value"] for r in token])


def test_an_attempt_opened_in_the_same_second_as_the_last_waits_for_a_later_second(tmp_path: Path) -> None:
    """Event files are read in name order; a name starts with the second the writer opened, so a new attempt must
    not share the last attempt's second (its counter, compared as text, could sort it first)."""
    import time

    from graphnorm.train.tensorboard_log import wait_for_a_later_second

    wait_for_a_later_second(tmp_path)  # no event file: no wait
    now = int(time.time())
    (tmp_path / f"events.out.tfevents.{now}.host.1.9").write_bytes(b"")
    wait_for_a_later_second(tmp_path)
    assert int(time.time()) > now
