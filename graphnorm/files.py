"""Reading and writing files safely: atomic writes, checks of output paths, clean-up of interrupted writes, and
strict YAML reading.

Every file graphnorm writes for later reading (sweep tables and results, checkpoints, model files, figures, dataset
caches) goes through :func:`atomic_write`, so a reader sees the old file or the new one, never a partial one; a
killed writer leaves at most a temporary file, which :func:`remove_leftover_temporary_files` deletes.

The one rule for every writer (:func:`check_output_path`, :func:`check_output_dir`, :func:`open_for_append`):
graphnorm writes only regular files, never through a symbolic link (the target, or one planted where a temporary or
lock file goes), never onto a device, FIFO, socket or folder, never onto a file another writer holds
(:func:`hold_lock`), never over a file the command reads (:func:`check_not_an_input`). A refusal is one line naming
the path and why. YAML that users write is read strictly and within bounds (:func:`load_yaml_file`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO

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


# --- the rule for every output --------------------------------------------------------------------------------

WRITE_RULE = "graphnorm writes only regular files, never through a symbolic link nor onto a device, FIFO or socket"
NODE_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class OutputPathError(OSError, ValueError):
    """An output graphnorm will not write (:func:`check_output_path`, :func:`check_output_dir`); the message is one
    line naming the path and why. An ``OSError``, so code that survives a failed write survives it, and a
    ``ValueError``, so the commands report it as bad input in one line."""


class OutputBusyError(OutputPathError, RuntimeError):
    """An output another writer holds (its lock, :func:`hold_lock`, is taken)."""


class NoFileLocksError(OutputPathError):
    """A lock file on a file system without ``flock`` (some network file systems): nothing there can be locked.
    ``problem``: the message without its advice, for a caller that has better advice to give."""

    def __init__(self, problem: str, advice: str = "put it on a local disk") -> None:
        super().__init__(f"{problem}; {advice}")
        self.problem = problem


# flock's errors where the file system has no locks at all (ENOTSUP is EOPNOTSUPP on Linux, not everywhere).
NO_LOCKS_ERRNOS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})


def node_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``a regular file``, ``a FIFO (named pipe)``, ...)."""
    return next((kind for test, kind in NODE_KINDS if test(mode)), "an unknown kind of file")


def _lstat(path: Path) -> os.stat_result | None:
    """``path``'s own status (a link's, not its target's); None when nothing is there."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _named(path: Path, what: str | None) -> str:
    """``what`` (e.g. ``--out x.json``) with the path in it, or the path alone."""
    if what is None:
        return str(path)
    return what if str(path) in what else f"{what} {path}"


def _refuse_kind(path: Path, info: os.stat_result, what: str | None) -> None:
    """:class:`OutputPathError` unless ``info`` (``path``'s lstat) is a regular file's."""
    if stat.S_ISREG(info.st_mode):
        return
    named = _named(path, what)
    if stat.S_ISLNK(info.st_mode):
        raise OutputPathError(
            f"{named} is a symbolic link (to {os.readlink(path)}); {WRITE_RULE}: remove the link or give another path"
        )
    if stat.S_ISDIR(info.st_mode):
        raise OutputPathError(f"{named} is a directory, not a file: give another path")
    raise OutputPathError(f"{named} is {node_kind(info.st_mode)}, not a regular file; {WRITE_RULE}: give another path")


def held_by_another_writer(path: Path) -> bool:
    """Whether the regular file ``path`` is locked (``flock``) by another open file: a writer's lock file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # not there, or not readable: the write itself will say
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the descriptor
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks: nobody can hold one there
        return False
    finally:
        os.close(fd)
    return False


def check_output_path(path: str | os.PathLike, what: str | None = None) -> Path:
    """``path`` (``~`` expanded) once graphnorm may replace it: nothing there, or a regular file that no other writer
    holds, in a folder that is a folder (a link to one is fine: the user named it). :class:`OutputPathError` in one
    line (``what``, e.g. ``--out x.json``, names it) for a symbolic link, a directory, a device, FIFO or socket."""
    path = Path(path).expanduser()
    info = _lstat(path)
    if info is None:
        try:
            parent = os.stat(path.parent).st_mode
        except OSError:  # missing (made later) or unreachable (the write will say)
            return path
        if not stat.S_ISDIR(parent):
            raise OutputPathError(f"{_named(path, what)} cannot be written: {path.parent} is not a folder")
        return path
    _refuse_kind(path, info, what)
    if held_by_another_writer(path):
        raise OutputBusyError(
            f"{_named(path, what)} is held by another writer (it is locked): wait for it to end or give another path"
        )
    return path


def check_output_dir(
    folder: str | os.PathLike, what: str | None = None, links: bool = True, create: bool = True
) -> Path:
    """``folder`` (``~`` expanded), created with its parents unless ``create`` is false, once it is a folder that
    accepts a new file (a probe file is made and removed), checked before any long work whose output would be lost.
    ``links``: ``folder`` may be a symbolic link to a folder (one the user named); false for a folder graphnorm makes
    inside the one the user named. :class:`OutputPathError` in one line naming ``what`` otherwise. Without
    ``create``, a missing folder is fine and nothing is made."""
    folder = Path(folder).expanduser()
    named = what or "the folder"  # every message names the folder after it
    info = _lstat(folder)
    link = info is not None and stat.S_ISLNK(info.st_mode)
    if link:
        if not links:
            raise OutputPathError(
                f"{named} cannot be written: {folder} is a symbolic link (to {os.readlink(folder)}); graphnorm makes "
                "this folder itself and writes only inside the folder you named: remove the link"
            )
        try:
            info = os.stat(folder)
        except OSError:
            raise OutputPathError(
                f"{named} cannot be written: {folder} is a symbolic link to {os.readlink(folder)}, which is no folder"
            ) from None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        kind = f"a symbolic link to {node_kind(info.st_mode)}" if link else node_kind(info.st_mode)
        raise OutputPathError(f"{named} cannot be written: {folder} is {kind}, not a folder")
    if info is None and not create:
        return folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check.", suffix=".tmp"):  # O_EXCL: no link
            pass
    except OSError as e:
        raise OutputPathError(f"{named} cannot be written: {e.strerror or e} ({e.filename or folder})") from None
    return folder


def _create_temporary(tmp: Path, what: str | None) -> int:
    """A descriptor of the new, empty file ``tmp``, created by this call: never through a link planted there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(tmp, flags, 0o666)
    except FileExistsError:
        pass
    # The name holds this process's id: what is there was left by a dead process with the same id, or planted.
    # Unlinking a link removes the link alone, never what it points to.
    info = _lstat(tmp)
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise OutputPathError(f"{_named(tmp, what)}: the temporary file {tmp} is a directory: remove it") from None
    tmp.unlink(missing_ok=True)
    return os.open(tmp, flags, 0o666)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object], what: str | None = None) -> None:
    """Replace ``path`` by what ``write(handle)`` writes to a binary file handle (e.g. ``torch.save(obj, handle)``),
    atomically: the new content goes to ``.<name>.<pid>.tmp`` beside the target (:func:`temporary_stem`), is flushed
    to disk, and replaces the target by ``os.replace``, so a reader sees the old file or the new one, never a partial
    one. The folder must exist. ``path`` must pass :func:`check_output_path` (``what``
    names it in the error); a hard-linked ``path`` is replaced by a new file, its other names keep the old bytes."""
    path = check_output_path(path, what)
    tmp = temporary_path(path)
    fd = _create_temporary(tmp, what)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        check_output_path(path, what)  # again: something may have taken its place during a long write
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):  # (unlink of a missing file still fails on a read-only file system)
            tmp.unlink()


def atomic_write_text(path: str | os.PathLike, text: str, what: str | None = None) -> None:
    """:func:`atomic_write` of ``text`` in UTF-8."""
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")), what)


def save_figure(figure: Any, path: str | os.PathLike, what: str | None = None, **savefig: Any) -> None:
    """A matplotlib ``figure`` saved to ``path`` by :func:`atomic_write`, in the format of its suffix (``.png``,
    ``.pdf``, ...); ``savefig``: ``Figure.savefig``'s options (``dpi``, ``bbox_inches``...)."""
    form = Path(path).suffix.lstrip(".").lower() or "png"
    atomic_write(path, lambda handle: figure.savefig(handle, format=form, **savefig), what)


def open_regular(path: str | os.PathLike, flags: int, what: str | None = None, mode: int = 0o644) -> int:
    """A descriptor of ``path`` opened with ``flags`` (``os.O_*``), never through a symbolic link nor onto a FIFO,
    device or folder (:data:`WRITE_RULE`, for reading too: opening a FIFO would wait for a writer), blocking once
    open; :class:`OutputPathError` in one line naming the path and what it is, ``OSError`` for other failures.
    ``mode``: the permissions of a file ``os.O_CREAT`` creates (less the umask)."""
    path = Path(path)
    try:
        descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        info = _lstat(path) if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO) else None
        if info is None:
            raise
        _refuse_kind(path, info, what)
        raise
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        _refuse_kind(path, info, what)
    os.set_blocking(descriptor, True)
    return descriptor


def open_for_append(path: str | os.PathLike, what: str | None = None, buffering: int = -1) -> TextIO:
    """``path`` opened to append text (created if missing) under the rule of :func:`check_output_path`. A file with
    other hard links is first replaced by a copy of itself, so that its other names keep their bytes."""
    path = check_output_path(path, what)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o666)
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        os.close(fd)
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as source:
            atomic_write(path, lambda copy: shutil.copyfileobj(source, copy), what)
        fd = os.open(path, flags, 0o666)
        info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # replaced between the check and the open
        os.close(fd)
        _refuse_kind(path, info, what)
    return os.fdopen(fd, "a", buffering=buffering)


@contextlib.contextmanager
def hold_lock(path: str | os.PathLike, busy: str, what: str | None = None, remove: bool = False) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the regular file ``path`` (created if missing, never truncated, never through a
    link) while inside; :class:`OutputBusyError` with the message ``busy`` when another writer holds it. The lock
    goes with the descriptor, also when the process dies. ``remove``: delete the file on leaving (one lock file per
    run rather than per folder); a process that opened it just before then finds its lock on a deleted file and
    takes the path's new one instead (:func:`acquire_lock`)."""
    path = Path(path).expanduser()
    fd, owner = acquire_lock(path, busy, what), os.getpid()
    try:
        yield
    finally:
        if remove and os.getpid() == owner:
            with contextlib.suppress(OSError):
                path.unlink()  # while still held: nobody can have locked the file at this name meanwhile
        release_lock(fd, owner)


def acquire_lock(path: Path, busy: str, what: str | None = None) -> int:
    """A descriptor of the regular file ``path`` (created if missing, never through a link) holding its exclusive
    ``flock``; :class:`OutputBusyError` with the message ``busy`` when another writer holds it
    (:class:`NoFileLocksError` where nothing can be locked). The caller unlocks and closes it (:func:`release_lock`;
    :func:`hold_lock` does both for a block)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        info = _lstat(path)
        if info is not None:
            _refuse_kind(path, info, what)
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as e:
            raise OutputPathError(f"{_named(path, what)} cannot be created: {e.strerror or e}") from None
        try:
            _refuse_kind(path, os.fstat(fd), what)  # replaced between the check and the open
            _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, path, what)
            now = _lstat(path)
            if now is not None and (now.st_dev, now.st_ino) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
                return fd
        except BlockingIOError:
            os.close(fd)
            raise OutputBusyError(busy) from None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it between our open and our lock: lock the new one
    raise OutputBusyError(busy)


def wait_for_lock(path: str | os.PathLike, what: str | None = None, mode: int = 0o666) -> int:
    """A descriptor of the regular file ``path`` (created if missing with ``mode``, never through a link nor onto a
    FIFO, device or folder: :func:`open_regular`) once this process holds its exclusive ``flock``, however long the
    holder keeps it; release it with :func:`release_lock`. :class:`OutputPathError` where ``path`` is not a regular
    file, :class:`NoFileLocksError` on a file system without ``flock``, ``OSError`` for other failures (a read-only
    folder)."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, what, mode)
    try:
        _flock(fd, fcntl.LOCK_EX, Path(path), what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _flock(fd: int, operation: int, path: Path, what: str | None) -> None:
    """``fcntl.flock(fd, operation)``, with :class:`NoFileLocksError` naming ``path`` where its file system has no
    locks: flock's own error says only "No locks available"."""
    try:
        fcntl.flock(fd, operation)
    except OSError as error:
        if error.errno not in NO_LOCKS_ERRNOS:
            raise
        raise NoFileLocksError(
            f"{_named(path, what)} cannot be locked: its file system has no file locks ({error.strerror}; some "
            "network file systems)"
        ) from None


def release_lock(fd: int, owner: int) -> None:
    """Release the ``flock`` of ``fd`` (from :func:`acquire_lock` or :func:`wait_for_lock`, in process ``owner``) and
    close it. Unlocked explicitly, not by the close alone: a process forked meanwhile (a data loader's worker) shares
    the descriptor and would keep the lock until it exits. And only in ``owner``: a forked process leaving the lock's
    block must not release the lock its parent still holds."""
    if os.getpid() == owner:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


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
    """:func:`check_output_dir` of a folder the user named (a link to a folder is fine)."""
    check_output_dir(path, what)


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


# A config, sweep or page structure is a few kilobytes, a few hundred values, a few levels deep; these bounds are
# far above that and far below what exhausts memory or time (PyYAML reads about a megabyte a second).
MAX_YAML_CHARS = 1_000_000
MAX_YAML_VALUES = 100_000  # scalars, lists and mappings, every alias counted as what it refers to
MAX_YAML_DEPTH = 100  # lists and mappings inside one another (the composer recurses per level)


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping lists the same key twice."""


class YAMLBoundError(yaml.MarkedYAMLError):
    """A document nested too deeply, with a recursive alias, or whose aliases expand past the bound."""


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys in a mapping (merge keys ``<<`` keep their meaning), and
    documents that exceed :data:`MAX_YAML_VALUES` or :data:`MAX_YAML_DEPTH` while they are composed, before any
    value is built: each alias adds the size of the node it refers to, so a bomb stops at the alias that crosses."""

    def compose_document(self) -> yaml.Node:
        self._values = 0  # values composed so far, aliases expanded
        self._depth = 0
        self._sizes: dict[str, int] = {}  # anchor -> values of its node, aliases expanded
        return super().compose_document()

    def _count(self, values: int, mark: yaml.Mark) -> None:
        self._values += values
        if self._values > MAX_YAML_VALUES:
            raise YAMLBoundError(
                problem=f"the document holds more than {MAX_YAML_VALUES} values with its aliases expanded (an alias "
                "bomb?); write fewer values or use fewer aliases",
                problem_mark=mark,
            )

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.anchors and event.anchor not in self._sizes:
                raise YAMLBoundError(
                    problem=f"alias *{event.anchor} is inside the value it refers to (a recursive alias)",
                    problem_mark=event.start_mark,
                )
            self._count(self._sizes.get(event.anchor, 0), event.start_mark)  # an undefined one: PyYAML's error
            return super().compose_node(parent, index)
        if self._depth >= MAX_YAML_DEPTH:
            raise YAMLBoundError(
                problem=f"values nested more than {MAX_YAML_DEPTH} levels deep", problem_mark=event.start_mark
            )
        before = self._values
        self._count(1, event.start_mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if getattr(event, "anchor", None) is not None:
            self._sizes[event.anchor] = self._values - before
        return node

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
    if isinstance(error, YAMLBoundError):
        return f"{where}: {error.problem}"
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{where}: YAML syntax error: {problem}"


def parse_yaml(text: str, source: str = "<text>") -> Any:
    """``text`` parsed by :class:`StrictLoader`; ``ValueError`` in one line naming ``source``, line and column.
    Text over :data:`MAX_YAML_CHARS` is refused unread."""
    if len(text) > MAX_YAML_CHARS:
        raise ValueError(f"{source}: {len(text)} characters of YAML, more than the {MAX_YAML_CHARS} a config may have")
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except yaml.YAMLError as e:
        raise ValueError(_one_line(e, source)) from None
    except ValueError as e:  # a value Python refuses, e.g. an integer of more than 4300 digits
        raise ValueError(f"{source}: {' '.join(str(e).split())}") from None


def load_yaml_file(path: str | Path, what: str = "config") -> Any:
    """The parsed content of the YAML file ``path`` (``None`` for an empty file).

    ``FileNotFoundError`` if it does not exist; ``ValueError`` (one line naming ``what`` and the file) if it is a
    directory, cannot be read, is larger than :data:`MAX_YAML_CHARS` bytes (read no further, so that a device or a
    growing file ends too), is not UTF-8 text, or is not valid YAML (with line and column), or repeats a key, or
    exceeds :class:`StrictLoader`'s bounds.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory, not a YAML file")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_YAML_CHARS + 1)
        if len(data) > MAX_YAML_CHARS:
            raise ValueError(
                f"{what} {path} is larger than {MAX_YAML_CHARS} bytes; a config is a few kilobytes: is this the "
                "right file?"
            )
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise ValueError(f"{what} {path} cannot be read: {reason}") from None
    return parse_yaml(text, str(path))
