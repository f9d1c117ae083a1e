"""Reading and writing files safely: atomic writes, writable-folder checks, clean-up of interrupted writes, and
strict YAML reading.

Every file graphnorm writes for later reading (sweep tables and results, checkpoints, model files, dataset caches)
goes through :func:`atomic_write`: the new content goes to ``.<name>.<pid>.tmp`` beside the target, is flushed to
disk, and replaces the target by ``os.replace``, so a reader sees the old file or the new one, never a partial one.
A killed writer leaves at most the temporary file, which :func:`remove_leftover_temporary_files` deletes. A target
whose name is too long for that pattern gets a shortened, hashed stem (:func:`temporary_stem`).

A command never writes over a file it reads: :func:`check_not_an_input` compares an output path with the inputs by
resolved path and by file identity (symlinks, ``./x`` against ``x``, hard links).

YAML that users write is read by :func:`load_yaml_file` / :func:`parse_yaml`: ``yaml.SafeLoader`` that refuses a
repeated key, with every problem a one-line ``ValueError`` naming file, line and column.
"""

from __future__ import annotations

import glob
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import yaml

NAME_MAX = 255  # bytes in one file name on the common file systems (ext4, xfs, btrfs, APFS, tmpfs)
PID_SPACE = 10  # bytes kept in a temporary name for the ".<pid>" part (pid_max is at most 4194304 on Linux)


def name_max(folder: Path) -> int:
    """The longest file name, in bytes, that ``folder`` (or its nearest existing parent) accepts."""
    for candidate in (folder, *folder.parents):
        if candidate.is_dir():
            try:
                return min(os.pathconf(candidate, "PC_NAME_MAX"), NAME_MAX)
            except (OSError, ValueError, AttributeError):
                break
    return NAME_MAX


def temporary_stem(path: Path) -> str:
    """``.<name>`` of ``path``'s temporary file, or, when ``.<name>.<pid>.tmp`` could exceed the folder's name limit,
    ``.<start of name>~<16 hex digits of its sha256>``: the same stem for the same target, always short enough."""
    stem = f".{path.name}"
    limit = name_max(path.parent) - PID_SPACE - len(".tmp")
    if len(stem.encode("utf-8")) <= limit:
        return stem
    digest = hashlib.sha256(path.name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    start = stem.encode("utf-8")[: limit - len(digest) - 1].decode("utf-8", "ignore")
    return f"{start}~{digest}"


def temporary_path(path: Path) -> Path:
    """``.<name>.<pid>.tmp`` beside ``path`` (the stem of :func:`temporary_stem`): where :func:`atomic_write` writes
    before renaming."""
    return path.with_name(f"{temporary_stem(path)}.{os.getpid()}.tmp")


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


def remove_leftover_temporary_files(
    folder: str | os.PathLike, name: str | None = None, keep_live_writers: bool = False
) -> list[Path]:
    """Delete what interrupted :func:`atomic_write` calls left in ``folder``; the removed paths.

    ``name``: only the temporary files of that target. ``keep_live_writers``: leave the files whose writing process
    still exists (:func:`pid_alive`); without it, call this only when no writer of the folder can be running (e.g.
    under the folder's lock).
    """
    removed = []
    folder = Path(folder)
    stem = temporary_stem(folder / name) if name is not None else None
    for path in folder.glob(f"{glob.escape(stem) if stem is not None else '.*'}.*.tmp"):
        if not (path.is_file() and is_temporary_file(path)):
            continue
        if stem is not None and path.name.rsplit(".", 2)[0] != stem:
            continue
        if keep_live_writers and pid_alive(int(path.name.rsplit(".", 2)[1])):
            continue
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (also when another user owns it): the owner of a lock or temporary file."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def ensure_writable_dir(path: str | os.PathLike, what: str) -> None:
    """Create folder ``path`` (and its parents) and write a probe file in it, before any long work whose output
    would be lost; ``ValueError`` in one line naming ``what`` (e.g. ``--out OUT``) otherwise."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} cannot be written: {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check.", suffix=".tmp"):
            pass
    except OSError as e:
        raise ValueError(f"{what} cannot be written: {e.strerror or e} ({path})") from None


def check_name_fits(path: Path, what: str) -> None:
    """``ValueError`` in one line naming ``what`` when ``path``'s file name is longer than its folder accepts."""
    size, limit = len(path.name.encode("utf-8", "surrogateescape")), name_max(path.parent)
    if size > limit:
        raise ValueError(
            f"{what} cannot be written: its file name {path.name[:40]}... is {size} bytes, more than the {limit} its "
            "folder accepts; give a shorter name"
        )


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same resolved path (symlinks, ``./x`` and ``x``), or, when
    both exist, the same file (hard links, bind mounts)."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): a file about to be created is no input
        return False


def check_not_an_input(out: str | os.PathLike, inputs: dict[str, str | os.PathLike | None], what: str) -> None:
    """``ValueError`` in one line when output ``out`` (named ``what``, e.g. ``--out x.csv``) is one of ``inputs``
    (description -> path; ``None`` paths are skipped): writing there would destroy a file the command reads."""
    for description, path in inputs.items():
        if path is not None and same_file(out, path):
            raise ValueError(
                f"{what} is {description} ({path}), which this command reads; writing there would replace it: give "
                "another output file"
            )


# --- strict YAML -----------------------------------------------------------------------------------------------


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping lists the same key twice."""


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys in a mapping (merge keys ``<<`` keep their meaning)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if duplicate:
                raise DuplicateKeyError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _one_line(error: yaml.YAMLError, source: str) -> str:
    """A YAML error as one line: ``source:line:column: problem``."""
    mark = getattr(error, "problem_mark", None)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    if isinstance(error, DuplicateKeyError):
        return f"{where}: {error.problem} (each key may appear once per mapping)"
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{where}: YAML syntax error: {problem}"


def parse_yaml(text: str, source: str = "<text>") -> Any:
    """``text`` parsed by :class:`StrictLoader`; ``ValueError`` in one line naming ``source``, line and column."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except yaml.YAMLError as e:
        raise ValueError(_one_line(e, source)) from None


def load_yaml_file(path: str | Path, what: str = "config") -> Any:
    """The parsed content of the YAML file ``path`` (``None`` for an empty file).

    ``FileNotFoundError`` if it does not exist; ``ValueError`` (one line naming ``what`` and the file) if it is a
    directory, cannot be read, is not UTF-8 text, or is not valid YAML (with line and column), or repeats a key.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory, not a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise ValueError(f"{what} {path} cannot be read: {reason}") from None
    return parse_yaml(text, str(path))
