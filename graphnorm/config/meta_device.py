"""Building a model or a norm on torch's meta device (shapes only: nothing is allocated, so absurd sizes cost
nothing): the one-line error its constructor raises on a config's values (:func:`construction_error`) and a model's
parameter count (:func:`parameter_count`), on the smallest task (:data:`META_TASK_ARGUMENTS`). Both are memoized,
since a sweep asks the same of each of its grid points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# What a model takes from the task, at its smallest: model_kwargs are checked by building the model with these.
META_TASK_ARGUMENTS = {"in_channels": 1, "out_channels": 1, "atom_feature_dims": [1], "bond_feature_dims": [1]}
_PARAMETER_COUNTS: dict[str, int | None] = {}  # parameter_count's memo
_CONSTRUCTION_ERRORS: dict[str, str | None] = {}  # construction_error's memo


def parameter_count(model: str, keywords: dict[str, Any], num_layers: int | None) -> int | None:
    """Parameters and buffer entries of ``model`` built on the meta device with ``keywords`` (and ``num_layers``
    where not ``None``) on a one-feature task; ``None`` if it cannot be built. Memoized."""
    import torch

    from graphnorm.models import model_spec

    key = repr((model, num_layers, sorted(keywords.items())))
    if key not in _PARAMETER_COUNTS:
        if len(_PARAMETER_COUNTS) >= 4096:
            _PARAMETER_COUNTS.clear()
        spec = model_spec(model)
        task = {name: value for name, value in META_TASK_ARGUMENTS.items() if name in spec.parameters()}
        depth = {} if num_layers is None else {"num_layers": num_layers}
        try:
            with torch.device("meta"):
                built = spec.factory(**task, **keywords, **depth)
            _PARAMETER_COUNTS[key] = sum(t.numel() for t in (*built.parameters(), *built.buffers()))
        except Exception:  # noqa: BLE001 (the model's own checks report its errors: nothing to count)
            _PARAMETER_COUNTS[key] = None
    return _PARAMETER_COUNTS[key]


def construction_error(build: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """The one-line message of the error ``build(*args, **kwargs)`` raises, or ``None`` if it succeeds.

    It runs on the meta device (shapes only: no memory, so absurd sizes cost nothing) and is memoized, since a sweep
    checks the same keywords for each of its grid points. Any exception counts: these constructors receive the
    config's values, so whatever they raise on them is the config's error.
    """
    import torch

    key = repr((build, args, sorted(kwargs.items())))
    if key not in _CONSTRUCTION_ERRORS:
        if len(_CONSTRUCTION_ERRORS) >= 4096:
            _CONSTRUCTION_ERRORS.clear()
        try:
            with torch.device("meta"):
                build(*args, **kwargs)
            _CONSTRUCTION_ERRORS[key] = None
        except Exception as e:  # noqa: BLE001
            _CONSTRUCTION_ERRORS[key] = one_line(e)
    return _CONSTRUCTION_ERRORS[key]


def one_line(error: BaseException) -> str:
    """An exception's message on one line (whitespace, line breaks included, collapsed to single spaces)."""
    return " ".join(str(error).split()) or type(error).__name__
