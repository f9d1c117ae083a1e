"""Reading the YAML that users write (sweep configs, run configs, command-line override values), strictly.

Plain ``yaml.safe_load`` keeps the last of two equal keys without a word (``lr: 0.1`` then ``lr: 0.01`` further
down trains with 0.01), and its errors are multi-line tracebacks. Here a duplicate key is an error naming the key,
the file and the line, and every problem is a ``ValueError`` of one line: ``file:line:column: what``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping lists the same key twice."""


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys in a mapping (merge keys ``<<`` keep their meaning)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if duplicate:
                raise DuplicateKeyError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _one_line(error: yaml.YAMLError, source: str) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    if isinstance(error, DuplicateKeyError):
        return f"{where}: {error.problem} (each key may appear once per mapping)"
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{where}: YAML syntax error: {problem}"


def parse_yaml(text: str, source: str = "<text>") -> Any:
    """``text`` parsed by :class:`StrictLoader`; ``ValueError`` in one line naming ``source``, line and column."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except yaml.YAMLError as e:
        raise ValueError(_one_line(e, source)) from None


def load_yaml_file(path: str | Path, what: str = "config") -> Any:
    """The parsed content of the YAML file ``path`` (``None`` for an empty file).

    ``FileNotFoundError`` if it does not exist; ``ValueError`` (one line naming ``what`` and the file) if it is a
    directory, cannot be read, is not UTF-8 text, or is not valid YAML (with line and column), or repeats a key.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory, not a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise ValueError(f"{what} {path} cannot be read: {reason}") from None
    return parse_yaml(text, str(path))
