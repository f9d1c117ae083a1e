"""The docstrings' reStructuredText constructs as Markdown, for the documentation site.

graphnorm's docstrings are Google style (``Args:``, ``Raises:``) with a few reStructuredText constructs: math
(``:math:`x``` and ``.. math::`` blocks), Sphinx cross-reference roles (``:func:`build_norm```), titled links
(```"Title" <https://...>`_``) and literal blocks announced by ``::``. mkdocstrings renders docstrings as Markdown,
so :func:`rst_to_markdown` rewrites those constructs first (and splits an ``Args`` entry naming several
parameters, ``a, b: text``, into one entry each); :class:`RstToMarkdown` is the griffe extension that
applies it to every docstring the API reference renders, and the catalogue hook applies it to the registries'
class docstrings. Math becomes ``\\( ... \\)`` and ``$$ ... $$`` for pymdownx.arithmatex; a role becomes an
optional cross-reference (mkdocs-autorefs): a link where the site documents its target or ``api_links.py`` knows
its external page (torch, PyG, NumPy, Python), else plain code (so a private helper cannot break the strict
build); in the API reference a short name is resolved in its docstring's scope (``build_norm`` -> its full path).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import escape

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|obj|exc|const):`~?([^`]+)`")
_EXPLICIT_TITLE = re.compile(r"^(.+?)\s*<([^<>]+)>$", re.S)
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_TITLED_LINK = re.compile(r"`\"?([^`<]+?)\"?\s*<(https?://[^>\s]+)>`__?", re.S)
_MATH_DIRECTIVE = re.compile(r"^(\s*)\.\. math::\s*(.*)$")
_GROUPED = re.compile(r"^(\s+)(\w+(?:,\s*\w+)+):\s*(.*)$")
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def expand_grouped_arguments(lines: list[str]) -> list[str]:
    """``a, b: text`` in an Args section -> ``a: text`` and ``b: as `a`.`` (one entry per parameter, as griffe's
    Google parser and the signature check expect)."""
    out: list[str] = []
    in_args = False
    pending: tuple[str, str, list[str]] | None = None  # (indent, first name, the other names)
    for line in lines:
        if pending and line.strip() and _indent(line) <= len(pending[0]):
            out += [f"{pending[0]}{name}: as ``{pending[1]}``." for name in pending[2]]
            pending = None
        if _ARGS_HEADER.match(line):
            in_args = True
        elif line.strip() and not line.startswith(" "):
            in_args = False
        grouped = _GROUPED.match(line) if in_args else None
        if grouped:
            names = [name.strip() for name in grouped.group(2).split(",")]
            out.append(f"{grouped.group(1)}{names[0]}: {grouped.group(3)}")
            pending = (grouped.group(1), names[0], names[1:])
        else:
            out.append(line)
    if pending:
        out += [f"{pending[0]}{name}: as ``{pending[1]}``." for name in pending[2]]
    return out


def _role_text(match: re.Match[str], resolve: Callable[[str], str] | None = None) -> str:
    """``:func:`~a.b.c``` -> an optional cross-reference to ``a.b.c`` shown as ``c``; ``:func:`a.b.c``` shown as
    ``a.b.c`` (the text Sphinx would show). ``resolve`` turns a name into its full dotted path where it can."""
    target = match.group(1).strip()
    shown = target.rsplit(".", 1)[-1] if match.group(0).split("`", 1)[1].startswith("~") else target
    titled = _EXPLICIT_TITLE.match(target)
    if titled:  # :meth:`the step <CollapseMonitor.step>`: Sphinx's explicit title
        shown, target = titled.group(1), titled.group(2)
    identifier = resolve(target) if resolve else target
    return f'<autoref identifier="{escape(identifier)}" optional><code>{escape(shown)}</code></autoref>'


def _math_blocks(lines: list[str]) -> list[str]:
    """``.. math::`` and its indented lines -> a ``$$`` block at the directive's indentation."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _MATH_DIRECTIVE.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent, inline = match.group(1), match.group(2).strip()
        body = [inline] if inline else []
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)):
            body.append(lines[i].strip())
            i += 1
        while body and not body[-1]:
            body.pop()
        out += ["", f"{indent}$$", *(f"{indent}{line}" for line in body if line), f"{indent}$$", ""]
    return out


def rst_to_markdown(text: str, resolve: Callable[[str], str] | None = None) -> str:
    """The docstring ``text`` with its reStructuredText math, roles, titled links and ``::`` blocks as Markdown;
    ``resolve`` gives a role's full dotted path (default: the name as written)."""
    lines = _math_blocks(expand_grouped_arguments(text.splitlines()))
    converted = []
    for line in lines:
        if line.rstrip().endswith("::") and not line.strip().startswith(".."):
            line = line.rstrip()[:-1]  # "Usage::" -> "Usage:"; the indented block after it stays a code block
        converted.append(line)
    text = "\n".join(converted)  # roles, math and link titles may span lines: one line each in Markdown
    text = _MATH_ROLE.sub(lambda m: "\\(" + " ".join(m.group(1).split()) + "\\)", text)
    text = _ROLE.sub(lambda m: _role_text(m, resolve), text)
    return _TITLED_LINK.sub(_link, text)


def _link(match: re.Match[str]) -> str:
    title = " ".join(match.group(1).split())
    return f"[{title}]({match.group(2)})"


def scope_resolver(obj: griffe.Object) -> Callable[[str], str]:
    """A name as ``obj``'s docstring means it: resolved in ``obj``'s scope (its module's imports and members),
    else as written."""

    def resolve(name: str) -> str:
        head, _, rest = name.partition(".")
        try:  # "nn.Module" with "from torch import nn" -> "torch.nn.Module"
            return obj.resolve(name) if not rest else f"{obj.resolve(head)}.{rest}"
        except (griffe.NameResolutionError, KeyError, AttributeError):
            return name

    return resolve


def _objects(obj: griffe.Object):
    """``obj`` and every object it defines (not the names it imports), depth first."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class RstToMarkdown(griffe.Extension):
    """griffe extension: every docstring of a loaded package through :func:`rst_to_markdown`, once the whole
    package is loaded (so a role can be resolved against any module's imports)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = rst_to_markdown(obj.docstring.value, scope_resolver(obj))
