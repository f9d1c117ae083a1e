"""The results pages' structure, read from ``analysis/questions.yaml``: its questions (which studies answer each,
one page per question) and its headline findings (the summary's sentences, their numbers computed from the
collected tables; the format: :class:`Finding`).

A study is named as the pages know it: a folder under ``analysis/data/``, ``recorded/<study>`` (a study of
``recorded/measurements.csv``), ``recorded/notes`` (the notes that came with those measurements) or ``benchmarks``
(``benchmarks/ratios.csv``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from validate import read_csv_file

from graphnorm.files import load_yaml_file
from graphnorm.sweep.tables import significant

AGGREGATES = ("mean", "only", "last")
PLACEHOLDER = re.compile(r"\{(\w+)(?:\.(n|std))?\}")
DIGITS = 3


@dataclass
class Question:
    """A section of the page: a title, a sentence under it, and the studies that answer it, in order."""

    title: str
    studies: list[str]
    text: str = ""

    @property
    def anchor(self) -> str:
        """The heading's anchor as GitHub and Python-Markdown make it: lower case, punctuation dropped, spaces to -."""
        words = re.sub(r"[^\w\s-]", "", self.title.lower()).strip()
        return re.sub(r"[\s]+", "-", words)


@dataclass
class Finding:
    """A **finding** is one sentence of the page's summary whose numbers are computed from the collected tables:

    .. code-block:: yaml

        - title: Depth on Cora
          link: cora_depth_quick_3seeds          # the study the sentence links to
          table: cora_depth_quick_3seeds/runs.csv
          column: test_acc_last                  # default column of every value
          values:
            none: {where: {norm: none, num_layers: 16}}
            contranorm: {where: {norm: contranorm, num_layers: 16}}
          sentence: "at 16 layers a plain GCN falls to {none}, ContraNorm keeps {contranorm} ({none.n} seeds)"

    Each value is the mean of ``column`` over the rows of ``table`` that match ``where`` (cells compared as text)
    and whose ``contains`` columns hold the given text; ``aggregate: only`` asks for exactly one such row, ``last``
    takes the last one in the file (the newest entry of a table that grows by appending). A value may name its own
    ``table`` and ``column``. In the sentence ``{name}`` is the value with three significant digits, ``{name.std}``
    the sample std and ``{name.n}`` the number of rows. A value that matches no row, a name the sentence does not
    define, or a table that is not collected is a ``ValueError``: a finding never shows a number its data do not
    hold.
    """

    title: str
    link: str
    sentence: str
    values: dict[str, dict[str, Any]]
    table: str | None = None
    column: str | None = None
    where: dict[str, Any] = field(default_factory=dict)


@dataclass
class Structure:
    """The questions and findings of ``questions.yaml``."""

    questions: list[Question]
    findings: list[Finding]
    path: Path


def _require(condition: bool, path: Path, message: str) -> None:
    if not condition:
        raise ValueError(f"{path}: {message}")


def _text(entry: dict, key: str, path: Path, where: str, required: bool = True) -> str:
    value = entry.get(key, "" if not required else None)
    _require(isinstance(value, str) and (value.strip() or not required), path, f"{where}: {key} must be a text")
    return value.strip()


def load_structure(path: str | Path) -> Structure:
    """``questions.yaml`` checked: every question has a title and a list of study names, no study is listed twice,
    every finding has a title, link, sentence and values whose keys are known; ``ValueError`` naming the file and
    the entry otherwise."""
    path = Path(path)
    document = load_yaml_file(path, "results page structure")
    _require(isinstance(document, dict), path, "must hold a mapping with questions and findings")
    unknown = sorted(set(document) - {"questions", "findings"})
    _require(not unknown, path, f"unknown top-level key(s) {', '.join(map(str, unknown))}: questions, findings")
    questions, listed = [], set()
    for number, entry in enumerate(document.get("questions") or [], 1):
        where = f"question {number}"
        _require(isinstance(entry, dict), path, f"{where} must be a mapping (title, text, studies)")
        title, text = _text(entry, "title", path, where), _text(entry, "text", path, where, required=False)
        studies = entry.get("studies")
        ok = isinstance(studies, list) and studies and all(isinstance(s, str) and s for s in studies)
        _require(ok, path, f"{where} ({title}): studies must be a non-empty list of study names")
        for study in studies:
            _require(study not in listed, path, f"{where} ({title}) lists {study!r}, already listed by a question")
            listed.add(study)
        questions.append(Question(title, list(studies), text))
    _require(bool(questions), path, "lists no questions")
    findings = [_finding(entry, number, path) for number, entry in enumerate(document.get("findings") or [], 1)]
    return Structure(questions, findings, path)


def _finding(entry: Any, number: int, path: Path) -> Finding:
    """One finding of ``questions.yaml``, its keys checked."""
    where = f"finding {number}"
    _require(isinstance(entry, dict), path, f"{where} must be a mapping")
    known = {"title", "link", "sentence", "values", "table", "column", "where"}
    unknown = sorted(set(entry) - known)
    _require(not unknown, path, f"{where}: unknown key(s) {', '.join(map(str, unknown))}: {', '.join(sorted(known))}")
    values = entry.get("values")
    _require(isinstance(values, dict) and values, path, f"{where}: values must be a mapping of names to selections")
    for name, value in values.items():
        _require(isinstance(value, dict), path, f"{where}: value {name!r} must be a mapping (where, contains, ...)")
        extra = sorted(set(value) - {"where", "contains", "table", "column", "aggregate"})
        _require(not extra, path, f"{where}: value {name!r} has unknown key(s) {', '.join(map(str, extra))}")
        aggregate = value.get("aggregate", "mean")
        _require(aggregate in AGGREGATES, path, f"{where}: value {name!r}: aggregate must be one of {AGGREGATES}")
    return Finding(
        title=_text(entry, "title", path, where),
        link=_text(entry, "link", path, where),
        sentence=_text(entry, "sentence", path, where),
        values=values,
        table=entry.get("table"),
        column=entry.get("column"),
        where=entry.get("where") or {},
    )


def _selected(frame: pd.DataFrame, value: dict[str, Any], defaults: dict[str, Any], what: str) -> pd.DataFrame:
    """The rows of ``frame`` that match the value's ``where`` (and the finding's) and ``contains``."""
    rows = frame
    for column, wanted in {**defaults, **(value.get("where") or {})}.items():
        if column not in rows.columns:
            raise ValueError(f"{what}: the table has no column {column!r} (where)")
        rows = rows[rows[column].astype(str) == str(wanted)]
    for column, text in (value.get("contains") or {}).items():
        if column not in rows.columns:
            raise ValueError(f"{what}: the table has no column {column!r} (contains)")
        rows = rows[rows[column].astype(str).str.contains(str(text), regex=False)]
    return rows


def compute_value(data_dir: Path, finding: Finding, name: str) -> pd.Series:
    """The numbers behind ``{name}`` in ``finding``'s sentence (the rows it aggregates, as floats)."""
    value = finding.values[name]
    table, column = value.get("table", finding.table), value.get("column", finding.column)
    what = f"finding {finding.title!r}, value {name!r}"
    if not table or not column:
        raise ValueError(f"{what}: names no table or column")
    path = data_dir / table
    if not path.exists():
        raise ValueError(f"{what}: {path} is not collected: a finding needs its data")
    frame = read_csv_file(path, dtype=str, keep_default_na=False)
    if column not in frame.columns:
        raise ValueError(f"{what}: {path} has no column {column!r}")
    rows = _selected(frame, value, finding.where, f"{what} ({path})")
    aggregate = value.get("aggregate", "mean")
    if rows.empty or (aggregate == "only" and len(rows) != 1):
        needed = "exactly one" if aggregate == "only" else "at least one"
        raise ValueError(f"{what}: {len(rows)} rows of {path} match {value}; {needed} needed")
    numbers = pd.to_numeric(rows[column], errors="coerce")
    numbers = numbers.iloc[[-1]] if aggregate == "last" else numbers
    if not numbers.map(math.isfinite).all():
        raise ValueError(f"{what}: {path} column {column} holds a cell that is not a finite number")
    return numbers.astype(float)


def finding_sentence(data_dir: Path, finding: Finding) -> str:
    """``finding``'s sentence with its numbers filled in from ``data_dir`` (see the module docstring)."""
    numbers = {name: compute_value(data_dir, finding, name) for name in finding.values}

    def fill(match: re.Match) -> str:
        name, part = match.group(1), match.group(2)
        if name not in numbers:
            raise ValueError(f"finding {finding.title!r}: the sentence names {{{name}}}, not one of its values")
        values = numbers[name]
        if part == "n":
            return str(len(values))
        if part == "std":
            return significant(values.std(), DIGITS) if len(values) > 1 else "n/a"
        return significant(values.mean(), DIGITS)

    return PLACEHOLDER.sub(fill, finding.sentence)
