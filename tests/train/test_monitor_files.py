"""The CollapseMonitor's files: one monitor per out_dir (a lock held for the monitor's life), whole steps or nothing
in its CSV (a write failing mid-block, a file cut at any byte of its last block), one-line errors for a corrupt CSV
(seeded fuzzing), the caller's sample left as it was (also with a meta-device model), and an out_dir and CSV path
checked before any probe (no symlink followed, no FIFO or device written)."""

from __future__ import annotations

import errno
import gc
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN

from graphnorm.files import OutputPathError
from graphnorm.train.monitor import MONITOR_CSV, CollapseMonitor
from graphnorm.train.monitor_csv import LOCK_NAME

pytestmark = pytest.mark.usefixtures("one_thread")

NODES, FEATURES = 12, 4


def graph() -> Data:
    generator = torch.Generator().manual_seed(0)
    edges = torch.randint(0, NODES, (2, 30), generator=generator)
    return Data(x=torch.randn(NODES, FEATURES, generator=generator), edge_index=edges)


def gcn(seed: int = 0, layers: int = 2) -> GCN:
    torch.manual_seed(seed)
    return GCN(FEATURES, 6, layers)


def monitor(folder: Path, seed: int = 0, model: GCN | None = None, **options) -> CollapseMonitor:
    model = gcn(seed) if model is None else model
    return CollapseMonitor(model, graph(), every=1, out_dir=folder, layers=model.convs, **options)


@pytest.fixture
def no_fsync(monkeypatch) -> None:
    """Property tests open hundreds of folders: what they check is which rows are kept, not that they reach the
    disk, so syncing is skipped there."""
    monkeypatch.setattr(os, "fsync", lambda descriptor: None)


def step_counts(path: Path) -> dict[int, int]:
    return pd.read_csv(path).groupby("step").size().to_dict()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, int]:
    """A folder whose CSV holds steps 0, 1 and 2 (closed), and the rows of one step."""
    folder = tmp_path_factory.mktemp("written")
    with monitor(folder) as first:
        for step in range(3):
            first.step(step)
    counts = step_counts(folder / MONITOR_CSV)
    assert sorted(counts) == [0, 1, 2] and len(set(counts.values())) == 1
    return folder, counts[0]


def copy_folder(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, dirs_exist_ok=True)
    return target


def one_line_naming(error: BaseException, path: Path) -> bool:
    message = str(error)
    return "\n" not in message and str(path) in message


# --- one monitor per out_dir -----------------------------------------------------------------------------------


def test_a_second_monitor_on_the_same_out_dir_is_refused(tmp_path) -> None:
    first = monitor(tmp_path, seed=0)
    with pytest.raises(RuntimeError) as caught:
        monitor(tmp_path, seed=1)
    assert one_line_naming(caught.value, tmp_path) and "in use" in str(caught.value)
    first.step(0)
    counts = step_counts(tmp_path / MONITOR_CSV)
    assert list(counts) == [0]  # one writer: step 0 once
    first.close()
    again = monitor(tmp_path, seed=1)  # closing released the folder
    assert again.step(0) is None and again.step(1) is not None
    del again
    gc.collect()
    monitor(tmp_path, seed=1).close()  # so did garbage collection


def test_the_lock_holds_against_another_open_of_the_folder_until_close(tmp_path) -> None:
    """Two monitors in one process conflict like two processes: the lock is per monitor, not per process."""
    with monitor(tmp_path):
        for _ in range(2):
            with pytest.raises(RuntimeError, match="in use"):
                monitor(tmp_path)
    with monitor(tmp_path) as later:
        assert later.step(0) is not None


def test_a_monitor_in_another_process_holds_the_folder_until_it_exits(tmp_path) -> None:
    """Another process's monitor, reduced to what it holds: the folder's lock (released by the kernel at exit)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / LOCK_NAME)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline() == b"locked\n"
        with pytest.raises(RuntimeError, match="in use by another CollapseMonitor"):
            monitor(tmp_path)
    finally:
        holder.communicate(b"", timeout=30)  # its stdin closes: it exits
    with monitor(tmp_path) as later:
        assert later.step(0) is not None


def test_close_releases_the_folder_while_a_forked_process_lives(tmp_path) -> None:
    """A process forked while the monitor is open (a data-loader worker) shares its lock's descriptor: close() must
    release the folder all the same, and that process ending must not release a later monitor's lock."""
    first = monitor(tmp_path)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the forked process: waits for its parent's word (or its end), then leaves without clean-up
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    try:
        first.close()
        with monitor(tmp_path) as later:
            os.close(write)  # the forked process ends now
            write = -1
            os.waitpid(child, 0)
            child = 0
            with pytest.raises(RuntimeError, match="in use"):
                monitor(tmp_path)
            assert later.step(0) is not None
    finally:
        if write >= 0:
            os.close(write)
        if child:
            os.waitpid(child, 0)


HOLD_LOCK = """
import fcntl, os, sys
descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(descriptor, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


# --- whole steps or nothing ------------------------------------------------------------------------------------


def test_a_write_failing_mid_block_leaves_whole_steps(tmp_path, monkeypatch) -> None:
    first = monitor(tmp_path)
    first.step(0)
    rows = step_counts(tmp_path / MONITOR_CSV)[0]
    real_write, csv = os.write, (tmp_path / MONITOR_CSV).resolve()

    def disk_fills(descriptor: int, data) -> int:
        if Path(os.readlink(f"/proc/self/fd/{descriptor}")) == csv:
            real_write(descriptor, bytes(data)[: len(data) // 3])  # 8 of 78 rows, say
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(descriptor, data)

    monkeypatch.setattr(os, "write", disk_fills)
    with pytest.raises(RuntimeError) as caught:
        first.step(1)
    monkeypatch.undo()
    assert one_line_naming(caught.value, tmp_path / MONITOR_CSV) and "No space left" in str(caught.value)
    assert step_counts(tmp_path / MONITOR_CSV) == {0: rows}  # the cut block is gone
    assert first.step(1) is not None  # and step 1 is probed again, in the same process
    assert step_counts(tmp_path / MONITOR_CSV) == {0: rows, 1: rows}
    first.close()
    with monitor(tmp_path) as reopened:  # a new monitor keeps both
        assert reopened.step(1) is None and sorted(set(reopened.table.step)) == [0, 1]


def test_an_interrupt_mid_block_is_rolled_back(tmp_path, monkeypatch) -> None:
    """Ctrl-C (any exception, not only a failed write) in the middle of a block: the block goes, the error stays."""
    first = monitor(tmp_path)
    first.step(0)
    rows = step_counts(tmp_path / MONITOR_CSV)[0]
    real_write, csv = os.write, (tmp_path / MONITOR_CSV).resolve()

    def interrupted(descriptor: int, data) -> int:
        if Path(os.readlink(f"/proc/self/fd/{descriptor}")) == csv:
            real_write(descriptor, bytes(data)[: len(data) // 2])
            raise KeyboardInterrupt
        return real_write(descriptor, data)

    monkeypatch.setattr(os, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        first.step(1)
    monkeypatch.undo()
    assert step_counts(tmp_path / MONITOR_CSV) == {0: rows}
    assert first.step(1) is not None and step_counts(tmp_path / MONITOR_CSV) == {0: rows, 1: rows}


def test_a_csv_changed_behind_the_monitor_is_left_alone(tmp_path) -> None:
    with monitor(tmp_path) as opened:
        opened.step(0)
        with open(tmp_path / MONITOR_CSV, "a") as handle:
            handle.write("rows someone else added\n")
        changed = (tmp_path / MONITOR_CSV).read_bytes()
        with pytest.raises(RuntimeError) as caught:
            opened.step(1)
        assert one_line_naming(caught.value, tmp_path / MONITOR_CSV) and "something else changed it" in str(
            caught.value
        )
    assert (tmp_path / MONITOR_CSV).read_bytes() == changed  # neither cut back nor written to


def test_a_kill_after_part_of_a_block_is_redone(written, tmp_path) -> None:
    source, rows = written
    folder = copy_folder(source, tmp_path / "out")
    path = folder / MONITOR_CSV
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: 1 + 2 * rows + 8]))  # step 2 cut after 8 whole rows
    with monitor(folder) as reopened:
        assert sorted(set(reopened.table.step)) == [0, 1]
        assert step_counts(path) == {0: rows, 1: rows}
        assert reopened.step(2) is not None
    assert step_counts(path) == {0: rows, 1: rows, 2: rows}


@pytest.mark.slow
def test_every_cut_of_the_last_block_is_complete_or_redone(tmp_path, no_fsync) -> None:
    """Property: the CSV cut at every byte offset of its last block (the folder's other files as written) opens
    with step 2 either whole or absent (to be probed again), and the file keeps whole steps only."""
    model = gcn(layers=1)  # one watched layer: a short block, fewer cuts
    source = tmp_path / "written"
    with monitor(source, model=model) as first:
        for step in range(3):
            first.step(step)
    rows = step_counts(source / MONITOR_CSV)[0]
    whole = (source / MONITOR_CSV).read_bytes()
    lines = whole.splitlines(keepends=True)
    start = len(b"".join(lines[: 1 + 2 * rows]))
    folder = copy_folder(source, tmp_path / "out")
    others = {path.name: path.read_bytes() for path in source.iterdir() if path.name != MONITOR_CSV}
    bad = []
    for cut in range(start, len(whole) + 1):
        for name, content in others.items():
            (folder / name).write_bytes(content)
        (folder / MONITOR_CSV).write_bytes(whole[:cut])
        with monitor(folder, model=model) as reopened:
            kept = reopened.table.groupby("step").size().to_dict()
            on_disk = step_counts(folder / MONITOR_CSV)
            complete = kept == on_disk == {0: rows, 1: rows, 2: rows} and cut == len(whole)
            redone = kept == on_disk == {0: rows, 1: rows} and cut < len(whole)
            if not (complete or redone):
                bad.append(cut)
            elif redone and cut % 53 == 0:  # a few of them probed again for real
                assert reopened.step(2) is not None and step_counts(folder / MONITOR_CSV)[2] == rows
    cases = len(whole) + 1 - start
    assert not bad, f"{len(bad)} of {cases} cuts kept a partial step 2, e.g. at bytes {bad[:5]}"


def test_a_csv_without_its_step_record_drops_a_short_last_step(written, tmp_path) -> None:
    """A CSV alone (copied without the folder's other files): a last step with fewer rows than the others is taken
    for a cut one."""
    source, rows = written
    folder = tmp_path / "alone"
    folder.mkdir()
    lines = (source / MONITOR_CSV).read_text().splitlines(keepends=True)
    (folder / MONITOR_CSV).write_text("".join(lines[: 1 + 2 * rows + 5]))
    with monitor(folder) as reopened:
        assert sorted(set(reopened.table.step)) == [0, 1]
    assert step_counts(folder / MONITOR_CSV) == {0: rows, 1: rows}


# --- corrupt CSVs: one line naming file, line and problem ------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda lines: lines[:3] + ["x" + lines[3]] + lines[4:], "line 4"),
        (lambda lines: lines[:2] + [lines[2].replace(",", ",,", 1)] + lines[3:], "line 3"),
        (lambda lines: lines[:5] + [lines[1]] + lines[5:], "line 6"),  # step 0 again after step 1: written twice
        (lambda lines: [lines[0], "\xff\xfe garbage\n"] + lines[1:], "line 2"),
    ],
    ids=["non-integer step", "extra field", "step written twice", "not a row"],
)
def test_a_corrupt_csv_is_one_line_naming_file_and_line(tmp_path, change, problem) -> None:
    header = "step,epoch,layer,layer_name,rows,metric,stat,value\n"
    rows = [f"{step},,{layer},conv{layer},node,effective_rank,value,1.5\n" for step in (0, 1) for layer in (1, 2)]
    lines = change([header, *rows])
    (tmp_path / MONITOR_CSV).write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        monitor(tmp_path)
    assert one_line_naming(caught.value, tmp_path / MONITOR_CSV) and problem in str(caught.value)


def mutate(text: bytes, generator: random.Random) -> bytes:
    """One random change of a valid file: bytes flipped, inserted, deleted, a field replaced, lines repeated."""
    data = bytearray(text)
    kind = generator.randrange(6)
    where = generator.randrange(len(data))
    if kind == 0:
        data[where] = generator.randrange(256)
    elif kind == 1:
        data[where:where] = bytes(generator.randrange(256) for _ in range(generator.randint(1, 8)))
    elif kind == 2:
        del data[where : where + generator.randint(1, 40)]
    elif kind == 3:
        data[where:where] = generator.choice([b",", b"\n", b'"', b"x", b"-1", b"1e400", b"nan", b"\r", b"\x00"])
    elif kind == 4:
        lines = bytes(data).splitlines(keepends=True)
        index = generator.randrange(1, len(lines))
        lines.insert(generator.randrange(1, len(lines) + 1), lines[index])
        data = bytearray(b"".join(lines))
    else:
        lines = bytes(data).splitlines(keepends=True)
        fields = lines[generator.randrange(1, len(lines))].split(b",")
        fields[generator.randrange(len(fields))] = generator.choice([b"", b"x", b"-3", b"2.5", b"NA", b"\xe9"])
        data[where:where] = b",".join(fields)
    return bytes(data)


@pytest.mark.slow
def test_fuzzed_csvs_load_or_give_the_one_line_error(written, tmp_path, no_fsync) -> None:
    """Seeded fuzzing: random bytes and mutated valid files (with the folder's other files as written) either load
    or raise ValueError in one line naming the file; never another exception."""
    source, _ = written
    whole = (source / MONITOR_CSV).read_bytes()
    generator = random.Random(44)
    header = whole.split(b"\n", 1)[0] + b"\n"
    cases = [bytes(generator.randrange(256) for _ in range(generator.randint(0, 300))) for _ in range(60)]
    cases += [header + case for case in cases[:60]]
    for _ in range(300):
        text = whole
        for _ in range(generator.randint(1, 3)):
            text = mutate(text, generator)
        cases.append(text)
    folder = tmp_path / "out"
    failures = []
    for number, content in enumerate(cases):
        shutil.rmtree(folder, ignore_errors=True)
        copy_folder(source, folder)
        (folder / MONITOR_CSV).write_bytes(content)
        try:
            monitor(folder).close()
        except ValueError as error:
            if not one_line_naming(error, folder / MONITOR_CSV):
                failures.append((number, f"{type(error).__name__}: {str(error)[:120]}"))
        except Exception as error:  # noqa: BLE001 (counted: every other exception is a failure)
            failures.append((number, f"{type(error).__name__}: {str(error)[:120]}"))
    assert not failures, f"{len(failures)} of {len(cases)} cases: {failures[:5]}"


@pytest.mark.slow
def test_a_damaged_step_record_never_fails_the_opening(written, tmp_path, no_fsync) -> None:
    """Seeded fuzzing of the record of whole steps beside a valid CSV: random bytes, mutations, other steps or
    counts; the folder always opens, keeping only whole steps of the CSV."""
    source, rows = written
    record = next(path for path in source.iterdir() if path.name.endswith(".steps"))
    text = record.read_bytes()
    generator = random.Random(7)
    cases = [bytes(generator.randrange(256) for _ in range(generator.randint(0, 40))) for _ in range(40)]
    cases += [mutate(text + b"9 9\n", generator) for _ in range(80)]
    cases += [b"0 %d\n1 %d\n2 %d\n" % counts for counts in [(rows, rows, rows + 5), (rows, 3, rows), (1, 1, 1)]]
    cases += [b"", b"0 %d\n" % rows, text + b"3 %d\n" % rows, text[:-3], b"2 %d\n1 %d\n0 %d\n" % (rows, rows, rows)]
    folder = tmp_path / "out"
    failures = []
    for number, content in enumerate(cases):
        shutil.rmtree(folder, ignore_errors=True)
        copy_folder(source, folder)
        (folder / record.name).write_bytes(content)
        try:
            with monitor(folder) as reopened:
                kept = reopened.table.groupby("step").size().to_dict()
            if not (
                set(kept) <= {0, 1, 2} and set(kept.values()) <= {rows} and step_counts(folder / MONITOR_CSV) == kept
            ):
                failures.append((number, kept))
        except Exception as error:  # noqa: BLE001 (counted: the record must never fail the opening)
            failures.append((number, f"{type(error).__name__}: {str(error)[:120]}"))
    assert not failures, f"{len(failures)} of {len(cases)} cases: {failures[:5]}"


# --- the caller's sample ---------------------------------------------------------------------------------------


def test_the_callers_data_is_not_moved_to_a_meta_model(tmp_path) -> None:
    data = graph()
    tensors = {key: (value, value.clone()) for key, value in data.items()}
    model = gcn().to("meta")
    watcher = CollapseMonitor(model, data, every=1, layers=model.convs)
    with pytest.raises(ValueError, match="meta"):
        watcher.step(0)
    for key, (tensor, values) in tensors.items():
        assert data[key] is tensor and tensor.device.type == "cpu" and torch.equal(tensor, values)
    assert watcher.sample.x is data.x  # the monitor keeps the caller's sample; its moved copy is its own


# --- out_dir and CSV path --------------------------------------------------------------------------------------


def test_an_out_dir_that_is_a_file_or_a_link_to_one_is_refused(tmp_path) -> None:
    target = tmp_path / "results.txt"
    target.write_text("precious\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    for out_dir in (target, link):
        with pytest.raises(ValueError) as caught:
            monitor(out_dir)
        assert "\n" not in str(caught.value) and str(out_dir) in str(caught.value)
    assert target.read_text() == "precious\n"


def test_a_symlink_at_the_csv_path_is_not_followed(tmp_path) -> None:
    target = tmp_path / "elsewhere.csv"
    target.write_text("precious\n")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / MONITOR_CSV).symlink_to(target)
    with pytest.raises(ValueError) as caught:
        monitor(folder)
    assert one_line_naming(caught.value, folder / MONITOR_CSV)
    assert "link" in str(caught.value).replace(str(folder), "")  # the problem named, beside the path
    assert target.read_text() == "precious\n" and (folder / MONITOR_CSV).is_symlink()


def test_a_symlink_planted_after_opening_is_not_followed(tmp_path) -> None:
    target = tmp_path / "elsewhere.csv"
    target.write_text("precious\n")
    folder = tmp_path / "out"
    with monitor(folder) as opened:
        (folder / MONITOR_CSV).unlink()
        (folder / MONITOR_CSV).symlink_to(target)
        with pytest.raises(OutputPathError) as caught:
            opened.step(0)
        assert one_line_naming(caught.value, folder / MONITOR_CSV) and "symbolic link" in str(caught.value)
    assert target.read_text() == "precious\n"


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_csv_path_that_is_no_regular_file_is_refused(tmp_path, kind) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / MONITOR_CSV
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to(os.devnull)
    else:
        path.mkdir()
    outcome: list[BaseException | None] = []

    def open_monitor() -> None:
        try:
            monitor(folder).close()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 (handed to the test's thread)
            outcome.append(error)

    opener = threading.Thread(target=open_monitor, daemon=True)
    opener.start()
    opener.join(10)
    if opener.is_alive():  # blocked opening the FIFO: unblock it, then fail
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        opener.join(10)
        pytest.fail(f"the monitor blocked opening the FIFO {path}")
    assert isinstance(outcome[0], ValueError), outcome
    assert one_line_naming(outcome[0], path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_callers_data_stays_on_the_cpu_for_a_gpu_model() -> None:
    data = graph()
    tensors = {key: value for key, value in data.items()}
    model = gcn()
    on_cpu = CollapseMonitor(model, data, every=1, layers=model.convs).step(0)
    model.cuda()
    on_gpu = CollapseMonitor(model, data, every=1, layers=model.convs).step(0)
    assert all(data[key] is tensor and tensor.device.type == "cpu" for key, tensor in tensors.items())
    assert on_gpu.value.tolist() == pytest.approx(on_cpu.value.tolist(), rel=1e-4, abs=1e-5, nan_ok=True)
