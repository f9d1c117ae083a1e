"""Symbolic links planted in the data root or the mirror never make graphnorm reach outside them.

Each test plants a link, runs seeding (:func:`seed_from_mirror`) or locking (:func:`dataset_lock`), and checks an
"outside" folder afterwards: no file created, written or copied from there, no permission changed. Seeding and
locking refuse such a link with one line naming it; links inside the mirror that stay inside it still work. Hard
links keep their mode, named pipes (in the mirror, or at the lock's place) never make seeding or locking hang.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from graphnorm.data import load_dataset
from graphnorm.data.root import ENV_MIRROR, DataRootError, dataset_lock, mirror_root, seed_from_mirror
from graphnorm.files import temporary_path

CORA = "Planetoid/Cora"
REQUIRED = ["raw/ind.cora.x", "raw/ind.cora.y"]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside root and mirror holding a read-only file and a read-only folder, to watch afterwards."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret").write_text("not for the data root")
    (folder / "secret").chmod(0o400)
    (folder / "private").mkdir()
    (folder / "private").chmod(0o500)
    return folder


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``folder`` (itself included) with its mode and, for files, its content."""
    paths = [folder, *sorted(folder.rglob("*"))]
    return {str(p): (p.lstat().st_mode, p.read_bytes() if p.is_file() else None) for p in paths}


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small read-only-moded mirror holding two raw Cora files, named by ``$GRAPHNORM_DATA_MIRROR``."""
    folder = tmp_path / "mirror"
    raw = folder / CORA / "raw"
    raw.mkdir(parents=True)
    for name in ("ind.cora.x", "ind.cora.y"):
        (raw / name).write_text(name)
    monkeypatch.setenv(ENV_MIRROR, str(folder))
    return folder


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder


def refused(link: Path, call) -> str:
    """The one-line error ``call()`` raises, checked to name ``link``."""
    with pytest.raises(DataRootError) as error:
        call()
    message = str(error.value)
    assert len(message.splitlines()) == 1 and str(link) in message and "symbolic link" in message, message
    return message


# --- the data root --------------------------------------------------------------------------------------------


def test_symlinked_dataset_folder_is_refused(root: Path, mirror: Path, outside: Path) -> None:
    """``root/Planetoid`` -> outside: seeding copied the raw files there and chmod-ed the outside files."""
    before = snapshot(outside)
    (root / "Planetoid").symlink_to(outside, target_is_directory=True)
    refused(root / "Planetoid", lambda: seed_from_mirror(root, CORA, REQUIRED))
    assert snapshot(outside) == before


def test_symlinked_raw_folder_is_refused(root: Path, mirror: Path, outside: Path) -> None:
    before = snapshot(outside)
    (root / CORA).mkdir(parents=True)
    (root / CORA / "raw").symlink_to(outside, target_is_directory=True)
    refused(root / CORA / "raw", lambda: seed_from_mirror(root, CORA, REQUIRED))
    assert snapshot(outside) == before


@pytest.mark.parametrize("target", ["secret", "private"])
def test_symlink_inside_the_dataset_folder_is_refused(root: Path, mirror: Path, outside: Path, target: str) -> None:
    """A link to an outside file or folder among the dataset's files: making the copy writable chmod-ed its
    target (0o400 became 0o600)."""
    before = snapshot(outside)
    (root / CORA / "raw").mkdir(parents=True)
    (root / CORA / "raw" / "notes").symlink_to(outside / target)
    refused(root / CORA / "raw" / "notes", lambda: seed_from_mirror(root, CORA, REQUIRED))
    assert snapshot(outside) == before


def test_planted_temporary_file_link_is_refused(root: Path, mirror: Path, outside: Path) -> None:
    """A link named like the copy's temporary file (``.<name>.<pid>.tmp``): the copy wrote through it."""
    raw = root / CORA / "raw"
    raw.mkdir(parents=True)
    (outside / "secret").chmod(0o600)
    before = snapshot(outside)
    link = temporary_path(raw / "ind.cora.x")
    link.symlink_to(outside / "secret")
    refused(link, lambda: seed_from_mirror(root, CORA, REQUIRED))
    assert snapshot(outside) == before


@pytest.mark.filterwarnings("ignore:Weights only load failed")
def test_complete_dataset_behind_a_symlink_is_refused(root: Path, outside: Path, data_root: Path) -> None:
    """Nothing to copy, but loading would write ``processed/`` through the link: refused before loading too."""
    real_mirror = mirror_root()
    assert real_mirror is not None
    shutil.copytree(real_mirror / CORA / "raw", outside / "Cora" / "raw")
    before = snapshot(outside)
    (root / "Planetoid").mkdir()
    (root / CORA).symlink_to(outside / "Cora", target_is_directory=True)
    refused(root / CORA, lambda: load_dataset("cora", root))
    assert snapshot(outside) == before and not (outside / "Cora" / "processed").exists()


def test_link_inside_the_root_that_stays_inside_is_still_refused(root: Path, mirror: Path) -> None:
    """Seeding and locking write through no link at all, also one that stays in the root (the error says so)."""
    (root / "elsewhere").mkdir()
    (root / "Planetoid").symlink_to(root / "elsewhere", target_is_directory=True)
    refused(root / "Planetoid", lambda: seed_from_mirror(root, CORA, REQUIRED))
    assert list((root / "elsewhere").iterdir()) == []


# --- the lock -------------------------------------------------------------------------------------------------


def test_symlinked_lock_file_is_refused(root: Path, outside: Path) -> None:
    """The lock opened its path for appending, so a dangling link created the outside file it names."""
    before = snapshot(outside)
    link = root / ".Planetoid_Cora.lock"
    link.symlink_to(outside / "created-by-the-lock")

    def lock() -> None:
        with dataset_lock(root, CORA):
            pass

    refused(link, lock)
    assert snapshot(outside) == before


def test_lock_through_a_symlinked_dataset_folder_is_refused(root: Path, outside: Path) -> None:
    """The loaders write into the dataset folder under the lock (the SMILES cache, ``processed/``), so the lock
    refuses a dataset folder that leads outside the root."""
    before = snapshot(outside)
    (root / "smiles").symlink_to(outside, target_is_directory=True)

    def lock() -> None:
        with dataset_lock(root, "smiles/mols-0123"):
            pass

    refused(root / "smiles", lock)
    assert snapshot(outside) == before


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail instead of hanging: a SIGALRM after 5 s raises TimeoutError in the test."""

    def fail(*_) -> None:
        raise TimeoutError("hung for 5 s")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_lock_path_that_is_not_a_file_is_refused(root: Path, alarm: None, kind: str) -> None:
    """A named pipe at the lock's path made opening it hang forever; a folder there silently disabled the lock."""
    lock_path = root / ".Planetoid_Cora.lock"
    os.mkfifo(lock_path) if kind == "fifo" else lock_path.mkdir()
    with pytest.raises(DataRootError) as error, dataset_lock(root, CORA):
        pass
    message = str(error.value)
    assert len(message.splitlines()) == 1 and str(lock_path) in message and "delete" in message


def test_lock_still_works_and_read_only_root_still_skips_it(root: Path) -> None:
    with dataset_lock(root, CORA):
        assert stat.S_ISREG((root / ".Planetoid_Cora.lock").lstat().st_mode)
    if os.geteuid() != 0:  # root ignores a folder's modes; tests/data/test_data_cache.py covers a read-only mount
        root.chmod(0o555)
        try:
            with dataset_lock(root, "ZINC"):
                pass
        finally:
            root.chmod(0o755)


# --- the mirror -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["file", "raw-folder", "dataset-folder"])
def test_mirror_link_leading_outside_the_mirror_is_refused(root: Path, mirror: Path, outside: Path, where: str) -> None:
    """A link in the mirror to an outside file or folder: the copy brought the outside content into the root."""
    (outside / "secret").chmod(0o600)
    (outside / "raw").mkdir()
    (outside / "raw" / "ind.cora.x").write_text("outside content")
    raw = mirror / CORA / "raw"
    if where == "file":
        link = raw / "ind.cora.x"
        link.unlink()
        link.symlink_to(outside / "secret")
    elif where == "raw-folder":
        shutil.rmtree(raw)
        link = raw
        link.symlink_to(outside / "raw", target_is_directory=True)
    else:
        shutil.rmtree(mirror / "Planetoid")
        (mirror / "Planetoid").mkdir()
        link = mirror / CORA
        link.symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    refused(link, lambda: seed_from_mirror(root, CORA, REQUIRED))
    assert snapshot(outside) == before
    copied = [p.read_bytes() for p in root.rglob("*") if p.is_file()]
    assert b"not for the data root" not in copied and b"outside content" not in copied


def test_mirror_link_that_loops_is_refused(root: Path, mirror: Path) -> None:
    """A folder link in the mirror to its own parent: the copy recursed until the path was too long, and blamed
    the data root for it."""
    link = mirror / CORA / "raw" / "again"
    link.symlink_to(mirror / CORA, target_is_directory=True)
    message = refused(link, lambda: seed_from_mirror(root, CORA, REQUIRED))
    assert "loop" in message and "writable" not in message


def test_mirror_links_inside_the_mirror_are_copied_as_files(root: Path, mirror: Path) -> None:
    """A mirror that shares files between datasets by links inside itself still seeds: the root gets real files."""
    shared = mirror / "shared"
    shared.mkdir()
    raw = mirror / CORA / "raw"
    (raw / "ind.cora.y").rename(shared / "ind.cora.y")
    (raw / "ind.cora.y").symlink_to(Path("..", "..", "..", "shared", "ind.cora.y"))
    (raw / "ind.cora.x").chmod(0o444)
    raw.chmod(0o555)
    try:
        assert seed_from_mirror(root, CORA, REQUIRED)
    finally:
        raw.chmod(0o755)
    for name in ("ind.cora.x", "ind.cora.y"):
        copied = root / CORA / "raw" / name
        assert not copied.is_symlink() and copied.read_text() == name
        assert copied.stat().st_mode & stat.S_IWUSR
    assert (root / CORA / "raw").stat().st_mode & stat.S_IWUSR
    assert not seed_from_mirror(root, CORA, REQUIRED)  # nothing missing: no copy


def test_hard_link_in_the_dataset_folder_keeps_its_mode(root: Path, mirror: Path, outside: Path) -> None:
    """A hard link is no symbolic link but shares its mode with the outside file: making the copy writable turned
    the outside 0o400 file into 0o600. Files with other names elsewhere are left as they are."""
    before = snapshot(outside)
    (root / CORA / "raw").mkdir(parents=True)
    os.link(outside / "secret", root / CORA / "raw" / "notes")
    assert seed_from_mirror(root, CORA, REQUIRED)
    assert snapshot(outside) == before


def test_named_pipe_in_the_mirror_is_skipped(root: Path, mirror: Path, alarm: None) -> None:
    """Only folders and regular files are copied: reading a named pipe in the mirror hung the copy forever."""
    os.mkfifo(mirror / CORA / "raw" / "pipe")
    assert seed_from_mirror(root, CORA, REQUIRED)
    assert sorted(p.name for p in (root / CORA / "raw").iterdir()) == ["ind.cora.x", "ind.cora.y"]
