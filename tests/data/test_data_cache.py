"""The data root as a broken machine or a hostile mirror sees it: only raw files come from the mirror, two processes
preparing one dataset at once take turns, and an unusable root (a file, read-only, full, damaged processed files) is
reported in one line that names it and says what to do."""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from graphnorm.config import RunConfig
from graphnorm.data import load_dataset
from graphnorm.data.graphormer_preprocess import preprocess_dataset
from graphnorm.data.root import ENV_MIRROR, ENV_ROOT, DataRootError, mirror_root
from graphnorm.train.loop import prepare_task

CORA_RAW = "Planetoid/Cora/raw"


@pytest.fixture
def mirror(data_root: Path) -> Path:
    """The offline mirror the session uses (conftest sets it)."""
    path = mirror_root()
    assert path is not None and (path / CORA_RAW).is_dir()
    return path


def cora_mirror(tmp_path: Path, mirror: Path) -> Path:
    """A mirror holding only Cora's raw files, in a folder this test may change."""
    planted = tmp_path / "mirror"
    shutil.copytree(mirror / CORA_RAW, planted / CORA_RAW)
    return planted


@pytest.mark.filterwarnings("ignore:Weights only load failed")  # PyG's warning before it retries unsafely
def test_mirror_processed_files_are_never_copied(tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A processed file in a mirror would be unpickled by PyG (it retries with weights_only=False): only raw files
    are copied, so the processed files are always made locally from them."""
    planted = cora_mirror(tmp_path, mirror)
    marker = tmp_path / "code-ran"

    class RunsCode:
        def __reduce__(self):
            return (subprocess.check_call, (["touch", str(marker)],))

    processed = planted / "Planetoid" / "Cora" / "processed"
    processed.mkdir()
    torch.save({"x": RunsCode()}, processed / "data.pt")
    for name in ("pre_transform.pt", "pre_filter.pt"):
        torch.save("None", processed / name)
    torch.save({"x": RunsCode()}, planted / "Planetoid" / "Cora" / "raw" / "stray.pt")
    monkeypatch.setenv(ENV_MIRROR, str(planted))
    root = tmp_path / "root"
    task = load_dataset("cora", root)
    assert task.data.num_nodes == 2708 and not marker.exists()
    assert not (root / "Planetoid" / "Cora" / "raw" / "stray.pt").exists()
    made_here = torch.load(root / "Planetoid" / "Cora" / "processed" / "data.pt", weights_only=True)
    assert made_here is not None


def _load_and_fingerprint(root: str, barrier, results, with_graphormer_cache: bool) -> None:
    """Child process: wait for the other, load Cora (and the Graphormer cache of a ZINC subset), report fingerprints."""
    torch.set_num_threads(1)
    barrier.wait()
    data = load_dataset("cora", root).data
    fingerprint = [hashlib.sha1(data.x.numpy().tobytes() + data.edge_index.numpy().tobytes()).hexdigest()]
    if with_graphormer_cache:
        zinc = prepare_task(RunConfig(dataset="zinc", limit_graphs=60, data_root=os.environ["ZINC_ROOT"]))
        graphs = preprocess_dataset(zinc.train, 3, cache_path=Path(root) / "graphormer_cache.pt")
        paths = torch.cat([g.edge_path.reshape(-1) for g in graphs])
        fingerprint.append(hashlib.sha1(paths.numpy().tobytes()).hexdigest())
    results.put(fingerprint)


def test_two_processes_preparing_one_dataset_at_once(
    tmp_path: Path, data_root: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes start at once on a fresh root: both copy-and-process Cora (and, in the first round, write one
    Graphormer cache file); both succeed with identical data and leave no partial or temporary file behind. Four
    rounds: without a lock, 6 of 10 such rounds failed (one process read the other's half-written data.pt)."""
    monkeypatch.setenv(ENV_MIRROR, str(cora_mirror(tmp_path, mirror)))
    monkeypatch.setenv("ZINC_ROOT", str(data_root))  # ZINC is already processed there: only its cache is raced
    context = multiprocessing.get_context("fork")
    for round_ in range(4):
        root = tmp_path / f"root{round_}"
        barrier, results = context.Barrier(2), context.Queue()
        args = (str(root), barrier, results, round_ == 0)
        children = [context.Process(target=_load_and_fingerprint, args=args) for _ in range(2)]
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=120)
        assert [child.exitcode for child in children] == [0, 0], f"round {round_}"
        assert results.get(timeout=5) == results.get(timeout=5)
        assert [p.name for p in root.rglob("*") if p.name.endswith(".tmp")] == []
        assert load_dataset("cora", root).data.num_nodes == 2708  # what they left reloads
    torch.load(tmp_path / "root0" / "graphormer_cache.pt", weights_only=True)


def test_data_root_that_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_a_folder = tmp_path / "data"
    not_a_folder.write_text("oops")
    monkeypatch.setenv(ENV_ROOT, str(not_a_folder))
    with pytest.raises(DataRootError) as error:
        load_dataset("cora")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and str(not_a_folder) in message and ENV_ROOT in message
    assert "not a directory" in message


@contextlib.contextmanager
def read_only_folder(path: Path) -> Iterator[Path]:
    """An empty folder that refuses writes, also to root (a read-only tmpfs; needs mount rights as root)."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], capture_output=True).returncode:
        pytest.skip("running as root without mount rights: no way to make a folder read-only")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def test_read_only_data_root(tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MIRROR, str(cora_mirror(tmp_path, mirror)))
    with read_only_folder(tmp_path / "readonly") as root:
        monkeypatch.setenv(ENV_ROOT, str(root))
        with pytest.raises(DataRootError) as error:
            load_dataset("cora")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and str(root) in message and ENV_ROOT in message
    assert "writable" in message


def test_full_disk_while_processing_leaves_no_partial_file(
    tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cora's raw files fit in 3 MB, its processed file does not: one clear error, and no half-written data.pt
    that a later load (with space freed) would fail on."""
    if os.geteuid() != 0:
        pytest.skip("needs a small tmpfs (mount rights) to fill a disk")
    monkeypatch.setenv(ENV_MIRROR, str(cora_mirror(tmp_path, mirror)))
    root = tmp_path / "small"
    root.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(root)], capture_output=True).returncode:
        pytest.skip("no mount rights")
    try:
        with pytest.raises(DataRootError) as error:
            load_dataset("cora", root)
        written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    finally:
        subprocess.run(["umount", "--lazy", str(root)], check=True)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "No space left" in message and str(root) in message
    assert "not found" not in message
    assert not any("processed" in name for name in written), written


@pytest.mark.parametrize("damage", ["truncated", "random-bytes"])
def test_damaged_processed_file_says_to_delete_processed(
    tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    monkeypatch.setenv(ENV_MIRROR, str(cora_mirror(tmp_path, mirror)))
    root = tmp_path / "root"
    load_dataset("cora", root)
    processed = root / "Planetoid" / "Cora" / "processed"
    data_file = processed / "data.pt"
    content = data_file.read_bytes()
    data_file.write_bytes(content[:10000] if damage == "truncated" else os.urandom(10000))
    with pytest.raises(DataRootError) as error:
        load_dataset("cora", root)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and str(processed) in message and "delete" in message
    assert "weights_only" not in message and "not found" not in message
    shutil.rmtree(processed)  # doing what the message says works
    assert load_dataset("cora", root).data.num_nodes == 2708


def test_mirror_without_the_dataset_names_dataset_root_and_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty_mirror = tmp_path / "mirror"
    empty_mirror.mkdir()
    monkeypatch.setenv(ENV_MIRROR, str(empty_mirror))
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("cora", tmp_path / "root")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "'cora'" in message
    assert str(tmp_path / "root") in message and str(empty_mirror / "Planetoid" / "Cora") in message


def test_unreadable_graphormer_cache_is_rebuilt(data_root: Path, tmp_path: Path) -> None:
    zinc = prepare_task(RunConfig(dataset="zinc", limit_graphs=30, data_root=str(data_root)))
    cache = tmp_path / "graphormer_val.pt"
    fresh = preprocess_dataset(zinc.val, 3, cache_path=cache)
    cache.write_bytes(cache.read_bytes()[:500])  # a kill or a full disk while it was written (before atomic saves)
    with pytest.warns(UserWarning, match="graphormer_val.pt"):
        again = preprocess_dataset(zinc.val, 3, cache_path=cache)
    assert all(torch.equal(a.edge_path, b.edge_path) for a, b in zip(fresh, again))
    torch.load(cache, weights_only=True)  # rewritten whole


def test_graphormer_cache_in_a_read_only_folder_is_skipped(data_root: Path, tmp_path: Path) -> None:
    """A read-only data root that already holds the processed dataset still serves Graphormer runs: the cache that
    cannot be written is skipped with a warning naming it (it used to raise from torch's zip writer)."""
    zinc = prepare_task(RunConfig(dataset="zinc", limit_graphs=30, data_root=str(data_root)))
    expected = preprocess_dataset(zinc.val, 3)
    written = "could not write the Graphormer cache .*graphormer_val.pt"
    with read_only_folder(tmp_path / "readonly") as folder, pytest.warns(UserWarning, match=written):
        graphs = preprocess_dataset(zinc.val, 3, cache_path=folder / "graphormer_val.pt")
    assert all(torch.equal(a.spatial_pos, b.spatial_pos) for a, b in zip(expected, graphs))


def test_incomplete_mirror_names_the_missing_raw_file(
    tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = cora_mirror(tmp_path, mirror)
    (planted / CORA_RAW / "ind.cora.graph").unlink()
    monkeypatch.setenv(ENV_MIRROR, str(planted))
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("cora", tmp_path / "root")
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "raw/ind.cora.graph" in message and str(planted) in message
