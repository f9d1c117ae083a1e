"""Text from data and configs made safe where it lands: Markdown pages and tables, and CSV files users open.

A name, table cell, run id, config value or error message is shown as written, never as markup, and a spreadsheet
never runs it: :func:`markdown_text` (cells, headings, list items), :func:`markdown_code` (commands, paths) and
:func:`csv_text` / :func:`csv_safe` (a text cell starting a formula, OWASP's CSV injection rule, starts with ``'``;
numbers stay numbers). Markdown written by people (a study's notes, the page's questions, hand-made tables) stays
Markdown without HTML: :func:`markdown_prose` and :func:`markdown_prose_cell`. In Markdown, bidirectional-text
overrides and other control characters show as ``\\uXXXX``.
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Any

import pandas as pd

ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# < that opens a tag, a closing tag, a comment or declaration, a processing instruction, or an autolink
TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
ENTITY = re.compile(r"&(?=#[0-9]+;|#[xX][0-9a-fA-F]+;|[A-Za-z][A-Za-z0-9]*;)")
ATTRIBUTE_LIST = re.compile(r"\{(?=[^}\n]*=)")  # {: key=value } sets HTML attributes (attr_list)
LINK_TARGET = re.compile(r"\](?=\s*[(\[])")  # ](url) and ][ref] make a link of the text before
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
LINE_START = re.compile(r"[#>+\-*=~_:|]|\d+[.)]")  # a heading, quote, list, rule or fence when a line starts so
SAFE_SCHEMES = ("http", "https", "mailto")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def visible_controls(text: str) -> str:
    """``text`` with bidirectional overrides and control characters (line breaks and tabs excepted) as ``\\uXXXX``."""
    return "".join(
        f"\\u{ord(c):04x}" if c in BIDI_CONTROLS or (unicodedata.category(c) == "Cc" and c not in "\n\t\r") else c
        for c in text
    )


def markdown_text(value: Any, line_start: bool = False) -> str:
    """``value`` (any object, as ``str``) as one line of Markdown that shows it literally.

    Whitespace runs (line breaks included) become one space; ``|`` and backticks are backslash-escaped, and so is a
    backslash before punctuation (it cannot undo an escape); ``<`` that would open a tag or autolink and ``&`` that
    would start an entity become entities; ``]`` before ``(`` or ``[`` (a link), ``{`` of an attribute list
    (``{: onclick=...}``) and ``$`` (maths) are escaped. ``line_start``: the text starts a line, so a first character
    that would make it a heading, quote, list or rule is written as an entity. ``<=``, ``->`` and the like stay
    as written.
    """
    text = visible_controls(" ".join(str(value).split()))
    text = TAG_START.sub("&lt;", ENTITY.sub("&amp;", text))
    text = ATTRIBUTE_LIST.sub(r"\\{", LINK_TARGET.sub(r"\\]", _escape_backslashes(text)))
    text = text.replace("|", "\\|").replace("`", "\\`").replace("$", "\\$")
    if line_start and LINE_START.match(text):
        text = f"&#{ord(text[0])};{text[1:]}"
    return text


def _escape_backslashes(text: str) -> str:
    """A backslash before ASCII punctuation doubled, so that it shows as itself and escapes nothing."""
    return "".join(
        "\\\\" if c == "\\" and i + 1 < len(text) and text[i + 1] in ASCII_PUNCTUATION else c
        for i, c in enumerate(text)
    )


def markdown_code(value: Any) -> str:
    """``value`` as an inline code span on one line: fenced by one backtick more than its longest run of them."""
    text = visible_controls(" ".join(str(value).split()))
    if not text:
        return ""
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    padded = f" {text} " if "`" in text else text  # a span's content may not start or end with its fence
    return f"{fence}{padded}{fence}"


def markdown_prose(text: str) -> str:
    """Markdown written by people (notes, question texts) kept as Markdown (headings, lists, emphasis, code, links,
    maths), none of it made HTML.

    Outside code, ``<`` that would open a tag or comment becomes ``&lt;`` (``<https://...>`` autolinks stay), and
    attribute lists (``{: onclick=...}``), links whose target is neither relative nor http(s)/mailto, and the maths
    macros that make links, styles or load extensions (``\\href``, ``\\style``, ``\\require``) are escaped. Code is
    trusted only where Markdown surely reads it so: fences are plain lines of backticks or tildes (and a language),
    after a blank line, closed by the same, else every fence shows as text; a paragraph with a code span over two
    lines counts no code. Control characters and bidirectional overrides show as ``\\uXXXX``.
    """
    lines, fenced = _fences(visible_controls(str(text)).split("\n"))
    out: list[str] = []
    block: list[int] = []
    for number, line in enumerate(lines):
        if fenced[number] or line.strip():
            block.append(number)
            continue
        out += _prose_block(lines, fenced, block)
        out.append(line)
        block = []
    return "\n".join(out + _prose_block(lines, fenced, block))


def markdown_prose_cell(value: Any) -> str:
    """``value`` as a table cell of Markdown written by people (bold, inline code): one line of
    :func:`markdown_prose`, with ``|``, ``$`` and the backslash of ``\\(`` and ``\\[`` escaped outside code spans
    (a cell is no place for maths)."""
    text = markdown_prose(" ".join(str(value).split()))
    spans = _code_spans(text) or []
    code = {i for begin, end in spans for i in range(begin, end)}

    def cell(i: int, c: str) -> str:
        if i in code or _escaped(text, i):
            return c
        if c in "|$":
            return "\\" + c
        return "\\\\" if c == "\\" and text[i + 1 : i + 2] in ("(", "[") else c

    return "".join(cell(i, c) for i, c in enumerate(text))


FENCE_LIKE = re.compile(r"^[ \t>]*(`{3,}|~{3,})")
PLAIN_FENCE = re.compile(r"^(`{3,}|~{3,})[\w#.+-]*[ \t]*$")


def _fences(lines: list[str]) -> tuple[list[str], list[bool]]:
    """``lines`` and which of them are fenced code (fences included). Fences count only when every fence-like line
    is a plain one at the start of its line, each opening one after a blank line (or first) and closed by the same
    fence alone on a line; otherwise each fence-like line is written so that it opens nothing and no line counts as
    fenced."""
    fence_lines = [number for number, line in enumerate(lines) if FENCE_LIKE.match(line)]
    fenced = [False] * len(lines)
    plain = len(fence_lines) % 2 == 0
    for opening, closing in zip(fence_lines[::2], fence_lines[1::2]):
        match = PLAIN_FENCE.match(lines[opening])
        fence = match.group(1) if match else None
        after_text = opening > 0 and lines[opening - 1].strip()  # Markdown may take it as text or indented code
        if fence is None or after_text or not re.fullmatch(rf"{re.escape(fence)}[ \t]*", lines[closing]):
            plain = False
            break
        fenced[opening : closing + 1] = [True] * (closing + 1 - opening)
    if plain:
        return lines, fenced
    shown = [FENCE_LIKE.sub(_shown_fence, line) if number in fence_lines else line for number, line in enumerate(lines)]
    return shown, [False] * len(lines)


def _shown_fence(match: re.Match) -> str:
    """A fence-like line's start written so that it opens no fence (escaped backticks, an entity for ``~``)."""
    prefix, fence = match.group(0)[: match.start(1) - match.start(0)], match.group(1)
    return prefix + ("\\`" * len(fence) if fence[0] == "`" else "&#126;" + fence[1:])


def _prose_block(lines: list[str], fenced: list[bool], numbers: list[int]) -> list[str]:
    """The lines ``numbers`` of one block (no blank line between them) with their markup outside code escaped;
    fenced lines unchanged. The block is read as one text: a link's target may follow on the next line."""
    spans = {number: _code_spans(lines[number]) for number in numbers if not fenced[number]}
    if any(found is None for found in spans.values()):  # a run unmatched on its line: trust no span of the block
        spans = dict.fromkeys(spans, [])
    text = "\n".join(lines[number] for number in numbers)
    code = [False] * len(text)
    offset = 0
    for number in numbers:
        width = len(lines[number])
        for begin, end in [(0, width)] if fenced[number] else spans[number]:
            code[offset + begin : offset + end] = [True] * (end - begin)
        offset += width + 1
    edits = _prose_edits(text, code)
    escaped = "".join(edits.get(i, c) for i, c in enumerate(text))
    return escaped.split("\n") if numbers else []


AUTOLINK = re.compile(r"<(?:https?://|mailto:)[^\s<>\"'`]*>")
LINK_TARGET_START = re.compile(r"\](?=\()")
LINK_DEFINITION = re.compile(r"\[[^\[\]]*\]:")
LOOKAHEAD = 400  # characters of a link's target read for its scheme (entities spell a scheme in many)
# TeX macros of MathJax that make links, classes, styles or load extensions: their backslash is escaped
MATH_MACROS = re.compile(r"\\(?=(?:href|url|class|cssId|style|data|unicode|require|html)(?![A-Za-z]))")


def _prose_edits(text: str, code: list[bool]) -> dict[int, str]:
    """Replacements (position -> text) that show the prose's tags, attribute lists, unsafe links and the maths
    macros that make links or styles (``\\href``) as text."""
    autolinks = {m.start() for m in AUTOLINK.finditer(text) if not any(code[m.start() : m.end()])}
    edits = {m.start(): "&lt;" for m in TAG_START.finditer(text) if m.start() not in autolinks}
    edits.update({m.start(): "\\{" for m in ATTRIBUTE_LIST.finditer(text) if not _escaped(text, m.start())})
    edits.update({m.start(): "\\\\" for m in MATH_MACROS.finditer(text) if not _escaped(text, m.start())})
    for m in LINK_TARGET_START.finditer(text):
        if not _escaped(text, m.start()) and unsafe_url(text[m.end() + 1 : m.end() + 1 + LOOKAHEAD]):
            edits[m.start()] = "\\]"
    for m in LINK_DEFINITION.finditer(text):
        if not _escaped(text, m.start()) and unsafe_url(text[m.end() : m.end() + LOOKAHEAD]):
            edits[m.start()] = "\\["
    return {i: edit for i, edit in edits.items() if not code[i]}


def _escaped(text: str, position: int) -> bool:
    """Whether the character at ``position`` follows an odd number of backslashes (Markdown shows it as itself)."""
    backslashes = len(text[:position]) - len(text[:position].rstrip("\\"))
    return backslashes % 2 == 1


def _code_spans(line: str) -> list[tuple[int, int]] | None:
    """The inline code spans of ``line`` as (start, end), found as Markdown finds them (a backslash escapes the
    next character; a run of n backticks closes at the next run of exactly n); None when a run is not closed."""
    spans, i = [], 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] != "`":
            i += 1
            continue
        width = len(re.match(r"`+", line[i:]).group(0))
        closing = next(
            (m for m in re.finditer(r"`+", line[i + width :]) if len(m.group(0)) == width),
            None,
        )
        if closing is None:
            return None
        end = i + width + closing.end()
        spans.append((i, end))
        i = end
    return spans


def unsafe_url(url: str) -> bool:
    """Whether a link target runs or embeds something when followed: a scheme other than http(s) and mailto, once
    entities are decoded and the whitespace and controls browsers ignore are dropped (``jav&#x61;script:``)."""
    decoded = html.unescape(url)
    kept = "".join(c for c in decoded if not (c.isspace() or c in "<`\\" or unicodedata.category(c) == "Cc"))
    scheme = re.match(r"([a-z][a-z0-9+.\-]*):", kept.lower())
    return scheme is not None and scheme.group(1) not in SAFE_SCHEMES


def csv_text(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows rather than runs: a string starting with ``=``, ``+``, ``-``,
    ``@``, a tab or a carriage return gets a leading ``'``, unless it reads as a number (``-0.5``, ``+1e-3``), and
    its carriage returns become line breaks (a CSV writer ending lines with ``\\n`` leaves a lone ``\\r`` unquoted,
    which readers take as the end of the row); anything else is returned unchanged."""
    if not isinstance(value, str):
        return value
    quoted = "'" + value if value.startswith(FORMULA_START) and not NUMBER.fullmatch(value) else value
    return quoted.replace("\r\n", "\n").replace("\r", "\n")


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with :func:`csv_text` applied to its column names and the cells of its text columns (numeric
    columns are left untouched)."""
    frame = frame.rename(columns=lambda name: csv_text(name) if isinstance(name, str) else name)
    text_columns = [name for name, dtype in frame.dtypes.items() if not pd.api.types.is_numeric_dtype(dtype)]
    if not text_columns:
        return frame
    frame = frame.copy()
    for name in text_columns:
        frame[name] = frame[name].map(csv_text)
    return frame
