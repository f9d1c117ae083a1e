"""docs/javascripts/leaderboard.js in headless Chromium: a heading's click sorts the leaderboard's table (numbers as
numbers, empty cells last, a second click the other way), the filter box keeps the rows holding every word, and a
table outside the leaderboard's block is left alone."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "docs"))

from site_browser import Chromium, find_chromium, serve  # noqa: E402

ROWS = [("cora", "pairnorm", "0.81", "± 0.02"), ("texas", "none", "0.6", ""), ("cora", "none", "0.102", "± 0.3"),
        ("citeseer", "contranorm", "", "")]  # fmt: skip
PAGE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<div class="gn-leaderboard"><table><thead><tr><th>graph</th><th>norm</th><th>mean</th><th>95% CI</th></tr></thead>
<tbody>{rows}</tbody></table></div>
<table id="other"><thead><tr><th>x</th></tr></thead><tbody><tr><td>b</td></tr><tr><td>a</td></tr></tbody></table>
<script src="leaderboard.js"></script></body></html>"""
COLUMN = (
    "Array.from(document.querySelectorAll('.gn-leaderboard tbody tr')).filter(r => !r.hidden)"
    ".map(r => r.cells[{}].textContent)"
)


@pytest.fixture(scope="module")
def browser():
    try:
        binary = find_chromium()
    except RuntimeError as error:
        pytest.fail(str(error))
    with tempfile.TemporaryDirectory() as site, tempfile.TemporaryDirectory() as profile:
        rows = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in ROWS)
        (Path(site) / "index.html").write_text(PAGE.format(rows=rows))
        shutil.copy(REPO / "docs" / "javascripts" / "leaderboard.js", site)
        with serve(Path(site)) as base:
            chromium = Chromium(binary, Path(profile))
            try:
                chromium.open(base + "index.html")
                yield chromium
            finally:
                chromium.close()


def click(browser, column: int) -> None:
    browser.evaluate(f"document.querySelectorAll('.gn-leaderboard th')[{column}].click()")


def test_a_heading_sorts_numbers_as_numbers_and_empty_cells_last(browser):
    click(browser, 2)
    assert browser.evaluate(COLUMN.format(2)) == ["0.102", "0.6", "0.81", ""]
    click(browser, 2)
    assert browser.evaluate(COLUMN.format(2)) == ["0.81", "0.6", "0.102", ""]
    click(browser, 3)  # the CI sorts by its half-width
    assert browser.evaluate(COLUMN.format(3)) == ["± 0.02", "± 0.3", "", ""]
    click(browser, 0)
    assert browser.evaluate(COLUMN.format(0)) == ["citeseer", "cora", "cora", "texas"]
    assert browser.evaluate("document.querySelectorAll('.gn-leaderboard th')[0].getAttribute('aria-sort')") == (
        "ascending"
    )


def test_the_filter_keeps_rows_with_every_word(browser):
    box = "document.querySelector('.gn-leaderboard-filter')"
    browser.evaluate(f"{box}.value = 'CORA none'; {box}.dispatchEvent(new Event('input'))")
    assert browser.evaluate(COLUMN.format(1)) == ["none"]
    assert browser.evaluate("document.querySelector('.gn-leaderboard-count').textContent") == "1 of 4 cells"
    browser.evaluate(f"{box}.value = ''; {box}.dispatchEvent(new Event('input'))")
    assert len(browser.evaluate(COLUMN.format(1))) == 4


def test_other_tables_are_left_alone(browser):
    browser.evaluate("document.querySelector('#other th').click()")
    assert browser.evaluate("Array.from(document.querySelectorAll('#other td')).map(c => c.textContent)") == ["b", "a"]
    assert browser.evaluate("document.querySelectorAll('input').length") == 1
