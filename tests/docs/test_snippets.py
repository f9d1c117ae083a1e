"""Every ```python block of README.md and docs/**/*.md runs alone, as written: each in a fresh interpreter, from an
empty working folder, with the suite's data root, and prints what the page shows under it.

A block's expected output is the ```text block right after it (at most one line of prose between the two); numbers
are compared within the last shown digit (another CPU rounds otherwise), everything else word for word. A block
that must not run (it needs an object of the reader's, or a long job) has ``<!-- no-run: reason -->`` on the line
before its fence; such exceptions are few and each names its reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
NO_RUN = re.compile(r"<!-- no-run: (.+?) -->")
MAX_NO_RUN = 2
NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$", re.I)
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Snippet:
    page: str
    line: int
    code: str
    output: str | None  # the ```text block after it, if any
    no_run: str | None  # the reason, if marked

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def fenced_blocks(lines: list[str]) -> list[tuple[int, int, str, str]]:
    """(first line of the fence, line after its end, language, body) of every fenced block."""
    blocks, index = [], 0
    while index < len(lines):
        start = FENCE.match(lines[index])
        if not start:
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if lines[i].rstrip() == "```"), len(lines))
        blocks.append((index, end + 1, start.group(1), "\n".join(lines[index + 1 : end]) + "\n"))
        index = end + 1
    return blocks


def page_snippets(path: Path) -> list[Snippet]:
    lines = path.read_text().splitlines()
    blocks = fenced_blocks(lines)
    snippets = []
    for number, (start, end, language, body) in enumerate(blocks):
        if language != "python":
            continue
        output = None
        if number + 1 < len(blocks) and blocks[number + 1][2] == "text":
            between = [line for line in lines[end : blocks[number + 1][0]] if line.strip()]
            output = blocks[number + 1][3] if len(between) <= 1 else None
        marker = NO_RUN.search(lines[start - 1]) if start else None
        snippets.append(Snippet(str(path.relative_to(REPO)), start + 1, body, output, marker and marker.group(1)))
    return snippets


SNIPPETS = [snippet for page in PAGES for snippet in page_snippets(page)]


def same_output(expected: str, printed: str) -> bool:
    """Word for word, except that a number may differ by one unit of its last shown digit."""
    want, got = expected.split(), printed.split()
    if len(want) != len(got):
        return False
    for a, b in zip(want, got):
        a, b = a.strip(",:[]{}()"), b.strip(",:[]{}()")
        if a == b:
            continue
        if not (NUMBER.match(a) and NUMBER.match(b)):
            return False
        digits = len(a.split(".")[1].split("e")[0]) if "." in a else 0
        if abs(float(a) - float(b)) > 1.01 * 10**-digits:
            return False
    return True


def test_the_pages_have_snippets_and_few_exceptions() -> None:
    assert len(SNIPPETS) >= 8
    skipped = [s for s in SNIPPETS if s.no_run]
    assert len(skipped) <= MAX_NO_RUN, [s.name for s in skipped]
    assert all(len(s.no_run.split()) >= 3 for s in skipped), "each no-run marker says why"


def test_output_comparison() -> None:
    assert same_output("{1: 57.7, 32: 5.6}\nok", "{1: 57.8, 32: 5.6} ok")
    assert not same_output("{1: 57.7}", "{1: 57.9}") and not same_output("0.682", "0.684 x")
    assert not same_output("layernorm", "pairnorm")


@pytest.mark.slow
@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if not s.no_run], ids=lambda s: s.name)
def test_snippet_runs_alone(snippet: Snippet, tmp_path: Path, data_root: Path) -> None:
    env = {**os.environ, "GRAPHNORM_DATA": str(data_root), "PYTHONHASHSEED": "0"}
    result = subprocess.run(
        [sys.executable, "-c", snippet.code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"{snippet.name} failed:\n{result.stderr[-3000:]}"
    if snippet.output is not None:
        assert same_output(snippet.output, result.stdout), (
            f"{snippet.name} printed:\n{result.stdout}\nthe page shows:\n{snippet.output}"
        )
