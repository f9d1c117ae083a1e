"""Command line: ``graphnorm sweep`` (dry run, overrides, errors, exit codes), ``graphnorm train``, the configs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sweep_run_fns import FAIL_ENV, SWEEP

from graphnorm.cli import main
from graphnorm.sweep import expand_grid, load_sweep_config

REPO = Path(__file__).resolve().parents[1]
# The Cora studies (other experiments/*.yaml belong to other studies and are tested with them).
EXPERIMENTS = [
    REPO / "experiments" / "sweeps" / f"{name}.yaml" for name in ("cora_depth", "cora_depth_quick", "cora_all_norms")
]
EXPERIMENTS.append(REPO / "experiments" / "sweeps" / "cora_contranorm_protocol.yaml")
FAKE = ["--run-fn", "sweep_run_fns:fake_run", "--executor", "serial", "--no-plots"]


def printed_record(out: str) -> dict:
    """The record ``graphnorm train`` printed: the JSON block from the line ``{`` to the line ``}``."""
    lines = out.splitlines()
    start = lines.index("{")
    return json.loads("\n".join(lines[start : lines.index("}", start) + 1]))


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


def test_sweep_command_runs_overrides_and_dry_run_marks_states(sweep_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    monkeypatch.setenv(FAIL_ENV, "pairnorm")
    code = main(["sweep", str(sweep_file), "grid.seed=[0]", "base.epochs=5", "--out", str(out), *FAKE])
    assert code == 1  # a run failed: the sweep finished, but says so
    captured = capsys.readouterr()
    assert "4 runs, 0 already done, 4 to run" in captured.out
    assert "run/s" not in captured.err  # no progress bar when not on a terminal
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and set(runs.epochs) == {5} and set(runs.seed) == {0}
    assert yaml.safe_load((out / "sweep.yaml").read_text())["grid"]["seed"] == [0]

    assert main(["sweep", "--dry-run", str(sweep_file), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = [line.split() for line in printed.splitlines() if "-L" in line]
    states = {(norm, int(depth), int(seed)): state for _, norm, depth, seed, state in lines}
    assert len(states) == 8
    # epochs differs from the sweep run above (5 vs 3): those runs are other configs, so all are missing...
    assert set(states.values()) == {"missing"}
    assert main(["sweep", "--dry-run", str(sweep_file), "base.epochs=5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = [line.split() for line in printed.splitlines() if "-L" in line]
    states = {(norm, int(depth), int(seed)): state for _, norm, depth, seed, state in lines}
    # ...while with the same settings the seed-0 runs are found: done or failed.
    assert states[("none", 2, 0)] == "done" and states[("pairnorm", 4, 0)] == "failed"
    assert states[("none", 2, 1)] == "missing"
    assert "8 runs (2 done, 2 failed, 4 missing)" in printed


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("grid.num_layers=[2, 0]", "num_layers must be >= 1"),
        ("grid.norm=[none, nosuch]", "unknown norm 'nosuch'"),
        ("base.dropout=-0.5", "dropout must be in"),
        ("base.epochz=3", "unknown config key"),
        ("grid", "must look like key=value"),
    ],
)
def test_sweep_command_rejects_bad_input_before_running(sweep_file, tmp_path, capsys, override, message):
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_file), override, "--out", str(out), *FAKE]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_missing_sweep_file_is_a_clear_error(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.yaml"), "--dry-run"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[p.stem for p in EXPERIMENTS])
def test_experiment_configs_are_valid(path: Path, capsys):
    sweep = load_sweep_config(path)
    configs = expand_grid(sweep)  # every run validated against the current RunConfig and norm registry
    assert sweep["name"] == path.stem and len(configs) >= 12
    assert {c.dataset for c in configs} == {"cora"}
    assert main(["sweep", "--dry-run", str(path), "--out", "/nonexistent/graphnorm-dry-run"]) == 0
    assert f"{len(configs)} missing" in capsys.readouterr().out


def test_contranorm_protocol_config_matches_the_paper():
    configs = expand_grid(load_sweep_config(REPO / "experiments" / "sweeps" / "cora_contranorm_protocol.yaml"))
    assert len(configs) == 4 * 5 * 5
    for c in configs:
        assert (c.hidden_channels, c.dropout, c.lr, c.weight_decay, c.epochs) == (32, 0.6, 0.005, 5e-4, 200)
        assert (c.adjacency, c.feature_norm, c.eval_nodes, c.optimizer) == ("row", "row_l1", "rest", "adam")
    contra = [c for c in configs if c.norm == "contranorm"]
    assert all(c.shared_layernorm and c.norm_kwargs == {"scale": 1.0, "layer_norm": False} for c in contra)
    pair = [c for c in configs if c.norm == "pairnorm"]
    assert all(c.norm_kwargs == {"mode": "PN", "scale": 1.0} and not c.shared_layernorm for c in pair)


def test_all_norms_config_covers_every_registered_norm_that_runs_on_gcn(capsys):
    from graphnorm.config import RunConfig, unsupported_norm_reason
    from graphnorm.norms import available_norms

    configs = expand_grid(load_sweep_config(REPO / "experiments" / "sweeps" / "cora_all_norms.yaml"))
    left_out = {n for n in available_norms() if unsupported_norm_reason(RunConfig(norm=n))}
    assert left_out == {"sepnorm"}  # needs graph-token rows: not on a GCN over Cora
    assert {c.norm for c in configs} == set(available_norms()) - left_out
    assert "norm: all leaves out sepnorm (sepnorm needs graph-token rows" in capsys.readouterr().out


def test_train_command_prints_the_record(tmp_path: Path, data_root: Path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("dataset: cora\nnum_layers: 2\nhidden_channels: 8\nepochs: 5\n")
    record_file = tmp_path / "record.json"
    assert main(["train", str(config), "norm=pairnorm", "epochs=2", "--out", str(record_file)]) == 0
    printed = printed_record(capsys.readouterr().out)
    assert 0 <= printed["test_acc"] <= 1 and "layers" not in printed and "history" not in printed
    saved = json.loads(record_file.read_text())
    assert saved["test_acc"] == printed["test_acc"] and [row["epoch"] for row in saved["history"]] == [0, 1]
    assert (tmp_path / "record.json.learning_curve.png").stat().st_size > 1000
    assert main(["train", str(config), "num_layers=0"]) == 2
    assert "num_layers must be >= 1" in capsys.readouterr().err


def test_slurm_executor_without_slurm_is_a_clear_error(sweep_file, tmp_path, capsys):
    # This machine has no SLURM: submitit refuses, the sweep says so in one line, and nothing runs.
    out = tmp_path / "out"
    args = ["sweep", str(sweep_file), "--out", str(out), "--executor", "slurm", "--slurm-partition", "cpu"]
    assert main([*args, "--run-fn", "sweep_run_fns:fake_run", "--no-plots"]) == 2
    assert "srun" in capsys.readouterr().err
    assert not list((out / "results").glob("*.json"))


def test_unknown_run_function_fails_before_any_run(sweep_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--run-fn", "graphnorm.nosuch:run", "--dry-run"]) == 2
    assert "No module named 'graphnorm.nosuch'" in capsys.readouterr().err
    assert main(["sweep", str(sweep_file), "--out", str(out), "--run-fn", "graphnorm.train:nosuch"]) == 2
    assert "has no function 'nosuch'" in capsys.readouterr().err
    assert not out.exists()


SWEEP_PRESETS = sorted((REPO / "experiments" / "sweeps").glob("*.yaml"))
RUN_PRESETS = sorted((REPO / "experiments" / "runs").glob("*.yaml"))
CORA_RUN = REPO / "experiments" / "runs" / "cora_gcn.yaml"


@pytest.fixture
def no_training(monkeypatch):
    """A command that starts a run or a sweep fails the test."""
    import graphnorm.sweep
    import graphnorm.train

    def started(*args, **kwargs):
        raise AssertionError("the command started training")

    monkeypatch.setattr(graphnorm.train, "run", started)
    monkeypatch.setattr(graphnorm.sweep, "run_sweep", started)


@pytest.mark.parametrize("path", SWEEP_PRESETS, ids=[p.stem for p in SWEEP_PRESETS])
def test_sweep_presets_expand_and_train_points_to_sweep(path: Path, capsys, no_training):
    assert expand_grid(load_sweep_config(path), log=None)
    assert main(["train", str(path), "epochs=1"]) == 2
    sections = ", ".join(k for k in ("base", "grid", "norm_settings") if k in yaml.safe_load(path.read_text()))
    assert capsys.readouterr().err == (
        f"graphnorm train: error: {path} is a sweep config (it has {sections}), not a single run; "
        f"run it with: graphnorm sweep {path}\n"
    )


@pytest.mark.parametrize("path", RUN_PRESETS, ids=[p.stem for p in RUN_PRESETS])
def test_run_presets_load_and_sweep_points_to_train(path: Path, capsys, no_training):
    from graphnorm.config import RunConfig
    from graphnorm.files import load_yaml_file

    text = path.read_text()
    assert RunConfig.from_dict(load_yaml_file(path)).dataset == yaml.safe_load(text)["dataset"]
    assert f"graphnorm train experiments/runs/{path.name}" in text and "Expected runtime" in text
    for extra in ([], ["--dry-run"], ["base.epochs=1"]):
        assert main(["sweep", str(path), *extra]) == 2
        err = capsys.readouterr().err
        first_keys = ", ".join(list(yaml.safe_load(text))[:3])  # the file's first keys, in its order
        assert err.startswith(f"graphnorm sweep: error: {path} is a single-run config (RunConfig keys such as ")
        assert f"such as {first_keys}; no base, grid or norm_settings), not a sweep; " in err
        assert err.endswith(f"run it with: graphnorm train {path}\n")


def test_pointer_messages_quote_paths_and_leave_other_errors_alone(tmp_path: Path, capsys, no_training):
    spaced = tmp_path / "my run.yaml"
    spaced.write_text("norm: pairnorm\nnum_layers: 2\n")
    assert main(["sweep", str(spaced)]) == 2
    assert capsys.readouterr().err.endswith(f"run it with: graphnorm train '{spaced}'\n")
    typo = tmp_path / "typo.yaml"  # neither RunConfig keys nor sweep sections: the sweep's own message
    typo.write_text("name: x\ngird: {seed: [0]}\n")
    assert main(["sweep", str(typo)]) == 2
    assert "unknown sweep key(s) ['gird']" in capsys.readouterr().err


def test_cora_run_preset_trains(tmp_path: Path, data_root: Path, capsys):
    from graphnorm.config import RunConfig
    from graphnorm.files import load_yaml_file

    config = RunConfig.from_dict(load_yaml_file(CORA_RUN))
    assert (config.dataset, config.model, config.num_layers, config.norm) == ("cora", "gcn", 4, "pairnorm")
    assert (config.epochs, config.eval_nodes, config.adjacency) == (200, "rest", "row")
    record_file = tmp_path / "record.json"
    assert main(["train", str(CORA_RUN), "epochs=3", "--out", str(record_file)]) == 0
    record = json.loads(record_file.read_text())
    assert record["epochs_run"] == 3 and len(record["history"]) == 3
    assert record["num_eval_nodes"] == 2068 and 0 <= record["test_acc_last"] <= 1
    assert {row["layer"] for row in record["layers"]} == {1, 2, 3, 4}  # one row set per convolution
    assert printed_record(capsys.readouterr().out)["test_acc_last"] == record["test_acc_last"]


def test_train_tensorboard_flag_writes_the_runs_folder(tmp_path: Path, data_root: Path):
    from graphnorm.config import RunConfig, config_run_id

    config = tmp_path / "run.yaml"
    config.write_text("dataset: cora\nnum_layers: 2\nhidden_channels: 8\nepochs: 1\nprobe: false\n")
    board = tmp_path / "tb"
    assert main(["train", str(config), "--tensorboard", str(board)]) == 0
    run_id = config_run_id(RunConfig.from_dict(yaml.safe_load(config.read_text())))
    assert [p.name for p in board.iterdir()] == [run_id]  # one folder per run, named by its id
    assert list((board / run_id).glob("events.out.tfevents.*"))


def test_sweep_tensorboard_flag_sets_the_base_key(sweep_file, tmp_path, monkeypatch):
    import graphnorm.sweep

    seen = {}
    monkeypatch.chdir(tmp_path)  # the CLI makes the folder "123" where it is started
    monkeypatch.setattr(graphnorm.sweep, "run_sweep", lambda sweep, out, **kwargs: seen.update(sweep) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["sweep", str(sweep_file), "--tensorboard", "123", "--out", str(tmp_path / "out"), *FAKE])
    assert seen["base"]["tensorboard_dir"] == "123"  # a string, even when DIR looks like a number


def test_tensorboard_flag_without_the_package_is_one_line(tmp_path, monkeypatch, capsys, no_training):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard now raises ImportError
    assert main(["train", str(CORA_RUN), "--tensorboard", str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphnorm train: error: --tensorboard: tensorboard_dir needs the tensorboard package")
    assert len(err.splitlines()) == 1


def test_train_with_a_missing_dataset_is_one_line(tmp_path, monkeypatch, capsys):
    """A dataset the user has to provide is a one-line error (its message says where it looked and what to set),
    not a traceback; the loader's own error is raised where the download would have been tried."""
    from graphnorm.data import DatasetNotFoundError
    from graphnorm.train import loop as train

    def not_found(config):
        raise DatasetNotFoundError("dataset 'cora' not found: set $GRAPHNORM_DATA_MIRROR")

    monkeypatch.setattr(train, "prepare_task", not_found)
    config = tmp_path / "run.yaml"
    config.write_text("dataset: cora\nepochs: 1\n")
    assert main(["train", str(config)]) == 2
    assert "dataset 'cora' not found: set $GRAPHNORM_DATA_MIRROR" in capsys.readouterr().err


def test_slurm_poll_and_grace_reach_the_sweep_and_bad_ones_are_usage_errors(sweep_file, tmp_path, capsys, monkeypatch):
    from graphnorm import sweep as sweeps

    seen = {}

    def fake_run_sweep(sweep, out, *, slurm, **kwargs):
        seen["slurm"] = slurm
        raise KeyboardInterrupt  # stop before anything runs

    monkeypatch.setattr(sweeps, "run_sweep", fake_run_sweep)
    args = ["sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--executor", "slurm"]
    main([*args, "--slurm-poll", "2.5", "--slurm-grace", "4"])
    assert (seen["slurm"].poll_s, seen["slurm"].grace_s) == (2.5, 4.0)
    capsys.readouterr()
    for flag, value in [("--slurm-poll", "0"), ("--slurm-grace", "-1"), ("--slurm-poll", "soon")]:
        with pytest.raises(SystemExit) as exit_info:
            main([*args, flag, value])
        assert exit_info.value.code == 2
        assert f"argument {flag}" in capsys.readouterr().err
