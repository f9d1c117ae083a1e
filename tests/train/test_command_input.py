"""The commands' shared input checks, called directly: the hint that a YAML file belongs to the other command (the
path shell-quoted), and the refusal of an output file under the data root."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from graphnorm.train.command_input import (
    CommandError,
    check_is_run_values,
    check_is_sweep_file,
    check_outside_data_root,
    command_hint,
)


def test_hint_quotes_a_path_for_the_shell() -> None:
    assert command_hint("train", Path("my runs/a.yaml")) == "graphnorm train 'my runs/a.yaml'"
    assert command_hint("sweep", Path("s.yaml")) == "graphnorm sweep s.yaml"


def test_a_run_config_given_to_sweep_and_a_sweep_config_given_to_train(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"dataset": "cora", "epochs": 1}))
    with pytest.raises(CommandError, match=r"single-run config \(RunConfig keys such as dataset, epochs; .*train "):
        check_is_sweep_file(run)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "s", "grid": {"seed": [0]}}))
    check_is_sweep_file(sweep)  # a sweep: no hint
    with pytest.raises(CommandError, match=r"is a sweep config \(it has grid\), not a single run; .*graphnorm sweep "):
        check_is_run_values(sweep, {"name": "s", "grid": {"seed": [0]}})
    check_is_run_values(run, {"dataset": "cora"})


def test_an_existing_file_under_the_data_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "cora").mkdir(parents=True)
    inside = root / "cora" / "raw.bin"
    inside.write_bytes(b"")
    with pytest.raises(ValueError, match="--out .* is a file under the data root"):
        check_outside_data_root(inside, str(root), f"--out {inside}")
    check_outside_data_root(root / "cora" / "new.csv", str(root), "--out new")  # not there yet: nothing to clobber
    check_outside_data_root(tmp_path / "elsewhere.csv", str(root), "--out elsewhere")
