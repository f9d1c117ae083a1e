"""One way to write a file atomically: readers (and a resumed run) see the old file or the new one, never a partial
one. Every file graphnorm writes for later reading goes through :func:`atomic_write`: sweep tables and results
(:mod:`graphnorm.sweep_tables`), checkpoints and model files (:mod:`graphnorm.checkpoints`), dataset caches.

The new content goes to ``.<name>.<pid>.tmp`` beside the target (:func:`temporary_path`), is flushed to disk
(``fsync``), and replaces the target by ``os.replace`` (atomic on POSIX and Windows within one file system). Any
error removes the temporary file and propagates, the old target intact; a process killed mid-write leaves at most
the temporary file, which the owners of a folder remove on their next start (:func:`remove_leftover_temporary_files`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def temporary_path(path: Path) -> Path:
    """``.<name>.<pid>.tmp`` beside ``path``: where :func:`atomic_write` writes before renaming."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Replace ``path`` by what ``write(handle)`` writes to a binary file handle (e.g. ``torch.save(obj, handle)``),
    atomically (module docstring). The folder must exist."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():  # (unlink of a missing file still fails on a read-only file system)
            tmp.unlink()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write` of ``text`` in UTF-8."""
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def is_temporary_file(path: Path) -> bool:
    """Whether ``path`` is named like a temporary file of :func:`atomic_write` (``.<name>.<pid>.tmp``)."""
    parts = path.name.rsplit(".", 2)
    return path.name.startswith(".") and len(parts) == 3 and parts[1].isdigit() and parts[2] == "tmp"


def remove_leftover_temporary_files(folder: str | os.PathLike) -> list[Path]:
    """Delete what interrupted :func:`atomic_write` calls left in ``folder``; the removed paths.

    Call it only when no writer of the folder can be running (e.g. under the folder's lock).
    """
    removed = []
    for path in Path(folder).glob(".*.*.tmp"):
        if path.is_file() and is_temporary_file(path):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
