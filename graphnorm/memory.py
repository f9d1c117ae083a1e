"""Whether memory that a user's size asks for can be had, judged before it is allocated.

A size a user gives (a generated graph's nodes and features, an estimator's random features, a model's width and
depth) can ask for more memory than the machine has; allocating it anyway pages for seconds to minutes before numpy
or torch gives up with a traceback from deep inside. :func:`check_fits` compares an estimate of the bytes with
:func:`available_bytes` first and raises :class:`InsufficientMemoryError`: one line with both numbers.

:func:`available_bytes` is the least of: the memory the kernel can give without swapping (``MemAvailable`` of
``/proc/meminfo``; elsewhere the free or physical memory ``os.sysconf`` reports), the headroom under the process's
cgroup limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``; page cache counts as free), and the headroom under
its ``RLIMIT_AS`` and ``RLIMIT_DATA`` limits.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

# Below this, an allocation is not worth reading /proc for: whatever fails to allocate it fails fast.
SMALL_BYTES = 64 << 20
NO_LIMIT = 1 << 60  # cgroup v1 writes its "no limit" as a page-rounded 2**63 - 1
CGROUP_ROOT = Path("/sys/fs/cgroup")


class InsufficientMemoryError(MemoryError, ValueError):
    """A size whose memory the machine does not have, refused before allocating; a ``ValueError`` too, since the
    size is the input's mistake (callers that report bad input in one line catch it as such)."""


def format_bytes(nbytes: int) -> str:
    """``nbytes`` in binary units, three significant digits: ``'1.5 GiB'``, ``'745 TiB'``."""
    nbytes = int(nbytes)
    if nbytes < 1024:
        return f"{nbytes} B"
    if nbytes >= 1024**7:  # any size a user can type: float(10**400) would overflow
        return f"2**{nbytes.bit_length() - 1} B"
    exponent = min((nbytes.bit_length() - 1) // 10, 6)
    value = nbytes / 1024**exponent
    return f"{value:.3g} {'BKMGTPE'[exponent]}iB" if value < 1000 else f"{value:.0f} {'BKMGTPE'[exponent]}iB"


def meminfo_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes the kernel can hand out without swapping (Linux ``MemAvailable``), else ``os.sysconf``'s free pages,
    else its physical pages; ``None`` when neither is known."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):  # macOS has the second only
        try:
            return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _stat(path: Path, key: str) -> int:
    """One counter of a cgroup's ``memory.stat`` (0 when absent)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_headroom(root: Path = CGROUP_ROOT, self_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """Bytes left under the memory limit of this process's cgroup (v2 or v1), the inactive page cache counted as
    free; ``None`` without a limit. The cgroup's own folder and the mount's root (a container's namespaced view) are
    both read, the smaller headroom wins."""
    try:
        memberships = self_cgroup.read_text().splitlines()
    except OSError:
        memberships = []
    folders = []  # (folder, limit file, usage file, inactive page cache key)
    for line in memberships:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, relative = parts[0], parts[1], parts[2].lstrip("/")
        if controllers == "":  # v2 unified hierarchy
            for folder in dict.fromkeys((root / relative, root)):
                folders.append((folder, "memory.max", "memory.current", "inactive_file"))
        elif "memory" in controllers.split(","):
            for folder in dict.fromkeys((root / "memory" / relative, root / "memory")):
                folders.append((folder, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
    headrooms = []
    for folder, limit_file, usage_file, inactive in folders:
        limit = _read_int(folder / limit_file)
        usage = _read_int(folder / usage_file)
        if limit is None or limit >= NO_LIMIT or usage is None:
            continue
        headrooms.append(max(0, limit - usage + _stat(folder / "memory.stat", inactive)))
    return min(headrooms) if headrooms else None


def rlimit_headroom(status: Path = Path("/proc/self/status")) -> int | None:
    """Bytes left under the process's address-space (``RLIMIT_AS``) and data (``RLIMIT_DATA``) limits, from its
    current ``VmSize`` and ``VmData``; ``None`` without a limit."""
    try:
        sizes = {
            line.split(":")[0]: int(line.split()[1]) * 1024
            for line in status.read_text().splitlines()
            if line.startswith(("VmSize:", "VmData:"))
        }
    except (OSError, ValueError, IndexError):
        sizes = {}
    headrooms = []
    for limit_name, used in ((resource.RLIMIT_AS, "VmSize"), (getattr(resource, "RLIMIT_DATA", None), "VmData")):
        if limit_name is None:
            continue
        soft, _ = resource.getrlimit(limit_name)
        if soft != resource.RLIM_INFINITY and soft < NO_LIMIT:
            headrooms.append(max(0, soft - sizes.get(used, 0)))
    return min(headrooms) if headrooms else None


def available_bytes() -> int | None:
    """The memory this process can still allocate without swapping (module docstring); ``None`` if unknown."""
    known = [n for n in (meminfo_available(), cgroup_headroom(), rlimit_headroom()) if n is not None]
    return min(known) if known else None


def check_fits(nbytes: int, what: str, hint: str = "") -> None:
    """:class:`InsufficientMemoryError` when ``nbytes`` (an estimate of what ``what`` allocates, e.g.
    ``"csbm: num_nodes=10000000000 and num_features=16"``) is more than :func:`available_bytes`; one line:
    ``<what> need(s) about <n> of memory, more than the <m> available[; <hint>]``."""
    if nbytes < SMALL_BYTES:
        return
    available = available_bytes()
    if available is not None and nbytes > available:
        raise InsufficientMemoryError(
            f"{what} needs about {format_bytes(nbytes)} of memory, more than the {format_bytes(available)} "
            f"available{f'; {hint}' if hint else ''}"
        )
