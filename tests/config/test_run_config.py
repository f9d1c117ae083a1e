"""The run configuration package: a config's run id stays the same string (a finished sweep is found again), a
config survives ``to_dict`` / ``from_dict``, and ``graphnorm.config`` hands out each module's public names."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import graphnorm.config
from graphnorm.config import RunConfig, config_run_id

GRAPHORMER = {
    "dataset": "zinc",
    "model": "graphormer",
    "num_layers": 4,
    "hidden_channels": 80,
    "num_heads": 8,
    "optimizer": "adamw",
    "scheduler": "polynomial",
    "warmup_steps": 10,
    "max_nodes": 64,
    "norm": "layernorm",
}
PAIRNORM_PROTOCOL = {
    "norm": "pairnorm",
    "norm_kwargs": {"scale": 2.0},
    "adjacency": "row",
    "layer_order": "dropout-conv-norm-act",
    "feature_norm": "row_l1",
    "eval_nodes": "rest",
}
# Ids written by earlier versions: a change to the hash (its keys, their order, how a value is written) would make
# every existing sweep re-run its finished runs.
RUN_IDS = [
    ({}, "none-L2-s0-bf21a9e8fb"),
    ({"norm": "contranorm", "num_layers": 8, "seed": 3}, "contranorm-L8-s3-911367fd1e"),
    ({"lr": 1, "epochs": 5, "data_root": "/tmp/x", "checkpoint_dir": "/tmp/c"}, "none-L2-s0-67f69df7e9"),
    ({"lr": 1.0}, "none-L2-s0-b711cc74eb"),
    ({"lr": 1}, "none-L2-s0-b711cc74eb"),
    (GRAPHORMER, "layernorm-L4-s0-9248748807"),
    (
        {"dataset": "zinc", "virtual_node": True, "readout": "virtual", "norm": "sepnorm", "limit_graphs": 50},
        "sepnorm-L2-s0-81bd926e46",
    ),
    (PAIRNORM_PROTOCOL, "pairnorm-L2-s0-60dfd10c84"),
]


@pytest.mark.parametrize(("values", "run_id"), RUN_IDS)
def test_run_ids_keep_their_strings(values: dict, run_id: str) -> None:
    assert config_run_id(RunConfig.from_dict(values)) == run_id


@pytest.mark.parametrize("values", [values for values, _ in RUN_IDS])
def test_a_config_survives_its_dict(values: dict) -> None:
    config = RunConfig.from_dict(values)
    again = RunConfig.from_dict(config.to_dict())
    assert again == config
    assert config_run_id(again) == config_run_id(config)


def defined_names(module: ModuleType) -> list[str]:
    """The public names ``module`` defines at its top level (functions, classes, constants), read from its source."""
    names = []
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


def test_the_package_exports_each_modules_public_names() -> None:
    exported = []
    modules = [info.name for info in pkgutil.iter_modules(graphnorm.config.__path__)]
    assert "run_config" in modules
    for name in modules:
        module = importlib.import_module(f"graphnorm.config.{name}")
        assert defined_names(module), name
        for key in defined_names(module):
            assert getattr(graphnorm.config, key) is getattr(module, key), f"graphnorm.config.{key}"
            exported.append(key)
    assert sorted(graphnorm.config.__all__) == sorted(exported)
