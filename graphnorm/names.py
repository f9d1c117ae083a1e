"""The one pattern for the names a user picks: registered norms, models and datasets, and collected studies.

A name becomes a config value, a table cell, a file name, a heading and its anchor, so it is plain: a lower-case
letter, then lower-case letters, digits and underscores, 64 characters at most. :func:`check_name` raises a
one-line ``ValueError`` naming the value and the pattern.
"""

from __future__ import annotations

import re

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
_NAME = re.compile(NAME_PATTERN)


def is_name(value: object) -> bool:
    """Whether ``value`` is a string that fits :data:`NAME_PATTERN`."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check_name(value: object, what: str) -> str:
    """``value`` when it fits :data:`NAME_PATTERN`; else a one-line ``ValueError`` naming ``what`` (``"norm
    name"``), the value and the pattern."""
    if not is_name(value):
        raise ValueError(f"{what} {value!r} does not match {NAME_PATTERN} (a lower-case letter, then a-z, 0-9, _)")
    return value
