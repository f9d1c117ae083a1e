"""Text from data and configs lands as text: in the sweep's summary and tables, in the results page (and the site
built from it), and in the CSV files users open in a spreadsheet.

Each Markdown writer gets hostile strings (tags, event handlers, pipes, backticks, line breaks, links to
``javascript:``, attribute lists, maths, bidirectional overrides, very long text) and its output is rendered with the
Markdown extensions of ``mkdocs.yml``: no element or attribute may come from the data, tables keep their shape, and
a table cell shows the string as written. Each CSV writer gets spreadsheet formulas (OWASP's CSV injection rule: a
text cell starting with ``=``, ``+``, ``-``, ``@``, tab or carriage return) and numbers, and no formula may start a
cell while numbers stay numbers.
"""

from __future__ import annotations

import csv
import functools
import json
import random
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import markdown
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ANALYSIS = REPO / "analysis"
if str(ANALYSIS) not in sys.path:  # the page's modules sit beside build.py (analysis/ is not a package)
    sys.path.insert(0, str(ANALYSIS))

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<svg/onload=alert(1)>",
    "<!-- hidden -->",
    "a|b",
    "`code` and ``two``",
    "```",
    "line one\nline two\r\nline three",
    "[click](javascript:alert(1))",
    "![image](javascript:alert(1))",
    "<javascript:alert(1)>",
    "{: onclick=alert(1) }",
    "$\\href{javascript:alert(1)}{x}$",
    "\\(x\\) and \\[y\\]",
    "back\\|slash\\`tick\\<b>",
    "&lt;script&gt;",
    '=HYPERLINK("http://evil.example","x")',
    "+1+1",
    "@SUM(A1:A2)",
    "right\u202eleft\u2066isolate",
    "x" * 5000 + "<script>alert(1)</script>",
]
FORMULAS = ['=HYPERLINK("http://evil.example","x")', "=1+1", "+1+1", "-2+3", "@SUM(A1:A2)", "\tTAB", "\rCR"]
NUMBERS_AS_TEXT = ["-0.5", "+3", "-1e-3", "0.25"]
TABLE_TAGS = {"table", "thead", "tbody", "tr", "th", "td", "a"}  # a: an http(s) address, linked (magiclink)
MARKDOWN_TAGS = TABLE_TAGS | {"p", "code", "pre", "div", "span", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li",
                              "em", "strong", "a", "img", "hr", "blockquote", "br", "details", "summary"}  # fmt: skip
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


@functools.cache
def site_extensions() -> tuple[list[str], dict[str, dict]]:
    """The Markdown extensions of mkdocs.yml and their options."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    names, options = [], {}
    for entry in config["markdown_extensions"]:
        name, option = next(iter(entry.items())) if isinstance(entry, dict) else (entry, None)
        names.append(name)
        options[name] = option or {}
    return names, options


def render(text: str) -> str:
    """``text`` rendered as the documentation site renders it: Python-Markdown with the extensions of mkdocs.yml."""
    names, options = site_extensions()
    return markdown.Markdown(extensions=names, extension_configs=options).convert(text)


class Elements(HTMLParser):
    """The elements of a page (tag and attributes), the text of every table row's cells, and the page's text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def elements(html: str) -> Elements:
    parsed = Elements()
    parsed.feed(html)
    return parsed


def live_markup(html: str, allowed: set[str] = MARKDOWN_TAGS, maths: bool = False) -> list[str]:
    """What the data made of the page: elements Markdown does not make, event-handler attributes, links or images
    whose target runs script (``javascript:``, ``vbscript:``, ``data:``), and (unless ``maths``) maths, which the
    site's MathJax typesets (its ``\\href`` makes links)."""
    found = []
    for tag, attrs in elements(html).elements:
        if tag not in allowed:
            found.append(f"<{tag}>")
        if not maths and "arithmatex" in (attrs.get("class") or ""):
            found.append(f"<{tag} class=arithmatex>")
        for key, value in attrs.items():
            target = "".join((value or "").split()).lower()
            if key.startswith("on") or target.startswith(("javascript:", "vbscript:", "data:")):
                found.append(f"<{tag} {key}={value!r}>")
    return found


def shown(text: str) -> str:
    """How a cell shows ``text``: whitespace runs folded to one space, bidirectional controls as ``\\uXXXX``."""
    return "".join(f"\\u{ord(c):04x}" if c in BIDI else c for c in " ".join(text.split()))


def _id(text: str) -> str:
    return repr(text[:24])


# --- the Markdown table writer (sweep summaries, the results page) -------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE, ids=_id)
def test_markdown_table_shows_hostile_cells_as_text(text: str) -> None:
    from graphnorm.sweep.tables import markdown_table

    table = pd.DataFrame({text: [text, "plain"], "n": [1, 2]}, index=pd.Index([text, "b"], name=text))
    html = render(markdown_table(table))
    assert live_markup(html, TABLE_TAGS) == []
    rows = elements(html).rows
    assert rows == [[shown(text), shown(text), "n"], [shown(text), shown(text), "1"], ["b", "plain", "2"]]


@pytest.mark.parametrize("text", HOSTILE, ids=_id)
def test_sweep_summary_shows_a_hostile_sweep_and_norm_name_as_text(tmp_path: Path, text: str) -> None:
    from graphnorm.sweep.tables import write_summary

    runs = pd.DataFrame(
        {"run_id": ["a", "b"], "status": "ok", "dataset": "cora", "norm": [text, "none"], "num_layers": 2,
         "seed": 0, "test_acc": [0.5, 0.25]}
    )  # fmt: skip
    write_summary({"name": text, "metric": "test_acc", "grid": {"norm": [text, "none"]}}, runs, tmp_path, log=print)
    html = render((tmp_path / "summary.md").read_text())
    assert live_markup(html) == []
    page = elements(html)
    assert [len(row) for row in page.rows] == [2, 2, 2] and page.rows[1][0] == shown(text)
    assert shown(text) in html_text(html)


def html_text(html: str) -> str:
    """The text of ``html`` (entities decoded)."""
    parts: list[str] = []
    parser = HTMLParser(convert_charrefs=True)
    parser.handle_data = parts.append
    parser.feed(html)
    return "".join(parts)


def hostile_sweep(text: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs and layers of a sweep whose norm, dataset, model and a config value that varies within a norm (so it is
    part of the label) hold ``text``."""
    runs = pd.DataFrame(
        {"run_id": ["a", "b", "c", "d"], "dataset": text, "model": text, "norm": [text, text, "none", "none"],
         "num_layers": 2, "seed": 0, "optimizer": [text, "sgd", "adam", "sgd"],
         "test_acc": [0.5, 0.6, 0.2, 0.3], "majority_acc": 0.1}
    )  # fmt: skip
    layers = pd.DataFrame(
        [{"run_id": run, "layer": layer, "layer_name": text, "rows": "node", "metric": metric, "value": 1.0,
          "stat": "value"}
         for run in runs["run_id"] for layer in (1, 2) for metric in ("effective_rank", "cone_angle")]
    )  # fmt: skip
    return runs, layers


@pytest.mark.parametrize("text", HOSTILE, ids=_id)
def test_report_summary_shows_hostile_names_as_text(text: str) -> None:
    from graphnorm.sweep.report import summary_markdown

    runs, layers = hostile_sweep(text)
    for digits in (None, 3):
        html = render(summary_markdown(runs, layers, "test_acc", digits=digits))
        assert live_markup(html) == []
        rows = elements(html).rows
        assert rows and all(len(row) == 2 for row in rows), rows  # label and one depth: no cell split or merged
        assert any(row[0].startswith(shown(text)) for row in rows)


# --- CSV files users open --------------------------------------------------------------------------------------------


def formula_cells(path: Path) -> list[str]:
    """The cells of a CSV file that a spreadsheet would run: text starting with = + - @ tab or CR, not a number."""
    with path.open(newline="", encoding="utf-8") as file:
        cells = [cell for row in csv.reader(file) for cell in row]
    return [cell for cell in cells if cell[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(cell)]


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("text", FORMULAS, ids=_id)
def test_sweep_tables_write_no_formula_and_keep_numbers(tmp_path: Path, text: str) -> None:
    from graphnorm.sweep.tables import atomic_write_csv

    frame = pd.DataFrame({"run_id": ["a", "b"], "error": [text, None], "number_text": ["-0.5", "+3"],
                          "value": [-0.5, 2.0], text: [1, 2]})  # fmt: skip
    atomic_write_csv(tmp_path / "runs.csv", frame)
    assert formula_cells(tmp_path / "runs.csv") == []
    back = pd.read_csv(tmp_path / "runs.csv")
    assert back["value"].tolist() == [-0.5, 2.0] and back["number_text"].tolist() == [-0.5, 3.0]
    assert back["error"][0] == "'" + text.replace("\r", "\n")  # as written after the quote (a lone CR: a line break)


def sweep_folder(run_dir: Path, norm: str = "none", model: str = "gcn", dataset: str = "cora", text: str = "") -> Path:
    """A finished sweep folder (runs.csv, layers.csv, sweep.yaml, written as graphnorm sweep writes them) of two
    runs: two seeds of one cell, the optimizer (a config key that varies) and the layer names holding ``text``."""
    from graphnorm.sweep.tables import atomic_write_csv

    run_dir.mkdir(parents=True)
    runs = pd.DataFrame(
        {"run_id": ["r0", "r1"], "status": "ok", "dataset": dataset, "model": model, "norm": norm, "num_layers": 2,
         "seed": [0, 1], "optimizer": [text or "adam", "sgd"], "test_acc": [0.5, 0.25]}
    )  # fmt: skip
    atomic_write_csv(run_dir / "runs.csv", runs)
    layers = [{"run_id": run, "layer": 1, "layer_name": text or "conv", "rows": "node", "metric": "effective_rank",
               "value": -0.5, "stat": "value"} for run in ("r0", "r1")]  # fmt: skip
    atomic_write_csv(run_dir / "layers.csv", pd.DataFrame(layers))
    (run_dir / "sweep.yaml").write_text("name: s\nmetric: test_acc\ngrid: {seed: [0, 1]}\n")
    return run_dir


@pytest.mark.parametrize("text", FORMULAS, ids=_id)
def test_collected_study_tables_write_no_formula_and_keep_numbers(tmp_path: Path, text: str) -> None:
    from collect import collect_sweep

    out = collect_sweep(sweep_folder(tmp_path / "sweep", text=text), "study", tmp_path / "data")
    for name in ("runs.csv", "layers.csv"):
        assert formula_cells(out / name) == [], name
    assert pd.read_csv(out / "layers.csv")["value"].tolist() == [-0.5, -0.5]


# --- the results page ------------------------------------------------------------------------------------------------


def write_study(data: Path, name: str, runs: pd.DataFrame, **provenance: str) -> Path:
    """A collected sweep study ``data/name`` (runs.csv, provenance.json) without layers: the page draws no figure."""
    folder = data / name
    folder.mkdir(parents=True)
    runs.to_csv(folder / "runs.csv", index=False)
    record = {"command": "graphnorm sweep s.yaml", "commit": "abc1234", "date": "2026-01-01 00:00 UTC",
              "machine": "runs on vm", "source": "runs/s", "runs_ok": len(runs), "runs_expected": len(runs),
              "complete": True, "metric": "test_acc", "note": "", **provenance}  # fmt: skip
    (folder / "provenance.json").write_text(json.dumps(record))
    return folder


def study_runs(norm: str = "none", model: str = "gcn", dataset: str = "cora") -> pd.DataFrame:
    return pd.DataFrame(
        {"run_id": ["r0", "r1"], "dataset": dataset, "model": model, "norm": norm, "num_layers": 2, "seed": [0, 1],
         "test_acc": [0.5, 0.25]}
    )  # fmt: skip


def build(data: Path, out: Path) -> str:
    from page import build_page

    return build_page(data, out, "python analysis/build.py").read_text()


@pytest.mark.parametrize("column", ["norm", "model", "dataset"])
@pytest.mark.parametrize("text", HOSTILE[:5] + ["My-Norm", "a b"], ids=_id)
def test_a_study_naming_a_norm_model_or_dataset_outside_the_pattern_is_refused(
    tmp_path: Path, column: str, text: str
) -> None:
    """Before: a norm named ``<script>alert(1)</script>`` reached the page raw, as live script elements."""
    write_study(tmp_path / "data", "study", study_runs(**{column: text}))
    with pytest.raises(ValueError) as error:
        build(tmp_path / "data", tmp_path / "out")
    message = str(error.value)
    assert "\n" not in message and "runs.csv" in message and f"column {column}" in message and "[a-z]" in message


def hostile_data(data: Path, text: str) -> None:
    """A data folder whose every free-text field holds ``text``: a sweep study's provenance and notes, a folder of
    tables (its header, cells and notes), the recorded measurements and the benchmark ratios."""
    study = write_study(data, "study", study_runs(), command=text, commit=text, date=text, machine=text,
                        source=text, note=text, commit_note=text)  # fmt: skip
    (study / "notes.md").write_text(f"# Notes\n\n{text}\n\nA [link](https://example.org) and `code`.\n")
    tables = data / "tables"
    tables.mkdir()
    pd.DataFrame({"name": [text, "b"], text: [text, "**1.5**"]}).to_csv(tables / "t.csv", index=False)
    (tables / "notes.md").write_text(text)
    recorded = {"study": "recorded_study", "dataset": text, "model": text, "variant": text, "norm": text, "seed": "0",
                "split": text, "metric": text, "value": "0.5", "epoch": text, "date": text, "commit": text,
                "command": text, "source": text}  # fmt: skip
    (data / "recorded").mkdir()
    pd.DataFrame([recorded, {**recorded, "seed": "1", "value": "0.7"}]).to_csv(
        data / "recorded" / "measurements.csv", index=False
    )
    (data / "recorded" / "notes.md").write_text(text)
    (data / "benchmarks").mkdir()
    ratios = pd.DataFrame({"model": [text], "comparison": [text], "ratio": ["0.5"], "source": [text]})
    ratios.to_csv(data / "benchmarks" / "ratios.csv", index=False)


@pytest.mark.parametrize("text", HOSTILE, ids=_id)
def test_hostile_text_on_the_results_page_shows_as_text(tmp_path: Path, text: str) -> None:
    from graphnorm.escaping import markdown_prose

    hostile_data(tmp_path / "data", text)
    html = render(build(tmp_path / "data", tmp_path / "out"))
    assert live_markup(html, maths=True) == []
    notes_maths = len(maths_elements(render(markdown_prose(text))))
    assert len(maths_elements(html)) == 3 * notes_maths  # maths only in the three notes, none in a table
    rows = elements(html).rows
    assert [shown(text), shown(text), "0.500", shown(text)] in rows  # the benchmark ratio, cell for cell
    assert any(row[:2] == [shown(text), shown(text)] and len(row) == 5 for row in rows)  # a recorded measurement


@pytest.mark.parametrize("text", HOSTILE, ids=_id)
def test_hostile_questions_and_findings_show_as_text(tmp_path: Path, text: str) -> None:
    """questions.yaml's titles, texts and a finding's title and sentence (its placeholders aside) are Markdown
    written by people: kept, but making no element, event handler or script link."""
    from page import build_page
    from questions import load_structure

    write_study(tmp_path / "data", "study", study_runs())
    sentence = text.replace("{", "(").replace("}", ")") + " {value}"
    structure = {
        "questions": [{"title": text, "text": text, "studies": ["study", "not_collected"]}],
        "findings": [{"title": text, "link": "study", "table": "study/runs.csv", "column": "test_acc",
                      "values": {"value": {"where": {"seed": 0}}}, "sentence": sentence}],
    }  # fmt: skip
    (tmp_path / "questions.yaml").write_text(yaml.safe_dump(structure))
    page = build_page(tmp_path / "data", tmp_path / "out", "build", load_structure(tmp_path / "questions.yaml"))
    for written in [page, *sorted((tmp_path / "out" / "questions").glob("*.md"))]:  # the summary, the question's page
        assert live_markup(render(written.read_text()), maths=True) == [], written.name


def maths_elements(html: str) -> list[str]:
    return [tag for tag, attrs in elements(html).elements if "arithmatex" in (attrs.get("class") or "")]


NOTES_TOKENS = ["`", "``", "```", "~~~", "\n", "\n\n", "    ", "- ", "> ", "# ", "1. ", "<script>alert(1)</script>",
                "<img src=x onerror=alert(1)>", "<b>", "<!--", "-->", "<div markdown>", "</div>",
                "[x](javascript:alert(1))", "[x](jav&#x61;script:1)", "[x](<java\tscript:1>)", "[id]: javascript:x\n",
                "[x][id]", "![a](data:text/html,x)", "{: onclick=alert(1)}", "{", "}", "=", "\\", "text", "$x$",
                "<https://example.org>", "```python\n", "\n```\n", "|", "(", ")", "[", "]", "!!! note\n"]  # fmt: skip
NOTES_CASES = 300


def test_fuzz_notes_keep_markdown_but_make_no_html(tmp_path: Path) -> None:
    """Seeded random notes built from Markdown and HTML pieces, read as the page reads a study's notes.md: rendered,
    none makes an element Markdown does not make, an event handler or a script link."""
    from page import read_notes

    draw = random.Random(44)
    failures = []
    for _ in range(NOTES_CASES):
        notes = "".join(draw.choice(NOTES_TOKENS) for _ in range(draw.randint(1, 30)))
        (tmp_path / "notes.md").write_text(notes)
        found = live_markup(render(read_notes(tmp_path / "notes.md")), maths=True)
        if found:
            failures.append(f"{notes!r}: {found}")
    assert not failures, f"{len(failures)} of {NOTES_CASES} notes made markup:\n" + "\n".join(failures[:5])


def test_notes_keep_their_markdown() -> None:
    from graphnorm.escaping import markdown_prose

    notes = "# Title\n\nSome **bold**, `<code>`, a [link](https://example.org), $x^2$.\n\n```text\n<kept>\n```\n"
    assert markdown_prose(notes) == notes
    assert markdown_prose("a <b>tag</b>") == "a &lt;b>tag&lt;/b>"


@pytest.mark.slow
def test_strict_site_build_of_a_hostile_page_has_no_script_of_the_data(tmp_path: Path) -> None:
    """A page built from data holding every hostile string, in a minimal site built by ``mkdocs build --strict``
    with the project's Markdown extensions: the page has the theme's scripts only."""
    data = tmp_path / "data"
    hostile_data(data, "\n".join(HOSTILE))
    site = tmp_path / "site"
    (site / "docs").mkdir(parents=True)
    (site / "docs" / "index.md").write_text("# Home\n\nA clean page.\n")
    (site / "docs" / "results.md").write_text(build(data, tmp_path / "out"))
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    extensions = config["markdown_extensions"]
    site_config = {"site_name": "t", "theme": {"name": "mkdocs"}, "nav": ["index.md", "results.md"]}
    (site / "mkdocs.yml").write_text(yaml.safe_dump({**site_config, "markdown_extensions": extensions}))
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "html")],
        cwd=site, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr

    def scripts(page: Path) -> list[str]:
        """The page's script elements, each as the file it loads ('' for an inline one)."""
        found = [attrs for tag, attrs in elements(page.read_text()).elements if tag == "script"]
        return [(attrs.get("src") or "").rsplit("/", 1)[-1] for attrs in found]

    clean, hostile = tmp_path / "html" / "index.html", tmp_path / "html" / "results" / "index.html"
    assert scripts(hostile) == scripts(clean)  # the theme's own
    html = hostile.read_text()
    assert "alert(1)</script>" not in html
    theme = {tag for tag, _ in elements(clean.read_text()).elements}
    assert live_markup(html, MARKDOWN_TAGS | theme, maths=True) == []  # maths: the notes'; \\href is escaped
