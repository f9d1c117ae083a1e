"""A SMILES run's id hashes the CSV's content, not its path: an edited file is a new run (a resumed
sweep re-runs it instead of reusing the old results), the same file elsewhere is the same run (the path says where
data lives, like ``data_root``); every other dataset's run ids are what they were."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from graphnorm.config import RunConfig, config_run_id
from graphnorm.data import dataset_spec

ROWS = [["CCO", 0], ["CCN", 1], ["c1ccccc1", 0], ["CC(=O)O", 1]]


def write_csv(path: Path, rows: list[list[object]]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles", "y"])
        writer.writerows(rows)
    return path


def smiles_config(path: Path, **kwargs: object) -> RunConfig:
    return RunConfig.from_dict(
        {"dataset": "smiles", "dataset_kwargs": {"path": str(path), "target_columns": ["y"], **kwargs}}
    )


def test_editing_the_csv_in_place_changes_the_run_id(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "mols.csv", ROWS)
    before = config_run_id(smiles_config(path))
    assert config_run_id(smiles_config(path)) == before  # stable
    write_csv(path, ROWS[:-1] + [["CC(=O)O", 0]])  # one label edited: same name, same size
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))  # even with an unchanged timestamp
    assert config_run_id(smiles_config(path)) != before


def test_an_edit_right_after_hashing_is_seen(tmp_path: Path) -> None:
    """Within one timestamp tick an edit of the same size keeps the file's stat: the digest is not remembered then."""
    path = write_csv(tmp_path / "mols.csv", ROWS)
    first = config_run_id(smiles_config(path))
    stat = path.stat()
    write_csv(path, ROWS[:-1] + [["CC(=O)O", 0]])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the tick did not advance
    assert config_run_id(smiles_config(path)) != first


def test_same_content_at_another_path_is_the_same_run(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "mols.csv", ROWS)
    (tmp_path / "moved").mkdir()
    copy = Path(shutil.copy(path, tmp_path / "moved" / "renamed.csv"))
    assert config_run_id(smiles_config(copy)) == config_run_id(smiles_config(path))
    # the other options still make other runs
    assert config_run_id(smiles_config(path, split="random")) != config_run_id(smiles_config(path))


def test_the_identity_is_the_options_with_the_files_sha256_for_its_path(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "mols.csv", ROWS)
    options = {"path": str(path), "target_columns": ["y"], "split": "random"}
    identity = dataset_spec("smiles").identity(options)
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    assert identity == {"target_columns": ["y"], "split": "random", "sha256": sha256}
    # the run id is the documented hash of the non-default values, with the identity for dataset_kwargs
    config = smiles_config(path, split="random")
    values = {"dataset": "smiles", "dataset_kwargs": identity}
    digest = hashlib.sha1(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:10]
    assert config_run_id(config) == f"none-L2-s0-{digest}"


def test_a_missing_csv_is_named_when_the_run_id_is_asked(tmp_path: Path) -> None:
    config = smiles_config(tmp_path / "gone.csv")
    with pytest.raises(FileNotFoundError, match=r"gone\.csv.*dataset_kwargs\.path"):
        config_run_id(config)


def test_other_datasets_keep_their_run_ids() -> None:
    """Ids recorded before the identity hook (old sweep folders must still resume)."""
    assert all(dataset_spec(name).identity is None for name in ("cora", "zinc", "molhiv", "texas"))
    assert config_run_id(RunConfig()) == "none-L2-s0-bf21a9e8fb"
    old = {"dataset": "texas", "split": 3, "norm": "contranorm", "num_layers": 8, "seed": 2}
    values = {key: value for key, value in old.items() if key not in ("norm", "num_layers", "seed")}
    values.update(norm="contranorm", num_layers=8, seed=2)
    digest = hashlib.sha1(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:10]
    assert config_run_id(RunConfig.from_dict(old)) == f"contranorm-L8-s2-{digest}"
