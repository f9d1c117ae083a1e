"""The built documentation site opened in headless Chromium with no network: what a reader's browser shows.

Chromium (Debian's ``chromium``) is driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``:
JSON messages ended by a NUL byte on file descriptors 3 and 4), so no websocket package is needed. The site is
served from ``127.0.0.1`` (Material's search worker cannot load its index from ``file://``) and every other host
fails to resolve. Per page, after MathJax has typeset: TeX left as text, the page's width against the 1400 px
window (and the tables wider than the text, which scroll in their own box), the ids (API entries) and the requests
that left the local server; search is checked by typing a query. Run alone, with screenshots of the key pages::

    mkdocs build --strict --site-dir /tmp/site
    python tests/docs/site_browser.py /tmp/site --screenshots /tmp/site-shots
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

WIDTH, HEIGHT = 1400, 900
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
KEY_PAGES = ("index.html", "catalogue/norms/index.html", "concepts/metrics/index.html", "reference/train/index.html")
SEARCH_QUERY = "contranorm"
OPTIONAL_REQUESTS = ("XHR", "Fetch")
# Runs in the page once it has loaded: waits for MathJax, then reports what the reader sees.
PAGE_REPORT = r"""(async () => {
  let mathjax_error = null;
  try {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  } catch (error) { mathjax_error = String(error); }
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, parent = node.parentElement;
    if (!parent || parent.closest("mjx-container, pre, code, script, style, textarea, mjx-assistive-mml")) continue;
    if (/\\\(|\\\[|\$\$/.test(node.textContent)) raw.push(node.textContent.trim().slice(0, 100));
  }
  return {
    raw_tex: raw,
    mathjax_error: mathjax_error,
    rendered_math: document.querySelectorAll("mjx-container").length,
    math_typeset_twice: document.querySelectorAll("mjx-container mjx-container").length,
    scroll_width: document.documentElement.scrollWidth,
    wide_tables: Array.from(document.querySelectorAll("article table:not(.highlighttable)"))
      .filter((t) => t.scrollWidth > t.closest("article").clientWidth).length,
    window_width: window.innerWidth,
    ids: Array.from(document.querySelectorAll("[id^='graphnorm.']"), (e) => e.id),
  };
})()"""
SEARCH = r"""(async (query) => {
  const input = document.querySelector("input.md-search__input");
  if (!input) return -1;
  input.focus(); input.value = query;
  input.dispatchEvent(new Event("focus")); input.dispatchEvent(new Event("input", {bubbles: true}));
  input.dispatchEvent(new KeyboardEvent("keyup", {bubbles: true}));
  for (let i = 0; i < 150; i++) {
    const found = document.querySelectorAll(".md-search-result__item").length;
    if (found > 0) return found;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return 0;
})"""


def find_chromium() -> str:
    """The Chromium binary; an error saying how to install it (the check must not pass without a browser)."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("no Chromium found for the site's browser check: apt-get install -y chromium")


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@contextmanager
def serve(site: Path):
    """The folder ``site`` served on 127.0.0.1 (a free port); yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class Chromium:
    """Headless Chromium driven through the DevTools protocol on a pipe; one tab, a 1400 x 900 window."""

    def __init__(self, binary: str, profile: Path, timeout: float = 60.0) -> None:
        self.timeout, self.events, self._next_id, self._buffer = timeout, [], 0, b""
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser reads commands on fd 3 and writes replies on fd 4: move the pipe ends there in the child,
        # via descriptors above 10 so that the two moves cannot overwrite each other.
        high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
        high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)

        def child_fds() -> None:
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
        flags += ["--remote-debugging-pipe", f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}"]
        flags += ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--hide-scrollbars", "about:blank"]
        self.process = subprocess.Popen(
            [binary, *flags],
            pass_fds=(3, 4),
            preexec_fn=child_fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fd in (to_browser_r, from_browser_w, high_r, high_w):
            os.close(fd)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.call(f"{domain}.enable", session=True)
        metrics = {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}
        self.call("Emulation.setDeviceMetricsOverride", metrics, session=True)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe (did it start? try: chromium --headless)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        """Sends one command and returns its result; events that arrive meanwhile are kept in ``events``."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, event: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == event for e in self.events):
            self.events.append(self._read_message(deadline))

    def open(self, url: str) -> None:
        """Loads ``url`` and waits for its load event."""
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True}, session=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def requests(self) -> list[tuple[str, str]]:
        """(resource type, URL) of every request the page made since it was opened."""
        sent = [e["params"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]
        return [(params.get("type", "Other"), params["request"]["url"]) for params in sent]

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with suppress(RuntimeError, TimeoutError, OSError):  # closing anyway: the process is waited for below
            self.call("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)


def site_pages(site: Path) -> list[str]:
    """The site's pages (paths relative to ``site``), without the 404 page and the bundled assets."""
    pages = [p.relative_to(site).as_posix() for p in sorted(site.rglob("index.html"))]
    return [p for p in pages if not p.startswith(("assets/", "javascripts/", "search/"))]


def check_site(site: Path, screenshots: Path | None = None) -> dict:
    """Opens every page of the built ``site`` offline; returns per page what the reader sees, and the search's
    result count. Screenshots of the key pages go to ``screenshots`` when given."""
    binary = find_chromium()
    report: dict = {"pages": {}, "search_results": 0}
    with tempfile.TemporaryDirectory() as profile, serve(site) as base:
        browser = Chromium(binary, Path(profile))
        try:
            for page in site_pages(site):
                browser.open(base + page)
                seen = browser.evaluate(PAGE_REPORT)
                external = [(kind, url) for kind, url in browser.requests() if not url.startswith((base, "data:"))]
                # an asset the page needs (script, style, font, image) must be local; a page's own fetch may try
                # the network and do without it (Material's repository facts: stars, latest release)
                seen["external_assets"] = [url for kind, url in external if kind not in OPTIONAL_REQUESTS]
                seen["external_fetches"] = [url for kind, url in external if kind in OPTIONAL_REQUESTS]
                report["pages"][page] = seen
                if screenshots is not None and page in KEY_PAGES:
                    screenshots.mkdir(parents=True, exist_ok=True)
                    name = page.removesuffix("index.html").strip("/").replace("/", "-") or "home"
                    browser.screenshot(screenshots / f"{name}.png")
            browser.open(base + "index.html")
            report["search_results"] = browser.evaluate(f"{SEARCH}({json.dumps(SEARCH_QUERY)})")
            if screenshots is not None:
                browser.screenshot(screenshots / "search.png")
        finally:
            browser.close()
    return report


def summary(report: dict) -> dict:
    """The figures the check asserts on: pages with raw TeX, overflowing pages, API entries, external requests."""
    pages = report["pages"]
    return {
        "pages": len(pages),
        "pages_with_raw_tex": sorted(p for p, s in pages.items() if s["raw_tex"]),
        "pages_with_mathjax_errors": sorted(p for p, s in pages.items() if s["mathjax_error"]),
        "overflowing_pages": sorted(p for p, s in pages.items() if s["scroll_width"] > s["window_width"]),
        "rendered_formulas": sum(s["rendered_math"] for s in pages.values()),
        "tables_wider_than_the_text": {p: s["wide_tables"] for p, s in pages.items() if s["wide_tables"]},
        "api_entries": len({i for p, s in pages.items() if p.startswith("reference/") for i in s["ids"]}),
        "math_typeset_twice": sorted(p for p, s in pages.items() if s["math_typeset_twice"]),
        "pages_with_external_assets": sorted(p for p, s in pages.items() if s["external_assets"]),
        "external_fetches": sorted({url for s in pages.values() for url in s["external_fetches"]}),
        "search_results": report["search_results"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="a site built by mkdocs build")
    parser.add_argument("--screenshots", type=Path, help="a folder for screenshots of the key pages")
    args = parser.parse_args()
    print(json.dumps(summary(check_site(args.site, args.screenshots)), indent=2))


if __name__ == "__main__":
    main()
