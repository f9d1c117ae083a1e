"""A sweep's grid: the sweep YAML read and checked (:func:`load_sweep_config`), and expanded into one validated
:class:`graphnorm.config.RunConfig` per grid point (:func:`expand_grid`). A sweep config is YAML::

    name: cora_depth
    metric: test_acc               # optional: the summary's metric (default: first of test_acc/test_rocauc/test_mae)
    run_fn: mypackage.mymodule:run  # optional (default graphnorm.train:run); --run-fn overrides
    base: {dataset: cora, epochs: 200}                       # RunConfig keys shared by every run
    grid: {norm: [none, pairnorm], num_layers: [2, 8, 32], seed: [0, 1, 2]}   # norm: all = every registered norm
    norm_settings: {pairnorm: {norm_kwargs: {scale: 1.0}}}  # per-norm overrides of base keys
    exclude: [{num_layers: [32], seed: [2]}]   # grid points left out (every key of an entry matches)

Executing the grid: :mod:`graphnorm.sweep.runner`.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphnorm.config import RunConfig, apply_overrides, config_run_id
from graphnorm.files import load_yaml_file

SWEEP_KEYS = ("name", "description", "metric", "run_fn", "base", "grid", "norm_settings", "exclude")
MAX_GRID_RUNS = 100_000  # a grid beyond this is a typo, and its configs alone would fill the memory


def load_sweep_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Read a sweep YAML and apply ``key.path=value`` overrides (values read as YAML:
    :func:`graphnorm.config.apply_overrides`); the sweep's ``name`` defaults to the file's stem.
    ``FileNotFoundError`` for a missing file, ``ValueError`` (one line) for an empty, unreadable or malformed one
    (:func:`check_sweep_config`)."""
    path = Path(path)
    sweep = load_yaml_file(path, "sweep config")
    if sweep is None:
        raise ValueError(f"sweep config {path} is empty; it needs at least a grid, e.g. grid: {{seed: [0, 1]}}")
    if not isinstance(sweep, dict):
        raise ValueError(f"sweep config {path} must be a YAML mapping, got {type(sweep).__name__}")
    sweep = apply_overrides(sweep, overrides)
    sweep.setdefault("name", path.stem)
    check_sweep_config(sweep)
    return sweep


def check_sweep_config(sweep: dict[str, Any]) -> None:
    """Structural checks of a sweep config, each a one-line ``ValueError``: known sweep keys, a usable ``name``, a
    non-empty ``grid``, mappings where mappings belong, known RunConfig keys in ``base``, ``grid`` and
    ``norm_settings``, and no per-norm setting of a key the grid varies. The configs' values are checked by
    :func:`expand_grid`."""
    unknown = sorted(set(sweep) - set(SWEEP_KEYS))
    if unknown:
        raise ValueError(f"unknown sweep key(s) {unknown}; valid keys: {', '.join(SWEEP_KEYS)}")
    if not isinstance(sweep.get("name"), str) or not sweep["name"].strip():
        raise ValueError(f"sweep 'name' must be a non-empty string, got {sweep.get('name')!r}")
    if "/" in sweep["name"] or sweep["name"].startswith("."):
        raise ValueError(f"sweep 'name' is used as a directory name; got {sweep['name']!r}")
    if not sweep.get("grid"):  # not one silent base run
        raise ValueError(
            f"sweep 'grid' is {'missing' if 'grid' not in sweep else repr(sweep['grid'])}; give the values to run, "
            "e.g. grid: {seed: [0]}"
        )
    for key in ("base", "grid", "norm_settings"):
        if sweep.get(key) is not None and not isinstance(sweep[key], dict):
            raise ValueError(f"sweep '{key}' must be a mapping, got {type(sweep[key]).__name__}")
    for key in ("metric", "run_fn"):
        if sweep.get(key) is not None and not isinstance(sweep[key], str):
            raise ValueError(f"sweep '{key}' must be a string, got {sweep[key]!r}")
    fields = RunConfig.field_names()
    for section in ("base", "grid"):
        unknown = sorted(set(sweep.get(section) or {}) - set(fields))
        if unknown:
            raise ValueError(f"unknown config key(s) {unknown} in '{section}'; valid keys: {', '.join(fields)}")
    for key, values in (sweep.get("grid") or {}).items():
        if isinstance(values, list) and not values:
            raise ValueError(f"grid.{key} is an empty list; give at least one value")
    grid_keys = set(sweep.get("grid") or {})
    for norm, settings in (sweep.get("norm_settings") or {}).items():
        if not isinstance(settings, dict):
            raise ValueError(f"norm_settings.{norm} must be a mapping of config keys, got {type(settings).__name__}")
        unknown = sorted(set(settings) - set(fields))
        if unknown:
            valid = ", ".join(fields)
            raise ValueError(f"unknown config key(s) {unknown} in norm_settings.{norm}; valid keys: {valid}")
        # A per-norm value for a key the grid varies would silently collapse grid points into duplicates.
        clash = sorted(set(settings) & grid_keys)
        if clash:
            raise ValueError(f"norm_settings.{norm} sets {clash}, which the grid varies; remove one of them")
        if "norm" in settings:
            raise ValueError(f"norm_settings.{norm} may not set 'norm' itself")
    check_exclude(sweep.get("exclude"), grid_keys)


def check_exclude(exclude: Any, keys: set[str]) -> None:
    """``exclude`` is a list of mappings from grid keys to a value or a list of values (one-line ``ValueError``
    otherwise): an entry naming a key the grid does not vary would never match, so it is refused."""
    if exclude is None:
        return
    if not isinstance(exclude, list):
        raise ValueError(f"sweep 'exclude' must be a list of mappings, got {type(exclude).__name__}")
    for i, entry in enumerate(exclude):
        if not isinstance(entry, dict) or not entry:
            raise ValueError(f"exclude[{i}] must be a non-empty mapping of grid keys to values, got {entry!r}")
        unknown = sorted(set(entry) - keys)
        if unknown:
            raise ValueError(f"exclude[{i}] names {unknown}, which the grid does not vary; grid keys: {sorted(keys)}")


def excluded(point: dict[str, Any], exclude: list[dict[str, Any]] | None) -> bool:
    """Whether a grid point matches an ``exclude`` entry: each of the entry's keys takes one of its values."""
    return any(
        all(point[key] in (values if isinstance(values, list) else [values]) for key, values in entry.items())
        for entry in exclude or []
    )


def _grid_values(key: str, values: Any) -> list[Any]:
    """The values grid key ``key`` takes: a list as is, one value as a list of one, ``norm: all`` every registered
    norm."""
    from graphnorm.norms import available_norms

    if key == "norm" and values == "all":  # every registered norm, so the list never goes stale
        return available_norms()
    return values if isinstance(values, list) else [values]


def expand_grid(sweep: dict[str, Any], log: Callable[[str], None] | None = print) -> list[RunConfig]:
    """Every grid point as a validated RunConfig, in grid order (last grid key varies fastest).

    Points matching an ``exclude`` entry are left out. Raises ``ValueError`` naming the grid point for the first
    invalid config, and for duplicate points,
    so nothing starts unless every run is valid. ``norm: all`` leaves out the norms that cannot run on the
    config's model (:func:`graphnorm.config.unsupported_norm_reason`), saying which and why in one ``log`` line;
    a norm listed by name is checked like any other value.
    """
    from graphnorm.norms import norm_class

    check_sweep_config(sweep)
    base = sweep.get("base") or {}
    grid = sweep.get("grid") or {}
    norm_settings = sweep.get("norm_settings") or {}
    for norm in norm_settings:
        try:
            norm_class(norm)
        except (ValueError, TypeError) as e:
            raise ValueError(f"norm_settings: {e}") from None
    keys = list(grid)
    sizes = {key: len(_grid_values(key, grid[key])) for key in keys}
    if math.prod(sizes.values()) > MAX_GRID_RUNS:
        shape = " x ".join(f"{size} {key}" for key, size in sizes.items())
        raise ValueError(
            f"the grid has {math.prod(sizes.values()):,} points ({shape}), more than a sweep runs "
            f"({MAX_GRID_RUNS:,}): split it into several sweeps"
        )
    configs: list[RunConfig] = []
    seen: dict[str, dict[str, Any]] = {}
    left_out: dict[str, str] = {}  # norm -> why, for norm: all
    for values in itertools.product(*(_grid_values(k, grid[k]) for k in keys)):
        point = dict(zip(keys, values))
        if excluded(point, sweep.get("exclude")):
            continue
        merged = {**copy.deepcopy(base), **copy.deepcopy(point)}
        norm = str(merged.get("norm", RunConfig.norm)).lower()
        merged.update(copy.deepcopy(norm_settings.get(norm, {})))
        reason = _unsupported_reason(merged) if grid.get("norm") == "all" else None
        if reason:
            left_out.setdefault(norm, reason)
            continue
        config = _point_config(merged, point)
        run_id = config_run_id(config)
        if run_id in seen:
            raise ValueError(f"grid point {point} duplicates {seen[run_id]}: the grid lists a value twice")
        seen[run_id] = point
        configs.append(config)
    if not configs and sweep.get("exclude"):
        raise ValueError("sweep 'exclude' leaves out every grid point; nothing would run")
    if left_out and log is not None:
        log("norm: all leaves out " + "; ".join(f"{norm} ({why})" for norm, why in left_out.items()))
    return configs


def _unsupported_reason(values: dict[str, Any]) -> str | None:
    """Why these config values' norm cannot run on their model; ``None`` also when the values are invalid
    otherwise (:func:`_point_config` then names the problem)."""
    from graphnorm.config import unsupported_norm_reason

    try:
        return unsupported_norm_reason(RunConfig(**values))
    except (TypeError, ValueError, AttributeError):
        return None


def _point_config(values: dict[str, Any], point: dict[str, Any]) -> RunConfig:
    """The validated RunConfig of one grid point; ``ValueError`` naming the point otherwise."""
    try:
        return RunConfig.from_dict(values)
    except (ValueError, TypeError) as e:
        where = ", ".join(f"{k}={v!r}" for k, v in point.items()) or "base"
        # A TypeError here is a value of the wrong type; PyYAML's classic trap is 5e-4, read as a string.
        hint = " (a value has the wrong type; note YAML reads 5e-4 as a string: write 5.0e-4)" * isinstance(
            e, TypeError
        )
        raise ValueError(f"invalid run ({where}): {e}{hint}") from None


def grid_keys(sweep: dict[str, Any]) -> list[str]:
    """The config keys the sweep's grid varies, in grid order."""
    return list(sweep.get("grid") or {})
