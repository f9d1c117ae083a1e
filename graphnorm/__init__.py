"""graphnorm: study and cure oversmoothing and dimensional collapse in GNNs and graph transformers.

The public names below are loaded on first use (PEP 562), so ``import graphnorm`` and the command line's
``--help`` and ``--version`` do not import torch or PyG; ``from graphnorm import build_norm`` works as always.
"""

from __future__ import annotations

import importlib
from typing import Any

UNKNOWN_VERSION = "0+unknown"  # the version when graphnorm runs from a source tree that pip has not installed

__all__ = ["norms", "available_norms", "build_norm", "pass_edge_index", "__version__"]

# Public name -> the module that defines it (None: the name is that submodule itself).
_LAZY = {
    "norms": None,
    "available_norms": "graphnorm.norms",
    "build_norm": "graphnorm.norms",
    "pass_edge_index": "graphnorm.norms",
}


def _installed_version() -> str:
    """The installed distribution's version (``importlib.metadata``), else :data:`UNKNOWN_VERSION`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("graphnorm")
    except PackageNotFoundError:
        return UNKNOWN_VERSION


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = _installed_version()
    elif name in _LAZY:
        module = _LAZY[name]
        value = (
            importlib.import_module(f"{__name__}.{name}")
            if module is None
            else getattr(importlib.import_module(module), name)
        )
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
