"""The package's code, comments and docstrings explain; they do not record: no machine timings, issue numbers, dates
or measured speed-ups (those belong on the results page and in benchmark output, which go stale with the machine).
Experiments and tests name no issue numbers either (a comment says what it means, e.g. "the sweep deadlock"), and
every module of the package opens with a short docstring: what it is for, with the theory on the site's pages."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "graphnorm"
MAX_MODULE_DOCSTRING_LINES = 12

TIME_UNIT = r"(?:ms|µs|us|ns|s|sec|secs|seconds?|min|minutes?|h|hours?)"
PATTERNS = {
    "issue number": re.compile(r"\b(?:issue|PR|pull request)s?\s*#?\d+|(?<![\w&#])#\d{1,4}\b(?![0-9a-fA-F])", re.I),
    "timing": re.compile(rf"\b\d+(?:[.,]\d+)?\s?{TIME_UNIT}\b(?!\w)"),
    "speed-up": re.compile(r"\b\d+(?:\.\d+)?x(?= [a-zA-Z(])"),  # "3.5x faster", "0.78x the time", "~75x fewer"
    "measurement": re.compile(r"\bmeasured\b[^.;]*?\d+(?:\.\d+)?"),
    "date": re.compile(
        r"\b20\d\d-[01]\d-[0-3]\d\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* (?:[0-3]?\d, )?20\d\d\b"
    ),
}


def prose_and_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal (docstrings included) of ``path``."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING) or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            for offset, line in enumerate(token.string.splitlines()):
                found.append((token.start[0] + offset, line))
    return found


def history_in(path: Path, kinds: tuple[str, ...] = tuple(PATTERNS)) -> list[str]:
    """One line per match of the ``kinds`` of :data:`PATTERNS` in ``path``'s prose: the comments and strings of a
    Python file, every line of a YAML file (its comments and values alike)."""
    relative = path.relative_to(REPO).as_posix()
    is_python = path.suffix == ".py"
    prose = prose_and_strings(path) if is_python else list(enumerate(path.read_text().splitlines(), start=1))
    problems = []
    for line, text in prose:
        for kind in kinds:
            for match in PATTERNS[kind].finditer(text):
                problems.append(f"{relative}:{line}: {kind} {match.group(0)!r} in: {text.strip()}")
    return problems


def test_the_patterns_catch_history() -> None:
    for text, kind in [
        ("# 10.8 s with 2 threads and 0.81 s with 1", "timing"),
        # Split in two literals, so that this file passes its own guard (which reads each literal alone).
        ("(issue " + "20)", "issue number"),
        ("see #" + "19", "issue number"),
        ("issues " + "20 and 37", "issue number"),
        ("probe 275 ms", "timing"),
        ("3.4x one forward", "speed-up"),
        ("~1.5x faster on CPU", "speed-up"),
        ("(measured: 6 of 10 failed)", "measurement"),
        ("measured on 2026-11-26", "date"),
        ("as of November 2026", "date"),
    ]:
        assert PATTERNS[kind].search(text), (kind, text)
    for text in [
        "color='#1f77b4'",
        "ICLR 2023",
        "Rusch et al. (2023)",
        "eps=1e-5",
        "layer 2 of 16",
        "# 3 heads",
        "20,000 x 64",
        "measured per graph",
    ]:
        assert not any(pattern.search(text) for pattern in PATTERNS.values()), text


def test_package_code_and_docstrings_record_no_history() -> None:
    problems = [problem for path in sorted(PACKAGE.rglob("*.py")) for problem in history_in(path)]
    assert not problems, "\n".join(problems)


def test_experiments_and_tests_name_no_issue_numbers() -> None:
    """Timings and measurements are what benchmarks and some tests are about, so only issue numbers are checked."""
    files = [
        path
        for folder in ("experiments", "tests")
        for path in sorted((REPO / folder).rglob("*"))
        if path.suffix in (".py", ".yaml", ".yml") and path.is_file()
    ]
    assert len(files) > 50, "the experiments and tests folders were not found"
    problems = [problem for path in files for problem in history_in(path, ("issue number",))]
    assert not problems, "\n".join(problems)


def docstring_problems(paths: list[Path]) -> list[str]:
    """One line per module of ``paths`` without a docstring or with one longer than MAX_MODULE_DOCSTRING_LINES."""
    problems = []
    for path in paths:
        docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        relative = path.relative_to(REPO).as_posix()
        if not docstring:
            problems.append(f"{relative}: no module docstring")
        elif len(docstring.splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            lines = len(docstring.splitlines())
            problems.append(f"{relative}: a module docstring of {lines} lines, more than {MAX_MODULE_DOCSTRING_LINES}")
    return problems


def test_package_modules_have_short_docstrings() -> None:
    """Every module says what it is for in at most MAX_MODULE_DOCSTRING_LINES lines; a derivation or a model's full
    definition goes to a concept page of the site (docs/concepts/), a function's details into its docstring."""
    problems = docstring_problems(sorted(PACKAGE.rglob("*.py")))
    assert not problems, "\n".join(problems)


def test_experiment_and_analysis_scripts_have_short_docstrings() -> None:
    """The same rule for the scripts beside the package: a protocol's details go to the function that runs it or to
    docs/how-to/reproduce-papers.md, the measured results to the results page."""
    paths = [path for folder in ("experiments", "analysis") for path in sorted((REPO / folder).rglob("*.py"))]
    assert len(paths) > 10, "the experiments and analysis folders were not found"
    problems = docstring_problems(paths)
    assert not problems, "\n".join(problems)
