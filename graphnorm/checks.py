"""Argument checks that every layer shares: a graph's ``edge_index`` (and batch vector), a choice among names, a
positive number, a count, a name to register (:func:`check_name`).

One argument order everywhere, ``(value, ..., what, where)``: ``what`` names the argument, ``where`` (optional) the
norm, model or function that checks, and prefixes the message. One error type per kind of mistake: a wrong type
(not a tensor, a float ``edge_index``) is a ``TypeError``, a wrong value (shape, range, unknown name) a
``ValueError``.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from collections.abc import Iterable
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

T = TypeVar("T")


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def check_edge_index(edge_index: Any, num_nodes: int, batch: Tensor | None = None, where: str = "") -> None:
    """``edge_index`` must be an integer tensor ``[2, num_edges]`` of node ids in ``[0, num_nodes)``, and ``batch``
    (when given) a vector ``[num_nodes]``.

    Raises:
        TypeError: ``edge_index`` is not a tensor, or not of an integer dtype.
        ValueError: a wrong shape, node ids outside ``[0, num_nodes)``, or a tensor on the meta device (no ids).
    """
    prefix = _prefix(where)
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{prefix}edge_index must be a torch.Tensor, got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{prefix}edge_index must have shape [2, num_edges], got {tuple(edge_index.shape)}")
    if edge_index.is_floating_point() or edge_index.is_complex() or edge_index.dtype == torch.bool:
        raise TypeError(f"{prefix}edge_index must be an integer tensor, got {edge_index.dtype}")
    if edge_index.device.type == "meta":
        raise ValueError(f"{prefix}edge_index is on the meta device (it has no node ids); pass CPU or GPU tensors")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(
            f"{prefix}edge_index holds node ids in [{int(edge_index.min())}, {int(edge_index.max())}], outside "
            f"[0, {num_nodes}) for a graph of {num_nodes} nodes"
        )
    if batch is not None and (batch.dim() != 1 or batch.numel() != num_nodes):
        raise ValueError(f"{prefix}batch must have shape [num_nodes] = [{num_nodes}], got {tuple(batch.shape)}")


def check_choice(value: T, choices: Iterable[Any], what: str, where: str = "") -> T:
    """``value`` itself when it is one of ``choices``; else ``ValueError`` naming ``what`` and listing the choices."""
    choices = tuple(choices)
    if value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ValueError(f"{_prefix(where)}{what} must be one of {listed}; got {value!r}")
    return value


def check_positive(value: Any, what: str, where: str = "") -> float:
    """``value`` as a float when it is a finite number > 0 (``eps``, ``scale``, ...; a Python or NumPy number, not a
    bool); else ``ValueError``."""
    real = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if not real or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{_prefix(where)}{what} must be a finite number > 0, got {value!r}")
    return float(value)


def check_count(value: Any, what: str, where: str = "", minimum: int = 1, needed: str | None = None) -> int:
    """``value`` as a Python ``int`` when it is an integer >= ``minimum`` (a size, a width, a number of layers):
    a Python or NumPy integer, or anything else integral by ``operator.index``; else ``ValueError`` naming ``what``
    and what it must be (``needed``, default "a positive integer" or "an integer >= minimum"). A bool is refused
    (``True`` is no count), and so is a float, even a whole one (``16.0``: write ``16``)."""
    hint = ""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, Tensor) and value.dtype == torch.bool):
        hint = " (true/false is not a count)"
    else:
        try:
            count = operator.index(value)
        except TypeError:
            if isinstance(value, float) and value.is_integer():
                hint = f" (write {int(value)})"
        else:
            if count >= minimum:
                return count
    if needed is None:
        needed = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    raise ValueError(f"{_prefix(where)}{what} must be {needed}, got {value!r}{hint}")


# A registered norm, model or dataset, or a collected study: a config value, a table cell, a file name, a heading.
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"


def is_name(value: Any) -> bool:
    """Whether ``value`` is a string that fits :data:`NAME_PATTERN`."""
    return isinstance(value, str) and re.fullmatch(NAME_PATTERN, value) is not None


def check_name(value: Any, what: str, where: str = "") -> str:
    """``value`` when it is a name (:data:`NAME_PATTERN`: a lower-case letter, then lower-case letters, digits and
    underscores, 64 characters at most), so that it shows as itself wherever it lands; else a one-line
    ``ValueError`` naming ``what``, the value and the pattern."""
    if not is_name(value):
        raise ValueError(
            f"{_prefix(where)}{what} {value!r} does not match {NAME_PATTERN} (a lower-case letter, then a-z, 0-9, _)"
        )
    return value


def same_values(first: Tensor | None, second: Tensor | None) -> bool:
    """Whether two optional tensors hold the same values: the same tensor, both None, or equal shapes, devices and
    entries. A cache that compares its own copy this way sees an edit made through a NumPy view or ``.data``, which
    torch's version counter misses."""
    if first is second:
        return True
    if first is None or second is None or first.shape != second.shape or first.device != second.device:
        return False
    return torch.equal(first, second)
