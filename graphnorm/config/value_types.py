"""One config value on its own: how an error message quotes it (:func:`shown`, cut short without computing all of
it), how many items it may hold (:func:`check_value_size`) and whether it fits a type annotation
(:func:`check_value_type`: strict where YAML makes mistakes easy, naming the likely fix). :func:`check_types` runs
these over every field of a run config, :func:`check_keyword_types` over keywords against a function's annotations.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import reprlib
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from graphnorm.files import MAX_YAML_VALUES

MAX_INT = 2**63 - 1  # torch's int64; also the largest count tqdm and range() take
SHOWN_CHARS = 80  # a value quoted in an error message is cut to this many characters
# The most items (list items, mapping keys and values, nested ones counted in full) one config value may hold; the
# YAML reader's bound on a document with its aliases expanded, so that a value built in Python obeys it too.
MAX_VALUE_ITEMS = MAX_YAML_VALUES
# A number written without a dot or without an exponent sign, which YAML 1.1 (PyYAML) reads as a string.
YAML_STRING_NUMBER = re.compile(r"([-+]?)(\d*)(\.\d*)?([eE])([-+]?)(\d+)")


class _ShortRepr(reprlib.Repr):
    """``reprlib``'s bounded ``repr`` (a few items per level, a few levels), whose work does not grow with the
    value: a list that aliases expand to billions of items costs what its first few cost."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxset, self.maxfrozenset = 3, 6, 6, 6, 6
        self.maxdict, self.maxstring, self.maxother = 4, SHOWN_CHARS, SHOWN_CHARS

    def repr_str(self, x: str, level: int) -> str:
        return repr(x[: self.maxstring + 1])  # its start, cut with "..." by shown() as a whole

    def repr_int(self, x: int, level: int) -> str:
        # repr of an int over 4300 digits raises (sys.set_int_max_str_digits)
        return super().repr_int(x, level) if x.bit_length() <= 256 else f"<an integer of {x.bit_length()} bits>"


_SHORT_REPR = _ShortRepr()


def shown(value: Any) -> str:
    """``repr(value)`` cut short, without computing the whole of it, for a one-line error message (``repr``
    escapes newlines)."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def check_value_size(key: str, value: Any) -> None:
    """``ValueError`` naming ``key`` when ``value`` holds more than :data:`MAX_VALUE_ITEMS` items, nested ones
    counted in full (so a list repeated by reference counts every time): later checks and the run id walk it whole.
    Stops counting there, so a huge or recursive value costs no more than that."""
    count, pending = 0, [value]
    while pending:
        item = pending.pop()
        if not isinstance(item, (dict, list, tuple, set, frozenset)):
            continue
        count += len(item) * (2 if isinstance(item, dict) else 1)
        if count > MAX_VALUE_ITEMS:
            raise ValueError(
                f"{key} holds more than {MAX_VALUE_ITEMS} values (nested lists and mappings counted in full, each "
                f"time they are repeated): {shown(value)}"
            )
        pending.extend([*item.keys(), *item.values()] if isinstance(item, dict) else item)


def matches(value: Any, expected: Any) -> bool:
    """Whether ``value`` is an instance of the annotation ``expected`` (``int``, ``float | None``, ``dict[str, Any]``,
    ...). Strict where YAML makes mistakes easy: a bool is not a number, a float (even 2.0) is not an int, a float must
    be finite; an int is a valid float."""
    origin = get_origin(expected)
    if expected is Any:
        return True
    if expected is None or expected is type(None):
        return value is None
    if origin in (Union, UnionType):
        return any(matches(value, option) for option in get_args(expected))
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return isinstance(value, int) or math.isfinite(value)
    if origin is dict:
        key_type = get_args(expected)[0] if get_args(expected) else Any
        return isinstance(value, dict) and all(matches(key, key_type) for key in value)
    return isinstance(value, origin or expected)


def describe(expected: Any) -> str:
    """The annotation in an error message's words: ``int | None`` -> 'an integer or null'."""
    if get_origin(expected) in (Union, UnionType):
        options = get_args(expected)
        words = " or ".join(describe(option) for option in options if option is not type(None))
        return words + " or null" * (type(None) in options)
    names = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string", dict: "a mapping"}
    return names.get(get_origin(expected) or expected, f"a {getattr(expected, '__name__', expected)}")


def type_hint(value: Any, expected: Any) -> str:
    """The likely cause of a wrong type, for the usual mistakes (a quoted or YAML-string number, 2.0 for 2, true)."""
    wants_number = matches(1, expected)
    if isinstance(value, bool) and wants_number:
        return " (true/false is not a number)"
    if isinstance(value, str) and wants_number:
        try:
            number = float(value)
        except ValueError:
            return ""
        yaml_string = YAML_STRING_NUMBER.fullmatch(value.strip())
        if yaml_string and math.isfinite(number):
            sign, whole, fraction, e, exponent_sign, exponent = yaml_string.groups()
            fixed = f"{sign}{whole or '0'}{fraction if fraction and len(fraction) > 1 else '.0'}{e}"
            return f" (YAML reads {value} as a string: write {fixed}{exponent_sign or '+'}{exponent})"
        return " (a quoted number is a string: write it without quotes)" * math.isfinite(number)
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT and not matches(value, expected):
        return f" (write {int(value)})"
    return ""


def check_value_type(key: str, value: Any, expected: Any) -> None:
    """``ValueError`` naming ``key`` unless ``value`` fits the annotation ``expected`` (ints within int64)."""
    if not matches(value, expected):
        if isinstance(value, dict) and describe(expected).startswith("a mapping"):  # so a key is not a string
            raise ValueError(f"{key} must be a mapping with string keys, got {shown(value)}")
        raise ValueError(f"{key} must be {describe(expected)}, got {shown(value)}{type_hint(value, expected)}")
    if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value <= MAX_INT:
        raise ValueError(f"{key} must be at most 2**63 - 1 in size, got {shown(value)}")


@functools.cache
def annotations(function_or_class: Any) -> dict[str, Any]:
    """``typing.get_type_hints``, evaluated once per function or class."""
    return get_type_hints(function_or_class)


def check_keyword_types(where: str, keywords: dict[str, Any], function: Any) -> None:
    """Check each keyword's value against ``function``'s annotation for it (``where.key`` names it)."""
    hints = annotations(function)
    for key, value in keywords.items():
        if key in hints:
            check_value_type(f"{where}.{key}", value, hints[key])


def check_types(config: Any) -> None:
    """Every field against its annotation (:func:`check_value_type`), strictly: an ``int`` key takes an integer only
    (``2.0``, ``"2"`` and ``true`` are rejected, as YAML writes an integer without a dot or quotes), a ``float`` key
    takes an integer or a finite float (given ``lr: 1``, the config keeps the int 1), ``X | None`` also takes ``null``.
    A number PyYAML reads as a string (``5e-4``, ``1e5``: YAML 1.1 wants a dot and a signed exponent) is named as
    such, with its fix (``5.0e-4``)."""
    hints = annotations(type(config))
    for f in dataclasses.fields(config):
        check_value_size(f.name, getattr(config, f.name))
        check_value_type(f.name, getattr(config, f.name), hints[f.name])
