"""The public pages (README.md, docs/, the generated results pages) hold no internal notes: no issue numbers, no
notes on which machine ran what or what else shared its cores. Such notes belong in the commit history."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INTERNAL = re.compile(
    r"\bissues? #?\d+|^[-*\s]*machine: |\bruns on vm\b|these machines|shar(?:ed|ing) the cores|helpers' tests"
    r"|the author's (?:tests|profiling)|\bbusy machine\b",
    re.IGNORECASE | re.MULTILINE,
)


def public_pages() -> list[Path]:
    analysis = REPO / "analysis"
    return [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        analysis / "README.md",
        *sorted((analysis / "questions").glob("*.md")),
    ]


def internal_notes(text: str) -> list[str]:
    """Each hit with a little of its context."""
    return [text[max(0, m.start() - 40) : m.end() + 40].replace("\n", " ") for m in INTERNAL.finditer(text)]


def test_the_pattern_finds_internal_notes() -> None:
    notes = "{} 18 item 3: x. Before {} 20's kernels.\n- machine: runs on vm; a CI run shared the cores".format(
        "Issue", "issue"
    )  # built, so that this file names no issue number itself
    assert len(internal_notes(notes)) == 5
    assert internal_notes("a machine with 2 cores; your machine: see below; the issue tracker; GitHub issues") == []


def test_public_pages_hold_no_internal_notes() -> None:
    found = {str(page.relative_to(REPO)): internal_notes(page.read_text()) for page in public_pages()}
    found = {page: hits for page, hits in found.items() if hits}
    assert not found, found
