"""Collapse over training steps (``probe_every_steps``): the rows sit at steps 0, N, 2N, ... and equal the probe of
the model trained to that step; training is bit-identical with the key on and off; node and graph level (Graphormer
token rows); a resumed run neither loses nor repeats rows; the key's validation; the sweep's steps.csv, the report's
and the results page's figure."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import torch
from record_tolerance import assert_close_records
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch_geometric import seed_everything

from graphnorm.analysis import probe_records
from graphnorm.config import RunConfig, model_keywords
from graphnorm.models import build_model
from graphnorm.sweep import run_sweep
from graphnorm.sweep.report import plot_collapse_over_steps
from graphnorm.train.checkpoints import checkpoint_path, load_checkpoint
from graphnorm.train.graph_level import train_graph_level
from graphnorm.train.loaders import prepare_task, probe_sample
from graphnorm.train.loop import run
from graphnorm.train.node_level import train_node_level

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]
TIMINGS = ("wall_time_s", "probe_time_s", "train_graphs_per_s", "collapse_steps_time_s", "train_time_s")
STEP_KEYS = ("step", "epoch")


def cora(data_root: Path, **overrides) -> RunConfig:
    values = dict(dataset="cora", data_root=str(data_root), num_layers=3, hidden_channels=16, epochs=6, dropout=0.5)
    return RunConfig.from_dict({**values, **overrides})


def tiny_graphormer(data_root: Path, **overrides) -> RunConfig:
    """ZINC, 60 graphs per split: 5 steps of 12 graphs per epoch; the lr schedule fixed by total_steps, so a shorter
    run trains its steps exactly as the first steps of a longer one."""
    values = dict(
        dataset="zinc", data_root=str(data_root), limit_graphs=60, model="graphormer", num_layers=2,
        hidden_channels=16, num_heads=2, model_kwargs={"ffn_channels": 16, "multi_hop_max_dist": 3},
        norm="layernorm", dropout=0.1, optimizer="adamw", scheduler="polynomial", lr=5e-3, warmup_steps=3,
        total_steps=40, batch_size=12, epochs=4, probe_graphs=8,
    )  # fmt: skip
    return RunConfig.from_dict({**values, **overrides})


def trained(config: RunConfig, epochs: int) -> tuple[torch.nn.Module, object]:
    """The model of ``config`` (probe off) trained for ``epochs`` (>= 0) epochs as ``train`` sets it up, at its last
    weights (the training loops leave the model there; ``train`` then loads the best-validation weights)."""
    config = RunConfig.from_dict({**config.to_dict(), "epochs": max(epochs, 1), "probe_every_steps": 0})
    seed_everything(config.seed)
    task = prepare_task(config)
    seed_everything(config.seed)
    model = build_model(config.model, task, **model_keywords(config, task.level))
    if epochs > 0:  # 0: the initial model
        loop = train_node_level if task.level == "node" else train_graph_level
        loop(model, task, config, torch.device("cpu"))
    return model, task


def hand_probe(model: torch.nn.Module, task, config: RunConfig) -> list[dict]:
    """The probe run by hand on a copy of ``model``, as the step rows record it (no spectrum)."""
    copied = copy.deepcopy(model)
    sample, split = probe_sample(copied, task, config)
    return probe_records(copied, sample, split=split, num_singular_values=0)


def rows_at(record: dict, step: int) -> list[dict]:
    return [
        {k: v for k, v in row.items() if k not in STEP_KEYS} for row in record["collapse_steps"] if row["step"] == step
    ]


def without_timings(record: dict) -> dict:
    kept = {k: v for k, v in record.items() if k not in (*TIMINGS, "collapse_steps")}
    kept["history"] = [{k: v for k, v in row.items() if k not in TIMINGS} for row in record["history"]]
    return kept


def test_node_level_rows_at_every_n_steps_equal_the_probe_of_the_model_at_that_step(data_root: Path) -> None:
    """Cora, full batch (one step per epoch), dropout 0.5: rows at steps 0, 2, 4, 6 (epoch of the update: 0, 1, 3,
    5); each step's rows equal the probe of a model trained that many epochs without step probing."""
    config = cora(data_root, probe_every_steps=2)
    record = run(config)
    steps = sorted({row["step"] for row in record["collapse_steps"]})
    assert steps == [0, 2, 4, 6]
    assert {row["step"]: row["epoch"] for row in record["collapse_steps"]} == {0: 0, 2: 1, 4: 3, 6: 5}
    assert {row["rows"] for row in record["collapse_steps"]} == {"node"}
    assert not any(row["metric"].startswith("sv_") for row in record["collapse_steps"])
    for step in steps:
        model, task = trained(config, step)
        # The probe inside the training loop and probe_records by hand: two routes, round-off apart.
        assert_close_records(rows_at(record, step), hand_probe(model, task, config), f"step {step}")
    # the rows move: the trained model is not the initial one
    cosine = {
        r["step"]: r["value"] for r in record["collapse_steps"] if r["metric"] == "mean_cosine" and r["layer"] == 3
    }
    assert cosine[0] != cosine[6]
    assert record["collapse_steps_time_s"] > 0


def test_node_level_training_is_bit_identical_with_step_probing_on_and_off(data_root: Path) -> None:
    on, off = run(cora(data_root, probe_every_steps=1)), run(cora(data_root))
    assert "collapse_steps" not in off and "collapse_steps_time_s" not in off
    assert len({row["step"] for row in on["collapse_steps"]}) == 7  # steps 0..6
    assert without_timings(on) == without_timings(off)  # losses, metrics, history, final probe's layers


def test_graph_level_graphormer_rows_have_token_rows_and_equal_the_probe_at_that_step(data_root: Path) -> None:
    """Graphormer on ZINC (5 steps per epoch, 4 epochs, probe every 5 steps): rows at steps 0, 5, ..., 20 with
    node and graph-token rows; the rows at steps 10 and 20 equal the probe of the model trained 2 and 4 epochs."""
    config = tiny_graphormer(data_root, probe_every_steps=5)
    record = run(config)
    rows = record["collapse_steps"]
    assert sorted({row["step"] for row in rows}) == [0, 5, 10, 15, 20] and record["steps"] == 20
    assert {row["step"]: row["epoch"] for row in rows} == {0: 0, 5: 0, 10: 1, 15: 2, 20: 3}
    assert {row["rows"] for row in rows} == {"node", "token"}
    assert {row["layer_name"] for row in rows} == {"embedding", "layer_1", "layer_2"}
    assert {row["split"] for row in rows} == {"val_sample"}
    for epochs in (2, 4):
        model, task = trained(config, epochs)
        assert_close_records(rows_at(record, 5 * epochs), hand_probe(model, task, config), f"step {5 * epochs}")


@pytest.mark.parametrize("ema_decay", [None, 0.8])
def test_graph_level_training_is_bit_identical_with_step_probing_on_and_off(data_root: Path, ema_decay) -> None:
    on = run(tiny_graphormer(data_root, probe_every_steps=2, ema_decay=ema_decay))
    off = run(tiny_graphormer(data_root, ema_decay=ema_decay))
    assert sorted({row["step"] for row in on["collapse_steps"]}) == list(range(0, 21, 2))
    assert without_timings(on) == without_timings(off)


class SimulatedCrashError(Exception):
    """Stands for a kill: raised by an optimizer hook in the middle of an epoch."""


def test_a_resumed_run_neither_loses_nor_repeats_step_rows(data_root: Path, tmp_path: Path) -> None:
    """A run that crashes at step 13 (its checkpoint: epoch 2, step 10, rows of steps 0..9) and resumes ends with
    exactly the rows of an uninterrupted run: steps 12 (probed before the crash, not checkpointed) and after are
    probed again, none twice."""
    reference = run(tiny_graphormer(data_root, probe_every_steps=3))
    config = tiny_graphormer(data_root, probe_every_steps=3, checkpoint_dir=str(tmp_path / "checkpoints"))
    steps_done = []

    def crash_at_13(optimizer, args, kwargs) -> None:
        steps_done.append(1)
        if len(steps_done) == 13:
            raise SimulatedCrashError

    handle = register_optimizer_step_post_hook(crash_at_13)
    try:
        with pytest.raises(SimulatedCrashError):
            run(config)
    finally:
        handle.remove()
    saved = load_checkpoint(checkpoint_path(config))["state"]
    assert saved["step"] == 10 and sorted({row["step"] for row in saved["collapse_steps"]}) == [0, 3, 6, 9]
    resumed = run(config)
    assert resumed["resumed_at_epoch"] == 2
    assert resumed["collapse_steps"] == reference["collapse_steps"]
    keys = [(r["step"], r["layer"], r["rows"], r["metric"], r["stat"]) for r in resumed["collapse_steps"]]
    assert len(keys) == len(set(keys)) and sorted({key[0] for key in keys}) == list(range(0, 21, 3))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "probe_every_steps must be >= 0 (0: off), got -1"),
        (2.5, "probe_every_steps must be an integer, got 2.5"),
        ("5", "probe_every_steps must be an integer, got '5' (a quoted number is a string"),
        (True, "probe_every_steps must be an integer, got True (true/false is not a number)"),
    ],
)
def test_probe_every_steps_validation_is_one_line(value, message: str) -> None:
    with pytest.raises(ValueError) as error:
        RunConfig.from_dict({"dataset": "cora", "probe_every_steps": value})
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_sweep_writes_steps_csv_and_the_report_and_page_draw_it(data_root: Path, tmp_path: Path) -> None:
    """Two Cora runs with step probing: steps.csv holds every step row of both results (run_id first); the report
    writes the collapse-over-steps figure; build.py --collect carries steps.csv and the page shows the figure with
    its command. A sweep without the key writes no steps.csv."""
    sweep = {
        "name": "steps",
        "base": {
            "dataset": "cora",
            "data_root": str(data_root),
            "epochs": 4,
            "hidden_channels": 8,
            "probe_every_steps": 2,
        },
        "grid": {"norm": ["none", "pairnorm"]},
    }
    out = tmp_path / "sweep"
    run_sweep(sweep, out, executor="serial", threads=1, log=lambda _: None)
    steps = pd.read_csv(out / "steps.csv")
    assert list(steps.columns[:9]) == [
        "run_id",
        "step",
        "epoch",
        "layer",
        "layer_name",
        "rows",
        "metric",
        "stat",
        "value",
    ]
    assert sorted(steps["step"].unique()) == [0, 2, 4] and steps["run_id"].nunique() == 2
    results = [pd.read_json(path, typ="series") for path in sorted((out / "results").glob("*.json"))]
    assert len(steps) == sum(len(result["collapse_steps"]) for result in results)
    assert "collapse_steps" not in pd.read_csv(out / "runs.csv").columns
    assert (out / "report" / "collapse_over_steps.png").stat().st_size > 0

    build = _load_build()
    data, page = tmp_path / "data", tmp_path / "page"
    command = "graphnorm sweep steps.yaml --out sweep"
    assert (
        build.main(
            ["--collect", str(out), "--study", "steps", "--command", command, "--data", str(data), "--out", str(page)]
        )
        == 0
    )
    collected = pd.read_csv(data / "steps" / "steps.csv")
    assert set(collected["metric"]) <= {"effective_rank", "mean_cosine", "cone_angle", "cone_angle_q90"}
    assert len(collected) == len(steps[steps["metric"].isin(collected["metric"].unique())])
    text = (page / "README.md").read_text()
    assert "![steps: collapse over training steps](figures/steps_collapse_over_steps.png)" in text
    assert "every 2 optimizer steps up to step 4 (`probe_every_steps`; `steps.csv`)" in text and command in text
    assert (page / "figures" / "steps_collapse_over_steps.png").stat().st_size > 0

    plain = tmp_path / "plain"
    base = {**sweep["base"], "probe_every_steps": 0}
    run_sweep(
        {**sweep, "base": base, "grid": {"norm": ["none"]}},
        plain,
        executor="serial",
        threads=1,
        make_plots=False,
        log=lambda _: None,
    )
    assert not (plain / "steps.csv").exists()


def _load_build():
    spec = importlib.util.spec_from_file_location("analysis_build", REPO / "analysis" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plot_collapse_over_steps_writes_a_png_from_a_tidy_frame(tmp_path: Path) -> None:
    """One panel column per arm, one panel row per (rows, metric), one line per layer."""
    runs = pd.DataFrame({"run_id": ["a", "b"], "norm": ["layernorm", "batchnorm"], "num_layers": 2, "seed": 0})
    steps = pd.DataFrame(
        [
            {"run_id": run_id, "step": step, "epoch": 0, "layer": layer, "layer_name": f"layer_{layer}", "rows": rows,
             "metric": metric, "stat": "mean" if rows == "node" else "value", "value": 1.0 - 1.0 / (step + layer + 1)}
            for run_id in ("a", "b") for step in (0, 25, 50) for layer in (1, 2, 3) for rows in ("node", "token")
            for metric in ("mean_cosine", "effective_rank")
        ]
    )  # fmt: skip
    figure = plot_collapse_over_steps(steps, runs)
    axes = figure.axes
    assert len(axes) == 4 * 2 and [axis.get_title() for axis in axes[:2]] == ["batchnorm", "layernorm"]
    assert len(axes[0].get_lines()) == 3 and list(axes[0].get_lines()[0].get_xdata()) == [0, 25, 50]
    path = tmp_path / "steps.png"
    figure.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no collapse-over-steps rows"):
        plot_collapse_over_steps(steps, runs, metrics=("cone_angle",))


def test_tensorboard_has_a_series_per_layer_over_the_steps(data_root: Path, tmp_path: Path) -> None:
    """With tensorboard_dir: <dir>/<run_id>/collapse_steps holds <collapse tag>/layer_<k> at the optimizer steps, the
    values of the record's rows; the epoch curves stay in the run's folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from graphnorm.config import config_run_id

    config = cora(data_root, epochs=4, probe_every_steps=2, tensorboard_dir=str(tmp_path))
    record = run(config)
    events = EventAccumulator(str(tmp_path / config_run_id(config) / "collapse_steps"), size_guidance={"scalars": 0})
    events.Reload()
    series = [(e.step, e.value) for e in events.Scalars("collapse/mean_cosine/layer_3")]
    rows = [r for r in record["collapse_steps"] if r["metric"] == "mean_cosine" and r["layer"] == 3]
    assert [step for step, _ in series] == [0, 2, 4]
    assert [value for _, value in series] == pytest.approx([r["value"] for r in rows], rel=1e-6)  # float32 events
    assert "collapse/effective_rank/layer_1" in events.Tags()["scalars"]
