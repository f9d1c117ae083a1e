"""graphnorm.files: the one atomic writer. A write that fails or a process that dies mid-write leaves the old
file intact (and, after a crash, only a temporary file that the folder's owner removes); every writer of the package
goes through it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from graphnorm.files import (
    atomic_write,
    atomic_write_text,
    is_temporary_file,
    remove_leftover_temporary_files,
    temporary_path,
)

PACKAGE = Path(__file__).resolve().parents[1] / "graphnorm"


def test_a_write_that_raises_midway_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    atomic_write_text(path, "a,b\n1,2\n")

    def half_then_fail(handle) -> None:
        handle.write(b"a,b\n3,")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, half_then_fail)
    assert path.read_text() == "a,b\n1,2\n"
    assert list(tmp_path.iterdir()) == [path]


def test_a_process_killed_mid_write_leaves_the_old_file_intact(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({"epoch": 1}, path)
    before = path.read_bytes()
    # The child writes half of a new checkpoint, then dies at once (no finally, no cleanup): a kill mid-write.
    child = f"""
import os, torch
from graphnorm.files import atomic_write
def half_then_die(handle):
    torch.save({{"epoch": 2, "weights": torch.ones(1000)}}, handle)
    handle.truncate(100)
    handle.flush()
    os._exit(9)
atomic_write({str(path)!r}, half_then_die)
"""
    result = subprocess.run([sys.executable, "-c", child], cwd=PACKAGE.parent, timeout=120)
    assert result.returncode == 9
    assert path.read_bytes() == before and torch.load(path, weights_only=True) == {"epoch": 1}
    leftovers = [p for p in tmp_path.iterdir() if p != path]
    assert len(leftovers) == 1 and is_temporary_file(leftovers[0]) and leftovers[0].stat().st_size == 100
    assert remove_leftover_temporary_files(tmp_path) == leftovers and list(tmp_path.iterdir()) == [path]


def test_the_new_content_replaces_the_old(tmp_path: Path) -> None:
    path = tmp_path / "state.pt"
    atomic_write(path, lambda handle: torch.save({"x": torch.arange(3)}, handle))
    atomic_write(path, lambda handle: torch.save({"x": torch.arange(5)}, handle))
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.arange(5))
    atomic_write_text(tmp_path / "note.md", "ü\n")
    assert (tmp_path / "note.md").read_bytes() == "ü\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["note.md", "state.pt"]


def test_temporary_names() -> None:
    path = Path("/x/runs.csv")
    assert temporary_path(path) == Path(f"/x/.runs.csv.{os.getpid()}.tmp") and is_temporary_file(temporary_path(path))
    assert not is_temporary_file(Path("notes.tmp")) and not is_temporary_file(Path(".runs.csv.tmp"))
    assert not is_temporary_file(Path(".write-check.abc.tmp"))


def test_no_other_module_of_mine_renames_files_into_place() -> None:
    """``os.replace`` appears only in the helper: every other writer goes through it."""
    callers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            is_attribute = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if is_attribute and node.value.id == "os" and node.attr in ("replace", "rename"):
                callers.add(str(path.relative_to(PACKAGE)))
    assert "files.py" in callers
    assert callers == {"files.py"}, callers
