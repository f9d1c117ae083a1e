"""``graphnorm.memory``: what the process can still allocate (meminfo, cgroup v1 and v2 limits, rlimits) and the
one-line refusal of an estimate above it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from graphnorm import memory
from graphnorm.memory import (
    InsufficientMemoryError,
    available_bytes,
    cgroup_headroom,
    check_fits,
    format_bytes,
    meminfo_available,
)

GiB = 1 << 30


def test_format_bytes_reads_like_a_person_writes_it() -> None:
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(1000 * GiB) == "1000 GiB"
    assert format_bytes(745 * 1024 * GiB) == "745 TiB"
    assert format_bytes(10**400).startswith("2**1328 ")  # no float overflow


def test_check_fits_refuses_in_one_line_with_both_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * GiB)
    check_fits(GiB, "a graph")  # fits
    with pytest.raises(InsufficientMemoryError) as refused:
        check_fits(3 * GiB, "a graph of num_nodes=10", "lower num_nodes")
    assert str(refused.value) == (
        "a graph of num_nodes=10 needs about 3 GiB of memory, more than the 2 GiB available; lower num_nodes"
    )
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, MemoryError)


def test_small_estimates_and_an_unknown_limit_pass_without_looking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 0)
    check_fits(memory.SMALL_BYTES - 1, "small")
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    check_fits(10**30, "anything")


def test_this_machine_reports_some_memory_available() -> None:
    available = available_bytes()
    assert available is not None and 0 < available <= meminfo_available()


def write_cgroup(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def test_cgroup_v2_headroom_counts_inactive_page_cache_as_free(tmp_path: Path) -> None:
    membership = tmp_path / "cgroup"
    membership.write_text("0::/user.slice/job\n")
    write_cgroup(
        tmp_path / "fs/user.slice/job",
        {"memory.max": "4294967296\n", "memory.current": "3221225472\n", "memory.stat": "inactive_file 536870912\n"},
    )
    assert cgroup_headroom(tmp_path / "fs", membership) == GiB + GiB // 2
    write_cgroup(tmp_path / "fs/user.slice/job", {"memory.max": "max\n"})
    assert cgroup_headroom(tmp_path / "fs", membership) is None


def test_cgroup_v1_headroom_and_a_namespaced_root(tmp_path: Path) -> None:
    membership = tmp_path / "cgroup"
    membership.write_text("5:cpu:/\n4:memory:/outside/view\n0::/\n")
    # the process's own folder is not visible (a container's namespace): the mount's root is its cgroup
    write_cgroup(
        tmp_path / "fs/memory",
        {
            "memory.limit_in_bytes": str(2 * GiB),
            "memory.usage_in_bytes": str(GiB),
            "memory.stat": "cache 0\ntotal_inactive_file 0\n",
        },
    )
    assert cgroup_headroom(tmp_path / "fs", membership) == GiB
    write_cgroup(tmp_path / "fs/memory", {"memory.limit_in_bytes": "9223372036854771712"})  # v1's "no limit"
    assert cgroup_headroom(tmp_path / "fs", membership) is None


def test_an_address_space_limit_bounds_what_is_available() -> None:
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31));"
        "from graphnorm.memory import available_bytes; print(available_bytes())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0 < int(done.stdout) < 1 << 31
