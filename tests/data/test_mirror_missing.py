"""``$GRAPHNORM_DATA_MIRROR`` naming no folder (a command copied to another machine) is ignored with one warning line:
with internet the loaders download, offline the error names the variable and what to do, and the command line shows
that error as one line, without a traceback, and exits non-zero."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch_geometric.io.fs as pyg_fs

from graphnorm.cli import main
from graphnorm.data import DatasetNotFoundError, load_dataset
from graphnorm.data.root import ENV_MIRROR, ENV_ROOT, mirror_root, mirror_status

REPO = Path(__file__).resolve().parents[2]
CORA_RAW = Path("Planetoid") / "Cora" / "raw"


def test_missing_mirror_is_ignored_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV_MIRROR, str(tmp_path / "nowhere"))
    with caplog.at_level(logging.WARNING, logger="graphnorm.data.root"):
        assert mirror_root() is None and mirror_root() is None
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and len(warnings[0].splitlines()) == 1  # once per process, one line
    assert ENV_MIRROR in warnings[0] and str(tmp_path / "nowhere") in warnings[0] and "downloaded" in warnings[0]
    assert "not a directory" in mirror_status() and "unset it" in mirror_status()


def test_missing_mirror_falls_back_to_the_download(
    tmp_path: Path, data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With internet (here: PyG's download replaced by a copy of the real raw files) Cora loads as without the
    variable."""
    source = mirror_root() / CORA_RAW
    monkeypatch.setenv(ENV_MIRROR, str(tmp_path / "nowhere"))

    def download(url: str, folder: str, *args, **kwargs) -> None:
        shutil.copy(source / url.rsplit("/", 1)[-1], folder)

    monkeypatch.setattr(pyg_fs, "cp", download)
    task = load_dataset("cora", tmp_path / "root")
    assert task.data.num_nodes == 2708 and (tmp_path / "root" / CORA_RAW).is_dir()


def test_missing_mirror_offline_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MIRROR, str(tmp_path / "nowhere"))
    monkeypatch.setattr(pyg_fs, "cp", lambda *args, **kwargs: (_ for _ in ()).throw(OSError("network unreachable")))
    with pytest.raises(DatasetNotFoundError) as error:
        load_dataset("cora", tmp_path / "root")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and f"{ENV_MIRROR} points to {tmp_path / 'nowhere'}" in message
    assert "not a directory" in message and ENV_ROOT in message


def test_cli_missing_mirror_offline_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv(ENV_ROOT, str(tmp_path / "root"))
    monkeypatch.setenv(ENV_MIRROR, str(tmp_path / "nowhere"))
    monkeypatch.delenv("GRAPHNORM_TRACEBACK", raising=False)
    monkeypatch.setattr(pyg_fs, "cp", lambda *args, **kwargs: (_ for _ in ()).throw(OSError("network unreachable")))
    status = main(["train", str(REPO / "experiments" / "runs" / "cora_gcn.yaml"), "epochs=1"])
    errors = capsys.readouterr().err.strip().splitlines()
    assert status != 0 and "Traceback" not in "\n".join(errors)
    assert len(errors) == 1 and errors[0].startswith("graphnorm train: error: dataset 'cora' not found")
    assert f"{ENV_MIRROR} points to {tmp_path / 'nowhere'}" in errors[0]
