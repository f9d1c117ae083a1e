"""The built site in a real browser, offline: headless Chromium (Debian's ``chromium``) opens every page from a
local server with every other host unreachable (``site_browser.py`` beside this file drives it).

Asserted: no page shows TeX as text (MathJax comes with the site and typesets every formula, once); Material's
search finds a query; the API reference lists the entry points that are exported lazily (``run``, ``run_sweep``,
``CollapseMonitor``); no page is wider than a 1400 px window (a wide table scrolls inside its own box); every
script, style, font and image a page loads is the site's own. Screenshots of the key pages are kept in the test's
temporary folder (``python tests/docs/site_browser.py SITE --screenshots DIR`` writes them where you say). A
machine without Chromium fails this test: CI installs it (``.ci/run``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from site_browser import KEY_PAGES, check_site, summary

ENTRY_POINTS = {
    "reference/train/index.html": ["graphnorm.train.run", "graphnorm.train.train", "graphnorm.train.CollapseMonitor"],
    "reference/sweep/index.html": ["graphnorm.sweep.run_sweep", "graphnorm.sweep.load_sweep_config"],
}
PAGES_WITH_MATH = ("catalogue/norms/index.html", "concepts/metrics/index.html", "reference/norms/index.html")


@pytest.mark.slow
def test_site_in_headless_chromium_offline(built_site: Path, tmp_path: Path) -> None:
    report = check_site(built_site, screenshots=tmp_path / "screenshots")
    figures = summary(report)
    print("\nbrowser check:", json.dumps(figures, indent=2), f"\nscreenshots: {tmp_path / 'screenshots'}")
    pages = report["pages"]
    assert figures["pages"] > 30  # it saw the site
    raw = {page: pages[page]["raw_tex"][:3] for page in figures["pages_with_raw_tex"]}
    assert not raw, f"TeX shown as text: {raw}"
    assert not figures["pages_with_mathjax_errors"], {p: pages[p]["mathjax_error"] for p in pages}
    assert not figures["math_typeset_twice"]
    assert all(pages[page]["rendered_math"] > 0 for page in PAGES_WITH_MATH)
    assert figures["search_results"] > 0, "search found nothing for its query"
    for page, ids in ENTRY_POINTS.items():
        missing = [name for name in ids if name not in pages[page]["ids"]]
        assert not missing, f"{page} lacks {missing}"
    wide = {page: pages[page]["scroll_width"] for page in figures["overflowing_pages"]}
    assert not wide, f"pages wider than the window: {wide}"
    assets = {page: pages[page]["external_assets"] for page in figures["pages_with_external_assets"]}
    assert not assets, f"pages loading from the network: {assets}"
    shots = sorted(p.name for p in (tmp_path / "screenshots").glob("*.png"))
    assert len(shots) == len(KEY_PAGES) + 1, shots  # the key pages and the search results
