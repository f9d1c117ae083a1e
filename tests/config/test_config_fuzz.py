"""Fuzz ``RunConfig.from_dict`` with random mutations of valid configs (fixed seed, so the same cases every run).

Mutations: wrong types, out-of-range values, missing and extra keys, None, NaN, unicode strings, huge ints, nested
junk in ``norm_kwargs`` / ``model_kwargs``, and pairs of these. Each mutated config must be either accepted, or
rejected with a one-line ``ValueError`` naming a mutated key; nothing else may escape (no ``TypeError`` /
``KeyError``, nothing from inside torch or numpy). A sample of the accepted node-level configs then runs for real.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, get_type_hints

import pytest
import torch

from graphnorm.config import MODEL_CONFIG_KEYS, RunConfig, model_keywords
from graphnorm.data import GraphTask
from graphnorm.models import build_model, model_spec
from graphnorm.norms import available_norms, norm_keywords
from graphnorm.train.loaders import prepare_task
from graphnorm.train.loop import run

SEED = 0
MUTATIONS_PER_BASE = 400
RUNS = 8  # accepted node-level configs trained for real (1-2 epochs each, to keep the test short)

CORA_GCN = {"dataset": "cora", "num_layers": 2, "hidden_channels": 8, "epochs": 1, "probe": False}
ZINC_GCN_VIRTUAL_NODE = {
    "dataset": "zinc",
    "num_layers": 2,
    "hidden_channels": 8,
    "virtual_node": True,
    "readout": "virtual",
    "norm": "sepnorm",
    "limit_graphs": 50,
    "epochs": 1,
}
ZINC_GRAPHORMER = {
    "dataset": "zinc",
    "model": "graphormer",
    "num_layers": 2,
    "hidden_channels": 16,
    "num_heads": 4,
    "model_kwargs": {"ffn_channels": 16, "max_distance": 10},
    "optimizer": "adamw",
    "scheduler": "polynomial",
    "warmup_steps": 2,
    "total_steps": 20,
    "dropout": 0.1,
    "max_nodes": 40,
    "norm": "contranorm",
    "norm_kwargs": {"exclude_neighbors": False},
}
BASES = {"cora gcn": CORA_GCN, "zinc gcn + virtual node": ZINC_GCN_VIRTUAL_NODE, "zinc graphormer": ZINC_GRAPHORMER}

HINTS = get_type_hints(RunConfig)
KEYS = RunConfig.field_names()
JUNK: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2.5,
    2.0,
    -0.0,
    1e-320,
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    2**31,
    2**64,
    -(2**70),
    10**400,
    "",
    " ",
    "abc",
    "5e-4",
    "1E5",
    "2",
    "nan",
    "córa",
    "日本語",
    "line\nbreak",
    "sep\u2028arator",
    "\x00",
    "x" * 300,
    [],
    [1, "a"],
    {},
    {"a": {"b": [math.nan]}},
    ("tuple",),
    b"bytes",
]
STRINGS = ["cora", "zinc", "gcn", "graphormer", "sym", "row", "row_l1", "virtual", "rest", "adamw", "polynomial",
           "cosine", "plateau", "auto", "cpu", "cuda", "none", "pairnorm", "sepnorm", "/tmp/x", "."]  # fmt: skip
INTS = [-(2**63) - 1, -5, -1, 0, 1, 2, 3, 7, 16, 2**32, 2**63]
FLOATS = [-1.0, -1e-9, 0.0, 1e-12, 0.1, 0.5, 0.999, 1.0, 1.5, 3.0, 1e9]
EXTRA_KEYS: list[Any] = ["layers", "Lr", "num-layers", "lr ", "λ", "", 1, None, ("t",), 2.5]


def plausible_value(rng: random.Random, key: str) -> Any:
    """A value of the field's own type (or None where allowed), often out of range or not a valid choice."""
    hint = str(HINTS[key])
    choices: list[Any] = []
    if "int" in hint:
        choices += INTS
    if "float" in hint:
        choices += FLOATS + INTS[1:-1]
    if "bool" in hint:
        choices += [True, False]
    if "str" in hint and "dict" not in hint:
        choices += STRINGS
    if "None" in hint:
        choices.append(None)
    return rng.choice(choices or JUNK)


def nested_junk(rng: random.Random, depth: int = 0) -> Any:
    if depth < 2 and rng.random() < 0.3:
        return {rng.choice(["a", "mode", "tau", "p", 1]): nested_junk(rng, depth + 1) for _ in range(rng.randint(1, 2))}
    if depth < 2 and rng.random() < 0.2:
        return [nested_junk(rng, depth + 1) for _ in range(2)]
    return rng.choice(JUNK + FLOATS + INTS + ["PN", "PN-SI", "batchnorm", "layernorm", "contranorm"])


def mutate(rng: random.Random, values: dict[str, Any]) -> set[str]:
    """Apply one random mutation to ``values`` in place; the names of the keys it touched."""
    kind = rng.choice(["junk", "plausible", "plausible", "missing", "extra", "norm", "model_kwargs"])
    key = rng.choice(KEYS)
    if kind == "junk":
        values[key] = rng.choice(JUNK)
    elif kind == "plausible":
        values[key] = plausible_value(rng, key)
    elif kind == "missing":
        key = rng.choice(sorted(values, key=str))
        del values[key]
    elif kind == "extra":
        key = rng.choice(EXTRA_KEYS)
        values[key] = rng.choice(JUNK)
        return {str(key)}
    elif kind == "norm":
        norm = rng.choice(available_norms())
        keywords = norm_keywords(norm) + ["scael"]
        values["norm"] = norm
        values["norm_kwargs"] = {rng.choice(keywords): nested_junk(rng) for _ in range(rng.randint(0, 2))}
        return {"norm", "norm_kwargs"}
    else:
        own = [key for model in ("gcn", "graphormer") for key in model_spec(model).keywords()]
        keywords = [key for key in own if key not in MODEL_CONFIG_KEYS] + ["heads"]
        values["model_kwargs"] = {rng.choice(keywords): nested_junk(rng) for _ in range(rng.randint(1, 2))}
        key = "model_kwargs"
    return {key}


def mutated_configs() -> list[tuple[str, dict[str, Any], set[str]]]:
    """(base name, mutated values, mutated keys), the same list on every call."""
    rng = random.Random(SEED)
    cases = []
    for name, base in BASES.items():
        for _ in range(MUTATIONS_PER_BASE):
            values = {key: (dict(value) if isinstance(value, dict) else value) for key, value in base.items()}
            keys = mutate(rng, values)
            if rng.random() < 0.25:  # a second mutation on top
                keys |= mutate(rng, values)
            cases.append((name, values, keys))
    return cases


def outcome(values: dict[str, Any], keys: set[str]) -> tuple[RunConfig | None, str | None]:
    """The accepted config, or None and what is wrong with the way it was rejected (None when rejected well)."""
    try:
        return RunConfig.from_dict(values), None
    except ValueError as e:
        message = str(e)
        if len(message.splitlines()) != 1 or "\n" in message:
            return None, f"message of {len(message.splitlines())} lines: {message[:300]!r}"
        if not any(key in message for key in keys):
            return None, f"message does not name {sorted(keys)}: {message[:300]!r}"
        return None, None
    except Exception as e:  # noqa: BLE001 -- anything but a ValueError is the failure this test looks for
        return None, f"{type(e).__name__}: {str(e)[:300]!r}"


def test_mutated_configs_are_accepted_or_rejected_with_a_one_line_message_naming_the_key(
    data_root: Path, tmp_path: Path
) -> None:
    failures, accepted = [], []
    cases = mutated_configs()
    for name, values, keys in cases:
        config, problem = outcome(values, keys)
        if problem is not None:
            failures.append(f"{name} {sorted(keys)} -> {problem}\n    values: {values!r:.400}")
        elif config is not None:
            accepted.append((name, config, keys))
    assert not failures, f"{len(failures)} of {len(cases)} mutations failed:\n" + "\n".join(failures[:25])
    # Both outcomes are exercised, on every base.
    assert 0.1 * len(cases) < len(accepted) < 0.9 * len(cases), len(accepted)
    assert {name for name, _, _ in accepted} == set(BASES)

    # Every accepted config builds its model (on the meta device: no memory, whatever the sizes) for its real task.
    tasks: dict[str, GraphTask] = {}
    for _, config, _ in accepted:
        if config.dataset not in ("cora", "zinc") or config.num_layers > 4:
            continue  # other datasets are not loaded here (molhiv is large); more layers only cost time
        if config.dataset not in tasks:
            tasks[config.dataset] = prepare_task(RunConfig(dataset=config.dataset, data_root=str(data_root)))
        with torch.device("meta"):
            task = tasks[config.dataset]
            build_model(config.model, task, **model_keywords(config, task.level))

    # Accepted node-level configs run: a sample of the small ones, on the real Cora data.
    base = RunConfig.from_dict(CORA_GCN).to_dict()
    changed: dict[str, RunConfig] = {}  # distinct small configs that differ from the base, by their values
    for name, config, keys in accepted:
        values = config.to_dict()
        small = config.num_layers <= 2 and config.hidden_channels <= 16 and config.epochs <= 2
        if name == "cora gcn" and small and values != base and config.device != "cuda" and "data_root" not in keys:
            changed.setdefault(repr(values), config)
    assert len(changed) >= RUNS
    for config in random.Random(SEED).sample(sorted(changed.values(), key=repr), RUNS):
        config.data_root = str(data_root)
        for key in ("checkpoint_dir", "tensorboard_dir"):  # a mutated folder ("abc", ".") must not land in the cwd
            if getattr(config, key) is not None:
                setattr(config, key, str(tmp_path / key / getattr(config, key).strip("/")))
        record = run(config)
        assert 0.0 <= record["test_acc"] <= 1.0, config
        assert len(record["history"]) == config.epochs


@pytest.mark.parametrize("name", BASES)
def test_bases_are_valid(name: str) -> None:
    assert RunConfig.from_dict(BASES[name]).to_dict() == {**RunConfig().to_dict(), **BASES[name]}
