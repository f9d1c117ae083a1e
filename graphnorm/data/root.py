"""Where datasets live: the data root, and seeding it from an offline mirror.

The root comes from the ``root`` argument, else ``$GRAPHNORM_DATA``, else ``~/.cache/graphnorm/data``
(``$XDG_CACHE_HOME`` respected). With internet, the standard loaders download into it as usual.

Offline machines can point ``$GRAPHNORM_DATA_MIRROR`` at a read-only folder laid out exactly as the
loaders expect (``Planetoid/Cora/raw``, ``ZINC/raw``, ``ogb/ogbg_molhiv``...). Missing dataset folders
are copied from it into the writable root before loading, so the loaders' ``processed/`` files are never
written into the mirror.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

ENV_ROOT = "GRAPHNORM_DATA"
ENV_MIRROR = "GRAPHNORM_DATA_MIRROR"


def default_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "graphnorm" / "data"


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: ``root`` argument, else ``$GRAPHNORM_DATA``, else the user cache directory."""
    path = Path(root) if root is not None else Path(os.environ.get(ENV_ROOT) or default_root())
    path = path.expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    # Mirrors are often read-only; the loaders must be able to write processed/ next to raw/.
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            p.chmod(p.stat().st_mode | stat.S_IWUSR | stat.S_IRUSR | (stat.S_IXUSR if p.is_dir() else 0))
    path.chmod(path.stat().st_mode | stat.S_IWUSR | stat.S_IRUSR | stat.S_IXUSR)


def seed_from_mirror(root: Path, relative: str, required: list[str]) -> bool:
    """Copy ``mirror/relative`` into ``root/relative`` when files in ``required`` are missing there.

    ``required`` are paths relative to ``root/relative``. Returns True if a copy was made.
    """
    target = root / relative
    if all((target / r).exists() for r in required):
        return False
    mirror = mirror_root()
    if mirror is None or not (mirror / relative).exists():
        return False
    shutil.copytree(mirror / relative, target, dirs_exist_ok=True, copy_function=shutil.copyfile)
    _make_writable(target)
    return True
