"""One registry for every normalization layer: create norms by name.

Usage::

    from graphnorm.norms import build_norm, available_norms
    norm = build_norm("pairnorm", channels=64, mode="PN-SI")
    y = norm(x, batch=batch, edge_index=edge_index)

Norm classes register themselves with :func:`register_norm`. ``build_norm`` checks the keyword
arguments against the class signature so a typo is a clear ``ValueError``, not a silent default.
``channels`` is only ever passed as ``channels`` (never into a parameter that means something else).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable

from torch import nn

from graphnorm.checks import check_count, check_name

_NORMS: dict[str, type[nn.Module]] = {}


def register_norm(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: register a norm under ``name`` (:data:`graphnorm.checks.NAME_PATTERN`: a lower-case letter,
    then a-z, 0-9 and _; also set as its ``registry_name``). The class is returned as it is: what a norm does at a
    call (input checks, the host's edges, half precision) comes from :class:`~graphnorm.norms.base.NormBase`.

    Raises:
        ValueError: ``name`` does not fit the pattern, or is registered to another class.
    """
    check_name(name, "norm name")

    def decorator(cls: type[nn.Module]) -> type[nn.Module]:
        if name in _NORMS and _NORMS[name] is not cls:
            raise ValueError(f"norm name {name!r} is already registered to {_NORMS[name].__name__}")
        _NORMS[name] = cls
        cls.registry_name = name
        return cls

    return decorator


def available_norms() -> list[str]:
    """Sorted names of every registered norm."""
    return sorted(_NORMS)


def norm_class(name: str) -> type[nn.Module]:
    """The class registered under ``name`` (case-insensitive); ``ValueError`` listing the choices if unknown."""
    if not isinstance(name, str):
        raise TypeError(f"norm name must be a string, got {type(name).__name__}")
    key = name.lower()
    if key not in _NORMS:
        raise ValueError(f"unknown norm {name!r}; valid choices: {', '.join(available_norms())}")
    return _NORMS[key]


def norm_keywords(name: str) -> list[str]:
    """The keyword arguments that norm ``name`` accepts (besides ``channels``)."""
    signature = inspect.signature(norm_class(name).__init__)
    return [p for p in signature.parameters if p not in ("self", "channels")]


def build_norm(name: str | nn.Module | None, channels: int, **kwargs) -> nn.Module:
    """Create the norm registered as ``name`` for ``channels`` features.

    ``name`` may also be an already-built ``nn.Module``, used as a template: each call returns an independent deep
    copy (no keywords allowed), so a model that fills many positions from one instance never shares parameters or
    running statistics between them. ``None`` means identity. Unknown names and unknown keywords raise
    ``ValueError`` listing the valid choices.
    """
    if isinstance(name, nn.Module):
        if kwargs:
            raise ValueError(f"keywords {sorted(kwargs)} given together with an already-built norm module")
        return copy.deepcopy(name)
    if name is None:
        name = "none"
    cls = norm_class(name)
    valid = norm_keywords(name)
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown keyword(s) {unknown} for norm {name.lower()!r}; valid keywords: {', '.join(valid) or '(none)'}"
        )
    return cls(check_count(channels, "channels"), **kwargs)
