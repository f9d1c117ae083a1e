"""Where datasets live: the data root, and seeding it from an offline mirror.

The root comes from the ``root`` argument, else ``$GRAPHNORM_DATA``, else ``~/.cache/graphnorm/data``
(:func:`resolve_root`); with internet, the loaders download into it. Offline machines point ``$GRAPHNORM_DATA_MIRROR``
at a read-only folder laid out as the loaders expect (``Planetoid/Cora/raw``, ``ZINC/raw``, ``ogb/ogbg_molhiv``...):
missing raw files are copied from it into the root before loading (:func:`seed_from_mirror`), so ``processed/`` files
are never written into the mirror; one naming no folder is ignored with a warning line and the loaders download
(:func:`mirror_root`). Two processes preparing one dataset at once take turns (:func:`dataset_lock`).

The data root cannot reach outside itself: nothing is created, written or chmod-ed through a symbolic link
(:func:`refuse_links`; to keep data on another disk, point ``$GRAPHNORM_DATA`` there), and in the mirror a link is
followed only while it stays inside it (:func:`seed_from_mirror` says how each case is refused).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from graphnorm.files import NoFileLocksError, OutputPathError, atomic_write, release_lock, wait_for_lock

ENV_ROOT = "GRAPHNORM_DATA"
ENV_MIRROR = "GRAPHNORM_DATA_MIRROR"
log = logging.getLogger(__name__)
_warned_mirrors: set[Path] = set()  # a missing mirror is reported once per process


class DataRootError(OSError):
    """The data root cannot be used: not a directory, not writable, full, holding damaged processed files, or a
    symbolic link where graphnorm would write (or, in the mirror, one leading outside it)."""


# Opening the lock file failed because nothing can be written to the root: no lock is needed (see dataset_lock).
_READ_ONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT}


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


def _root_link_error(root: Path, link: Path) -> DataRootError:
    """The one-line refusal of a symbolic link found where the data root is written."""
    return DataRootError(
        f"{link} is a symbolic link (to {os.readlink(link)}) in the data root {root}, which graphnorm never writes "
        f"through: replace it by a real folder or file, or delete it (to keep data elsewhere, set ${ENV_ROOT} there)"
    )


def refuse_links(root: Path, relative: str) -> None:
    """Raise :class:`DataRootError` naming the first symbolic link on the way from ``root`` to ``root/relative`` or
    anywhere under it (links are not followed while looking). ``root`` itself is resolved (:func:`resolve_root`)."""
    path = root
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            raise _root_link_error(root, path)
        if not path.exists():
            return
    for dirpath, dirnames, filenames in os.walk(path):  # a link to a folder is listed, never entered
        for name in sorted([*dirnames, *filenames]):
            if (Path(dirpath) / name).is_symlink():
                raise _root_link_error(root, Path(dirpath) / name)


def _wait_for_lock(root: Path, lock: Path) -> int | None:
    """A descriptor of the regular file ``lock`` (created if missing) holding its exclusive lock, once the process
    that holds it lets go (:func:`graphnorm.files.wait_for_lock`); None where the root is read-only."""
    if lock.is_symlink():
        raise _root_link_error(root, lock)
    try:
        return wait_for_lock(lock, "the lock file")
    except NoFileLocksError as error:  # deleting the lock file would not help
        raise DataRootError(f"{error.problem}; set ${ENV_ROOT} to a folder on a local disk") from None
    except OutputPathError:  # a folder, a pipe or a device where the lock file goes
        raise DataRootError(f"the lock file {lock} is not a regular file (a folder or a pipe): delete it") from None
    except OSError as error:
        if error.errno in _READ_ONLY_ERRNOS:
            return None
        raise DataRootError(f"cannot lock the lock file {lock} ({error.strerror or error})") from None


@contextlib.contextmanager
def dataset_lock(root: Path, relative: str) -> Iterator[None]:
    """Hold an exclusive lock on dataset ``relative`` under ``root`` while it is copied and processed.

    Two processes preparing one dataset at once would otherwise read each other's half-written files. A root where
    the lock file cannot be created is read-only, so nobody writes there and nothing needs guarding. The lock file
    ``root/.<relative>.lock`` and the dataset's folder must hold no symbolic link (:func:`refuse_links`): the
    loaders write there under the lock.
    """
    refuse_links(root, relative)
    fd = _wait_for_lock(root, root / f".{relative.replace('/', '_')}.lock")
    if fd is None:
        yield
        return
    owner = os.getpid()
    try:
        yield
    finally:
        release_lock(fd, owner)  # (a process that dies releases it too)


def mirror_root() -> Path | None:
    """The offline mirror named by ``$GRAPHNORM_DATA_MIRROR``, if it names a directory.

    A variable naming no directory (a copied command on a machine without that folder) is ignored, so that the
    loaders download as they would without it; one warning line per process says so (:func:`mirror_status`)."""
    mirror = os.environ.get(ENV_MIRROR)
    if not mirror:
        return None
    path = Path(mirror).expanduser().resolve()
    if not path.is_dir():
        if path not in _warned_mirrors:
            _warned_mirrors.add(path)
            log.warning(f"graphnorm: {mirror_status()}: ignored, datasets missing from the data root are downloaded")
        return None
    return path


def mirror_status() -> str:
    """Where the mirror stands, for messages: unset, a folder, or a path that is not a directory (and what to do)."""
    mirror = os.environ.get(ENV_MIRROR)
    if not mirror:
        return f"${ENV_MIRROR} is unset"
    path = Path(mirror).expanduser().resolve()
    if path.is_dir():
        return f"${ENV_MIRROR} is {path}"
    return (
        f"${ENV_MIRROR} points to {path}, which is not a directory (offline, set it to the mirror folder, or unset it)"
    )


def _make_writable(path: Path) -> None:
    """Add the owner's write (and read, and for folders search) permission to ``path`` and everything under it: a
    copy made by an earlier version kept a read-only mirror's modes, and the loaders must write ``processed/`` next
    to ``raw/``. Symbolic links are skipped (``chmod`` would change their targets), and so are files with another
    name elsewhere (hard links share one mode)."""
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            _add_owner_rights(Path(dirpath) / name)
    _add_owner_rights(path)


def _add_owner_rights(path: Path) -> None:
    """:func:`_make_writable` for one path, which is never followed if it is a symbolic link."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or (not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1):
        return
    wanted = stat.S_IWUSR | stat.S_IRUSR | (stat.S_IXUSR if stat.S_ISDIR(info.st_mode) else 0)
    if info.st_mode & wanted != wanted:
        path.chmod(stat.S_IMODE(info.st_mode) | wanted)


def _not_raw(folder: str, names: list[str]) -> set[str]:
    """What a mirror copy skips: processed output and torch files, which the loaders would unpickle."""
    return {name for name in names if name == "processed" or name.endswith(".pt")}


def _within(path: Path, folder: Path) -> bool:
    """Whether the resolved ``path`` is ``folder`` or below it (``folder`` resolved)."""
    return path == folder or folder in path.parents


def _mirror_link_error(mirror: Path, link: Path, problem: str) -> DataRootError:
    """The one-line refusal of a symbolic link in the mirror that seeding does not follow."""
    return DataRootError(
        f"{link} in the mirror {mirror} is a symbolic link {problem} (to {os.readlink(link)}): graphnorm copies only "
        f"what lies inside ${ENV_MIRROR}; replace the link by the files it points to, or delete it"
    )


def _mirror_start(mirror: Path, relative: str) -> Path:
    """``mirror/relative`` resolved, refused if a link on the way leads outside the mirror."""
    path = mirror
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink() and not _within(path.resolve(), mirror):
            raise _mirror_link_error(mirror, path, "leading outside it")
    return (mirror / relative).resolve()


def _mirror_files(mirror: Path, relative: str) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """What seeding copies from ``mirror/relative``: its folders, and its files with the real file each one reads,
    as paths relative to that folder; without ``processed/`` and ``.pt`` files, nor anything but folders and regular
    files. Links are followed while they stay inside the mirror; one leading out, or back to a folder it lies in
    (a loop), raises :class:`DataRootError` naming it."""
    folders, files = [], []
    pending = [(_mirror_start(mirror, relative), Path(), frozenset())]
    while pending:
        real_folder, shown, ancestors = pending.pop()
        names = sorted(os.listdir(real_folder))
        for name in sorted(set(names) - _not_raw(str(real_folder), names)):
            source, link = real_folder / name, mirror / relative / shown / name
            real = source.resolve() if source.is_symlink() else source
            if source.is_symlink() and not _within(real, mirror):
                raise _mirror_link_error(mirror, link, "leading outside it")
            if real.is_dir():
                if real in ancestors or real == real_folder:
                    raise _mirror_link_error(mirror, link, "to a folder that contains it (a loop)")
                folders.append(shown / name)
                pending.append((real, shown / name, ancestors | {real_folder}))
            elif real.is_file():
                files.append((shown / name, real))
    return folders, files


def _copy_whole(source: Path, target: Path) -> None:
    """Copy one file so that it appears whole or not at all (:func:`graphnorm.files.atomic_write`)."""
    with open(source, "rb") as handle:
        atomic_write(target, lambda out: shutil.copyfileobj(handle, out))


def seed_from_mirror(root: Path, relative: str, required: list[str]) -> bool:
    """Copy the raw files of ``mirror/relative`` into ``root/relative`` when files in ``required`` are missing there.

    ``required`` are paths relative to ``root/relative``. Returns True if a copy was made. Call it under
    :func:`dataset_lock`; each file appears whole or not at all.

    Symbolic links: seeding and locking refuse, with one line naming it, a link on the way to a dataset's folder,
    anywhere in it, or at its lock file's place (:func:`refuse_links`), whether it points outside the root or not. In
    the mirror, links are followed while they stay inside it (the root gets real files); a link leading outside the
    mirror, or a folder link that loops, is refused the same way.

    Trust: ``processed/`` folders and ``.pt`` files are never copied, so every file that PyG or ogb ``torch.load`` s
    is made locally (PyG retries a processed file with ``weights_only=False`` and always loads ``pre_transform.pt``
    that way). The raw files of Planetoid and ZINC are pickles themselves, so the mirror must still be trusted, and
    so must the root: processed files found there are unpickled.

    Raises:
        DataRootError: the root is not writable or is full; a symbolic link in the root's dataset folder, or one in
            the mirror leading outside it or looping.
    """
    refuse_links(root, relative)
    target = root / relative
    if all((target / r).exists() for r in required):
        return False
    mirror = mirror_root()
    if mirror is None or not (mirror / relative).exists():
        return False
    folders, files = _mirror_files(mirror, relative)
    try:
        for folder in [Path(), *folders]:
            (target / folder).mkdir(parents=True, exist_ok=True)
        for name, source in files:
            _copy_whole(source, target / name)
        _make_writable(target)
    except OSError as error:
        raise unwritable_root_error(root, f"copying {relative} from the mirror {mirror}", error) from None
    return True
