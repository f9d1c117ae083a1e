"""Numbers and tables as text, one format everywhere: sweep summaries, the report, the results page, benchmarks.

A number has three significant digits (:func:`significant`); a mean ± std has the mean so, the std to the mean's
decimals, and the count of runs only where it differs from the table's usual count, which a title states once
(:func:`format_mean_std`). :func:`markdown_table` writes a GitHub-Markdown table from a DataFrame or from dict rows,
every header and cell escaped through :mod:`graphnorm.escaping`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from graphnorm.escaping import markdown_prose_cell, markdown_text

__all__ = ["significant", "decimals", "format_number", "format_mean_std", "markdown_table"]

# How a column's separator cell aligns its text (GitHub Markdown); None: the renderer's default (left).
ALIGNMENTS = {None: "---", "left": ":---", "right": "---:", "center": ":---:"}


def significant(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits in fixed point (``0.802``, ``85.2``, ``0.0412``; whole numbers of
    more digits keep them all: ``1234``), in scientific notation below ``1e-3`` (``8.57e-05``); '' for NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if value == 0 or not math.isfinite(value):
        return f"{value:.{digits - 1}f}" if value == 0 else str(value)
    if abs(value) < 1e-3:
        return f"{value:.{digits - 1}e}"
    return f"{value:.{decimals(value, digits)}f}"


def decimals(value: float, digits: int = 3) -> int:
    """How many decimals show ``value`` with ``digits`` significant digits in fixed point (0 for large numbers)."""
    if value == 0 or not math.isfinite(value):
        return digits - 1
    rounded = float(f"{abs(value):.{digits}g}")  # 0.9996 rounds up to 1.00: count the digits of the rounded value
    return max(0, digits - 1 - math.floor(math.log10(rounded)))


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA: a cell with no value."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def format_number(value: Any, digits: int = 3, missing: str = "-") -> str:
    """A table cell's text: a float with ``digits`` significant digits (:func:`significant`), an integer as written,
    a bool as ``yes`` / ``no``, None or NaN as ``missing``, anything else as ``str``."""
    if _missing(value):
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return significant(value, digits)
    return str(value)


def format_mean_std(
    mean: float | None,
    std: float | None = None,
    count: int | None = None,
    digits: int = 3,
    usual: int | None = None,
) -> str:
    """``mean ± std`` as one cell: the mean with ``digits`` significant digits, the std with as many decimals as the
    mean (in scientific notation when the mean is, below ``1e-3``), then ``(n=count)`` when ``usual`` is given and
    ``count`` differs from it (a table states its usual count once, in its title).

    No std (None, NaN: one run, the sample std is undefined) or ``count`` 1: the mean alone. No mean (None, NaN) or
    ``count`` 0: ''."""
    if _missing(mean) or count == 0:
        return ""
    mean = float(mean)
    text = significant(mean, digits)
    if not _missing(std) and math.isfinite(std) and (count is None or count > 1):
        tiny = 0 < abs(mean) < 1e-3  # the mean in scientific notation: the std too
        text += f" ± {std:.{digits - 1}e}" if tiny else f" ± {std:.{decimals(mean, digits)}f}"
    if count is not None and usual is not None and int(count) != int(usual):
        text += f" (n={int(count)})"
    return text


def markdown_table(
    rows: pd.DataFrame | Sequence[Mapping[str, Any]],
    prose: bool = False,
    *,
    index: bool = True,
    align: str | Mapping[str, str] | None = None,
    digits: int = 3,
    missing: str = "-",
) -> str:
    """A GitHub-Markdown table, ending in a line break; '' for no rows.

    ``rows``: a DataFrame (its index first, as columns named by the index names, unless ``index`` is False) or dict
    rows (columns: the first row's keys, in order). Cells go through :func:`format_number` (``digits``, ``missing``
    for None and NaN). Headers and cells are data, shown as written (:func:`graphnorm.escaping.markdown_text`);
    ``prose``: they are Markdown written by people (bold, code), kept as Markdown without HTML
    (:func:`graphnorm.escaping.markdown_prose_cell`). ``align``: ``"left"``, ``"right"`` or ``"center"`` for every
    column, or a mapping of column name to alignment (other columns: the default)."""
    header, body = _header_and_body(rows, index)
    if not header:
        return ""
    escape = markdown_prose_cell if prose else markdown_text

    def cell(value: Any) -> str:
        return escape(format_number(value, digits, missing))

    aligned = align if isinstance(align, Mapping) else dict.fromkeys(header, align)
    unknown = sorted({str(a) for a in aligned.values()} - {str(a) for a in ALIGNMENTS})
    if unknown:
        raise ValueError(f"unknown alignment(s) {unknown}; valid: left, right, center")
    separator = "|" + "".join(ALIGNMENTS[aligned.get(name)] + "|" for name in header)
    lines = ["| " + " | ".join("" if name is None else cell(name) for name in header) + " |", separator]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def _header_and_body(rows: pd.DataFrame | Sequence[Mapping[str, Any]], index: bool) -> tuple[list, list[list]]:
    """The column names and the rows' values of a DataFrame (index first when ``index``) or of dict rows."""
    if isinstance(rows, pd.DataFrame):
        names = [*(rows.index.names if index else []), *rows.columns]
        body = []
        for key, values in zip(rows.index, rows.itertuples(index=False, name=None)):
            keys = (key if isinstance(key, tuple) else (key,)) if index else ()
            body.append([*keys, *values])
        return (names if names else []), body
    if not rows:
        return [], []
    names = list(rows[0])
    return names, [[row.get(name) for name in names] for row in rows]
