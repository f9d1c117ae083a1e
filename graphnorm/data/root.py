"""Where datasets live: the data root, and seeding it from an offline mirror.

The root comes from the ``root`` argument, else ``$GRAPHNORM_DATA``, else ``~/.cache/graphnorm/data``
(:func:`resolve_root`). With internet, the standard loaders download into it as usual. Offline machines can point
``$GRAPHNORM_DATA_MIRROR`` at a read-only folder laid out as the loaders expect (``Planetoid/Cora/raw``,
``ZINC/raw``, ``ogb/ogbg_molhiv``...): missing raw files are copied from it into the writable root before loading
(:func:`seed_from_mirror`), so the loaders' ``processed/`` files are never written into the mirror. Two processes
preparing one dataset at once take turns (:func:`dataset_lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from graphnorm.files import atomic_write

ENV_ROOT = "GRAPHNORM_DATA"
ENV_MIRROR = "GRAPHNORM_DATA_MIRROR"


class DataRootError(OSError):
    """The data root cannot be used: not a directory, not writable, full, or holding damaged processed files."""


def default_root() -> Path:
    """``$XDG_CACHE_HOME/graphnorm/data``, ``~/.cache/graphnorm/data`` without it."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "graphnorm" / "data"


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The data root, created if missing: ``root`` argument, else ``$GRAPHNORM_DATA``, else :func:`default_root`.

    Raises:
        DataRootError: the path is not a directory or cannot be created.
    """
    path = Path(root) if root is not None else Path(os.environ.get(ENV_ROOT) or default_root())
    path = path.expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        problem = "is not a directory" if path.exists() else f"cannot be created ({error.strerror})"
        raise DataRootError(f"data root {path} {problem}; {_root_advice(root)}") from None
    return path


def _root_advice(root: str | os.PathLike | None) -> str:
    """Where the root came from, and how to choose another, for an error message."""
    source = "the root argument" if root is not None else f"${ENV_ROOT}" if os.environ.get(ENV_ROOT) else "the default"
    return f"it comes from {source}: set ${ENV_ROOT} (or data_root) to a writable directory"


def unwritable_root_error(root: Path, doing: str, error: OSError) -> DataRootError:
    """The one-line error for a write that failed under the data root (read-only, full disk, no permission)."""
    where, reason = error.filename or root, error.strerror or error
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        _, where, reason = error.args[0][0]  # copytree gathers (source, target, reason) per failed file
    return DataRootError(
        f"cannot write {where} while {doing} ({reason}): the data root {root} must be writable "
        f"and have free space; free space there, or set ${ENV_ROOT} to another directory"
    )


@contextlib.contextmanager
def dataset_lock(root: Path, relative: str) -> Iterator[None]:
    """Hold an exclusive lock on dataset ``relative`` under ``root`` while it is copied and processed.

    Two processes preparing one dataset at once would otherwise read each other's half-written files. A root where
    the lock file cannot be created is read-only, so nobody writes there and nothing needs guarding.
    """
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(open(root / f".{relative.replace('/', '_')}.lock", "a"))
        except OSError:
            handle = None
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed, also when the process dies
        yield


def mirror_root() -> Path | None:
    """The offline mirror named by ``$GRAPHNORM_DATA_MIRROR``, if any."""
    mirror = os.environ.get(ENV_MIRROR)
    if not mirror:
        return None
    path = Path(mirror).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"${ENV_MIRROR} points to {path}, which is not a directory")
    return path


def _make_writable(path: Path) -> None:
    """Add the owner's write (and read, and for folders search) permission to ``path`` and everything under it: a
    copy keeps a read-only mirror's modes, and the loaders must write ``processed/`` next to ``raw/``."""
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            p.chmod(p.stat().st_mode | stat.S_IWUSR | stat.S_IRUSR | (stat.S_IXUSR if p.is_dir() else 0))
    path.chmod(path.stat().st_mode | stat.S_IWUSR | stat.S_IRUSR | stat.S_IXUSR)


def _not_raw(folder: str, names: list[str]) -> set[str]:
    """What a mirror copy skips: processed output and torch files, which the loaders would unpickle."""
    return {name for name in names if name == "processed" or name.endswith(".pt")}


def _copy_whole(source: str, target: str) -> None:
    """Copy one file so that it appears whole or not at all (:func:`graphnorm.files.atomic_write`)."""
    with open(source, "rb") as handle:
        atomic_write(target, lambda out: shutil.copyfileobj(handle, out))


def seed_from_mirror(root: Path, relative: str, required: list[str]) -> bool:
    """Copy the raw files of ``mirror/relative`` into ``root/relative`` when files in ``required`` are missing there.

    ``required`` are paths relative to ``root/relative``. Returns True if a copy was made. Call it under
    :func:`dataset_lock`; each file appears whole or not at all.

    Trust: ``processed/`` folders and ``.pt`` files are never copied, so every file that PyG or ogb ``torch.load`` s
    is made locally (PyG retries a processed file with ``weights_only=False`` and always loads ``pre_transform.pt``
    that way). The raw files of Planetoid and ZINC are pickles themselves, so the mirror must still be trusted, and
    so must the root: processed files found there are unpickled.

    Raises:
        DataRootError: the root is not writable or is full.
        FileNotFoundError: ``$GRAPHNORM_DATA_MIRROR`` is not a directory.
    """
    target = root / relative
    if all((target / r).exists() for r in required):
        return False
    mirror = mirror_root()
    if mirror is None or not (mirror / relative).exists():
        return False
    try:
        shutil.copytree(mirror / relative, target, dirs_exist_ok=True, ignore=_not_raw, copy_function=_copy_whole)
        _make_writable(target)
    except OSError as error:
        raise unwritable_root_error(root, f"copying {relative} from the mirror {mirror}", error) from None
    return True
