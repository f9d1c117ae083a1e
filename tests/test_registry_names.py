"""Registered names (norms, models, datasets) follow one pattern: a lower-case letter, then lower-case letters,
digits and underscores, 64 characters at most. A name is a config value, a table cell, a file name and a heading, so
one holding markup, a pipe, a line break or a formula is refused when it is registered, with one line naming it and
the pattern."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from torch import nn

from graphnorm.data.registry import _DATASETS, available_datasets, register_dataset
from graphnorm.models.registry import _MODELS, available_models, register_model
from graphnorm.norms.registry import _NORMS, available_norms, register_norm

PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
HOSTILE_NAMES = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "a|b",
    "a`b",
    "two\nlines",
    "=hyperlink",
    "+1",
    "@sum",
    "rtl\u202eoverride",
    "x" * 65,
    "1norm",
    "_norm",
    "my-norm",
    "my norm",
    "my.norm",
    "norm\n",
    "nörm",
    "a\x00b",
]
VALID_NAMES = ["a", "norm_2", "x" * 64]


class Scale(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()

    def forward(self, x):
        return x


def _load(spec, root):  # a dataset loader that is never called
    raise AssertionError("not loaded")


REGISTER: dict[str, tuple[Callable[[str], Callable], dict]] = {
    "norm": (lambda name: register_norm(name)(Scale), _NORMS),
    "model": (lambda name: register_model(name, levels=("node",))(Scale), _MODELS),
    "dataset": (
        lambda name: register_dataset(name, level="node", task_type="multiclass", metric="acc")(_load),
        _DATASETS,
    ),
}


@pytest.mark.parametrize("kind", sorted(REGISTER))
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_name_outside_the_pattern_is_refused_with_one_line_naming_it(kind: str, name: str) -> None:
    register, registry = REGISTER[kind]
    try:
        with pytest.raises(ValueError) as error:
            register(name)
    finally:
        registry.pop(name, None)
    message = str(error.value)
    assert "\n" not in message and repr(name) in message and PATTERN in message, message


@pytest.mark.parametrize("kind", sorted(REGISTER))
@pytest.mark.parametrize("name", VALID_NAMES)
def test_a_name_in_the_pattern_registers(kind: str, name: str) -> None:
    register, registry = REGISTER[kind]
    try:
        register(name)
        assert name in registry
    finally:
        registry.pop(name, None)


def test_every_registered_name_fits_the_pattern() -> None:
    names = [*available_norms(), *available_models(), *available_datasets()]
    assert len(names) > 25  # the built-in ones are all imported
    assert [name for name in names if not re.fullmatch(PATTERN, name)] == []
