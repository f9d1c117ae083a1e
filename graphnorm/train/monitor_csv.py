"""The CollapseMonitor's files in its out_dir: the tidy CSV, the record of its whole steps, and the folder's lock.

One monitor writes a folder at a time: it holds an exclusive ``flock`` on ``.collapse_steps.lock`` from opening until
it is closed, collected or its process ends; another monitor on the folder (in any process) is refused. The CSV grows
by one block of rows per probe; a block counts once its line ``<step> <rows>`` is in ``.collapse_steps.csv.steps``,
appended after the block is synced. A block cut by a full disk, an error or a kill is therefore rolled back at once,
or found and dropped when the CSV is opened again (a step short of its rows), and its step is probed again. A CSV
without that record (copied alone) keeps its rows, less a last step shorter than the steps before it. Every path is
opened without following a symlink and must be a regular file; a CSV that is not a table the monitor wrote (bad
text, a non-integer step, a step in two places) is a one-line ``ValueError`` naming the file, line and problem.
"""

from __future__ import annotations

import csv
import math
import os
import re
import weakref
from pathlib import Path

import pandas as pd

from graphnorm.files import OutputPathError, acquire_lock, atomic_write_text, open_regular, release_lock

__all__ = ["StepCsv", "STEP_RECORD_SUFFIX", "LOCK_NAME"]

LOCK_NAME = ".collapse_steps.lock"  # in out_dir: held (flock) by the one monitor writing there
STEP_RECORD_SUFFIX = ".steps"  # .<csv name>.steps: "<step> <rows>" per whole block of the CSV, in file order

_INTEGER = re.compile(r"-?[0-9]{1,18}")  # fits int64
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?|inf|nan)", re.IGNORECASE)
WHAT = "CollapseMonitor: its file"  # how refusals name the monitor's files


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a write to a regular file may be short; write the rest
        view = view[os.write(descriptor, view) :]


def _read(path: Path) -> bytes:
    with os.fdopen(open_regular(path, os.O_RDONLY, WHAT), "rb") as handle:
        return handle.read()


def _entries(record: str) -> list[tuple[int, int]] | None:
    """The whole blocks ``(step, rows)`` a step record lists; a last line without its newline was cut (not
    recorded); None for a record that is not one."""
    entries = []
    for line in record.split("\n")[:-1]:
        parts = line.split(" ")
        if len(parts) != 2 or not all(part.isdigit() and len(part) < 19 for part in parts):
            return None
        entries.append((int(parts[0]), int(parts[1])))
    return entries


class _Lock:
    """The exclusive lock of ``folder`` (:data:`LOCK_NAME`), held until :meth:`release`, garbage collection or exit."""

    def __init__(self, folder: Path) -> None:
        path = folder / LOCK_NAME
        busy = (
            f"CollapseMonitor: out_dir {folder} is in use by another CollapseMonitor (it holds {path}): two monitors "
            "would write one table; close the other one (monitor.close()) or give another out_dir"
        )
        descriptor = acquire_lock(path, busy, "CollapseMonitor: the lock file of out_dir,")
        self.release = weakref.finalize(self, release_lock, descriptor, os.getpid())


class StepCsv:
    """The monitor's CSV in ``folder`` (named ``name``), its step record and its lock, held from here until
    :meth:`close`. Opening checks the file, drops what is not a whole step (and, with ``start_step``, the steps
    from ``start_step`` on), and leaves the rows kept in :attr:`kept`."""

    def __init__(self, folder: Path, name: str, columns: list[str], start_step: int | None) -> None:
        self.path, self.columns = folder / name, columns
        self.record = folder / f".{name}{STEP_RECORD_SUFFIX}"
        self._lock = _Lock(folder)
        try:
            self._open(start_step)
        except OutputPathError:
            self.close()
            raise
        except OSError as e:  # unreadable, or no room to rewrite it
            self.close()
            raise OutputPathError(
                f"CollapseMonitor: cannot open {e.filename or self.path}: {e.strerror or e}; fix the folder or give "
                "another out_dir"
            ) from None
        except BaseException:
            self.close()
            raise

    def _open(self, start_step: int | None) -> None:
        header = ",".join(self.columns) + "\n"
        text = _read(self.path) if os.path.lexists(self.path) else None
        lines = self._body(text, header) if text is not None else []
        blocks, rows = self._blocks(lines)
        recorded = self._read_record()
        blocks = self._whole(blocks, None if recorded is None else _entries(recorded))
        if start_step is not None:
            blocks = [block for block in blocks if block[0] < start_step]
        kept_lines = [line for block in blocks for line in lines[block[2] : block[2] + block[1]]]
        content = header + "".join(kept_lines)
        if text != content.encode("utf-8"):
            atomic_write_text(self.path, content, f"CollapseMonitor: {self.path}")
        record = "".join(f"{step} {count}\n" for step, count, _ in blocks)
        if recorded != record:
            atomic_write_text(self.record, record, f"CollapseMonitor: {self.record}")
        self.size, self.record_size = len(content.encode("utf-8")), len(record.encode("utf-8"))
        kept = [row for block in blocks for row in rows[block[2] : block[2] + block[1]]]
        self.kept = self._frame(kept)

    def _fail(self, line: int, problem: str) -> ValueError:
        return ValueError(
            f"CollapseMonitor: {self.path} line {line}: {problem}; it is not a table this monitor wrote whole: "
            "repair or remove the file, or give another out_dir"
        )

    def _body(self, text: bytes, header: str) -> list[str]:
        """The CSV's whole lines (each ending in its newline) after a header equal to ``header``; what follows the
        last newline is a write cut inside its line, left out."""
        first = text.split(b"\n", 1)[0].decode("utf-8", "replace")
        if not text.startswith(header.encode("utf-8")):
            raise ValueError(
                f"CollapseMonitor: {self.path} has columns {first[:200]!r}, not {header.strip()!r}: it is not this "
                "monitor's table (other options or another file); give another out_dir or remove the file"
            )
        whole = text[len(header) : text.rfind(b"\n") + 1]
        try:
            decoded = whole.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._fail(whole.count(b"\n", 0, e.start) + 2, "bytes that are not UTF-8 text") from None
        return [line + "\n" for line in decoded.split("\n")[:-1]]

    def _blocks(self, lines: list[str]) -> tuple[list[tuple[int, int, int]], list[list]]:
        """The rows of ``lines``, checked, and their blocks ``(step, rows, first line)`` in file order."""
        rows, blocks, seen = [], [], {}
        for number, line in enumerate(lines):
            where = number + 2  # the header is line 1
            try:
                parsed = list(csv.reader([line[:-1]], strict=True))
            except csv.Error as e:
                raise self._fail(where, f"not a CSV row ({e})") from None
            fields = parsed[0] if parsed else []
            row = self._row(fields, where)
            rows.append(row)
            step = row[0]
            if blocks and blocks[-1][0] == step:
                blocks[-1] = (step, blocks[-1][1] + 1, blocks[-1][2])
                continue
            if step in seen:
                raise self._fail(where, f"step {step} again, first written at line {seen[step]} (a step is one block)")
            seen[step] = where
            blocks.append((step, 1, number))
        return blocks, rows

    def _row(self, fields: list[str], where: int) -> list:
        if len(fields) != len(self.columns):
            raise self._fail(where, f"{len(fields)} fields, not the {len(self.columns)} columns")
        values: list = []
        for column, text in zip(self.columns, fields):
            if column in ("step", "layer"):
                if not _INTEGER.fullmatch(text) or (column == "step" and text.startswith("-")):
                    raise self._fail(where, f"{column} {text[:40]!r} is not an integer" + " >= 0" * (column == "step"))
                values.append(int(text))
            elif column == "epoch":
                if text and not (_INTEGER.fullmatch(text) and not text.startswith("-")):
                    raise self._fail(where, f"epoch {text[:40]!r} is neither empty nor an integer >= 0")
                values.append(int(text) if text else pd.NA)
            elif column == "value":
                if text and not _FLOAT.fullmatch(text):
                    raise self._fail(where, f"value {text[:40]!r} is not a number")
                values.append(float(text) if text else math.nan)
            elif column == "stat":
                values.append(text if text else math.nan)
            else:
                values.append(text)
        return values

    def _read_record(self) -> str | None:
        """The step record's text, or None when there is none readable (a CSV alone: the CSV decides)."""
        try:
            return _read(self.record).decode("ascii")
        except (OSError, ValueError):
            return None

    @staticmethod
    def _whole(blocks: list[tuple[int, int, int]], record: list[tuple[int, int]] | None) -> list[tuple[int, int, int]]:
        """The blocks that are whole steps: those the record lists (a block after them was not committed; a CSV cut
        short ends at a recorded block, or the last one is short of its rows and dropped); without a record, or one
        that does not describe this CSV (edited), all but a last block shorter than the blocks before it."""
        if record is not None:
            same = 0
            while same < min(len(blocks), len(record)) and blocks[same][:2] == record[same]:
                same += 1
            if same == len(record) or same == len(blocks):
                return blocks[:same]
            cut = blocks[same]
            if same == len(blocks) - 1 and cut[0] == record[same][0] and cut[1] < record[same][1]:
                return blocks[:same]
        if len(blocks) > 1 and blocks[-1][1] < max(count for _, count, _ in blocks[:-1]):
            return blocks[:-1]
        return blocks

    def _frame(self, rows: list[list]) -> pd.DataFrame:
        types = {"step": "int64", "epoch": "Int64", "layer": "int64", "value": "float64"}
        frame = pd.DataFrame(rows, columns=self.columns)
        return frame.astype({column: kind for column, kind in types.items() if column in self.columns})

    def append(self, table: pd.DataFrame, step: int) -> None:
        """Add ``table``'s rows (the probe of ``step``) as one whole block: written and synced, then recorded; any
        failure on the way rolls both files back to their last whole step and raises (``RuntimeError`` in one line
        for a failed write, e.g. a full disk)."""
        if self.closed:
            raise RuntimeError(f"CollapseMonitor: {self.path} is closed; open a new monitor to probe again")
        block = table.to_csv(index=False, header=False, columns=self.columns, lineterminator="\n").encode("utf-8")
        line = f"{step} {len(table)}\n".encode("ascii")
        descriptors: list[tuple[int, int, bytes]] = []  # (descriptor, size to roll back to, what to add)
        try:
            for path, size, data in ((self.path, self.size, block), (self.record, self.record_size, line)):
                descriptor = open_regular(path, os.O_WRONLY | os.O_APPEND, WHAT)
                descriptors.append((descriptor, size, data))
                found = os.fstat(descriptor).st_size
                if found != size:  # nothing written yet: nothing to roll back
                    raise RuntimeError(
                        f"CollapseMonitor: {path} is {found} bytes, not the {size} this monitor wrote: something "
                        "else changed it; the monitor writes no more there: open a new monitor on the folder"
                    )
            try:
                for descriptor, _, data in descriptors:
                    _write_all(descriptor, data)
                    os.fsync(descriptor)
            except BaseException:
                for descriptor, size, _ in descriptors:
                    try:
                        os.ftruncate(descriptor, size)
                        os.fsync(descriptor)
                    except OSError:
                        pass  # the next opening drops what is not recorded
                raise
        except OutputPathError:
            raise  # a link, FIFO or device put in its place: refused, nothing written
        except OSError as e:
            raise RuntimeError(
                f"CollapseMonitor: cannot write step {step} to {e.filename or self.path}: {e.strerror or e}; the file "
                "keeps its whole steps: make room (or fix the folder) and probe the step again"
            ) from None
        finally:
            for descriptor, _, _ in descriptors:
                os.close(descriptor)
        self.size += len(block)
        self.record_size += len(line)

    def close(self) -> None:
        """Release the folder's lock (again: nothing)."""
        self._lock.release()

    @property
    def closed(self) -> bool:
        return not self._lock.release.alive
