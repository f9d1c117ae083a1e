"""graphnorm.files' locks: :func:`hold_lock` (refuses a held lock), :func:`wait_for_lock` (waits for it) and the one
way they end, :func:`release_lock`. A process forked while a lock is held (a data loader's worker) shares the lock's
descriptor: the owner's release must free the lock however long that process lives, and that process leaving the
lock's block must not free the lock its parent still holds. The data root's dataset lock ends the same way."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from graphnorm import files
from graphnorm.data.root import DataRootError, dataset_lock
from graphnorm.files import (
    NoFileLocksError,
    OutputBusyError,
    OutputPathError,
    held_by_another_writer,
    hold_lock,
    release_lock,
    wait_for_lock,
)


def _fork_waiting_child() -> tuple[int, int]:
    """A forked child that lives until its parent closes the returned pipe end, then leaves without clean-up:
    (its pid, the parent's end of the pipe)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    return child, write


def test_a_held_lock_is_refused_and_free_again_on_leaving(tmp_path: Path) -> None:
    path, busy = tmp_path / "run.lock", "busy: another run holds it"
    with hold_lock(path, busy):
        assert held_by_another_writer(path)
        with pytest.raises(OutputBusyError, match=busy), hold_lock(path, busy):
            pass
    assert path.is_file() and not held_by_another_writer(path)


def test_wait_for_lock_waits_for_the_holder(tmp_path: Path) -> None:
    path, order = tmp_path / "turn.lock", []
    first, owner = wait_for_lock(path), os.getpid()

    def second() -> None:
        fd = wait_for_lock(path)  # a new open file: waits for the first one's flock
        order.append("second")
        release_lock(fd, owner)

    waiter = threading.Thread(target=second)
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive() and order == []  # still waiting
    order.append("first released")
    release_lock(first, owner)
    waiter.join(timeout=30)
    assert order == ["first released", "second"]


def test_wait_for_lock_refuses_a_path_that_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "folder.lock").mkdir()
    with pytest.raises(OutputPathError, match="is a directory"):
        wait_for_lock(tmp_path / "folder.lock")
    os.mkfifo(tmp_path / "pipe.lock")
    with pytest.raises(OutputPathError, match="not a regular file"):
        wait_for_lock(tmp_path / "pipe.lock")  # not blocked waiting for a reader
    (tmp_path / "target").write_text("kept")
    (tmp_path / "link.lock").symlink_to(tmp_path / "target")
    with pytest.raises(OutputPathError, match="symbolic link"):
        wait_for_lock(tmp_path / "link.lock")
    assert (tmp_path / "target").read_text() == "kept"


def test_leaving_hold_lock_frees_it_while_a_child_forked_inside_lives(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    with hold_lock(path, "busy"):
        child, write = _fork_waiting_child()
    try:
        assert not held_by_another_writer(path)  # the child still has the descriptor open
    finally:
        os.close(write)
        os.waitpid(child, 0)


def test_a_child_leaving_the_block_keeps_its_parents_lock(tmp_path: Path) -> None:
    """A process forked inside ``hold_lock`` that runs on out of the block (as the code after a fork does) neither
    unlocks nor removes the lock file its parent still holds."""
    path, child, seen = tmp_path / "run.lock", -1, {}
    try:
        with hold_lock(path, "busy", remove=True):
            child = os.fork()
            if child:
                _, status = os.waitpid(child, 0)  # the child has left the block and ended
                seen = {"exit": os.waitstatus_to_exitcode(status), "held": held_by_another_writer(path)}
                seen["there"] = path.is_file()
    finally:
        if child == 0:
            os._exit(0)
    assert seen == {"exit": 0, "held": True, "there": True}
    assert not path.exists()  # the owner's leaving removes it


def test_a_dataset_lock_is_free_on_leaving_while_a_forked_child_lives(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    with dataset_lock(tmp_path / "root", "Planetoid/Cora"):
        child, write = _fork_waiting_child()
    try:
        lock = tmp_path / "root" / ".Planetoid_Cora.lock"
        assert lock.is_file() and not held_by_another_writer(lock)
    finally:
        os.close(write)
        os.waitpid(child, 0)


def test_release_lock_only_unlocks_in_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "turn.lock"
    fd = wait_for_lock(path)
    duplicate = os.dup(fd)  # the same open file, as a forked child would share it
    release_lock(duplicate, owner=os.getpid() + 1)  # not the owner: closes its descriptor, keeps the lock
    assert held_by_another_writer(path)
    release_lock(fd, owner=os.getpid())
    assert not held_by_another_writer(path)


@pytest.fixture
def no_file_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    """flock failing as it does on a file system without locks (an NFS mount without lockd: none can be mounted
    here)."""

    def flock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(files.fcntl, "flock", flock)


def test_a_file_system_without_locks_is_named_as_such(tmp_path: Path, no_file_locks: None) -> None:
    path = tmp_path / "turn.lock"
    with pytest.raises(NoFileLocksError, match=f"{path} cannot be locked: its file system has no file locks"):
        wait_for_lock(path)
    what = "the sweep's lock file"
    with (
        pytest.raises(NoFileLocksError, match=f"{what} .* has no file locks") as refused,
        hold_lock(tmp_path / "run.lock", "busy", what),
    ):
        pass
    assert not isinstance(refused.value, OutputBusyError)  # not "another writer holds it"
    (tmp_path / "root").mkdir()
    advice = "has no file locks .*set \\$GRAPHNORM_DATA to a folder on a local disk"
    with pytest.raises(DataRootError, match=advice) as refused, dataset_lock(tmp_path / "root", "Planetoid/Cora"):
        pass
    assert str(refused.value).count("local disk") == 1  # the data root's advice, not the lock's as well


def test_other_flock_errors_are_not_taken_for_a_file_system_without_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def flock(fd: int, operation: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(files.fcntl, "flock", flock)
    with pytest.raises(OSError, match="Input/output error") as raised:
        wait_for_lock(tmp_path / "turn.lock")
    assert not isinstance(raised.value, NoFileLocksError)
