"""The README's test command is the one CI runs (``.ci/run``), so the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    readme = (REPO / "README.md").read_text()
    match = re.search(r"\*\*Tests\*\*.*?```bash\n(.+?)\n```", readme, re.S)
    assert match, "README.md has no **Tests** paragraph with a bash block"
    return match.group(1).strip()


def ci_test_command() -> str:
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    marker = next(i for i, line in enumerate(lines) if line.startswith("# The README's test command"))
    return lines[marker + 1].strip()


def test_readme_test_command_is_what_ci_runs() -> None:
    assert readme_test_command() == ci_test_command()
    assert "-n auto" in ci_test_command()  # on every core
