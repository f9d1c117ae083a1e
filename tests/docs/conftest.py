"""The documentation site, built once per test session by ``mkdocs build --strict`` and shared by the tests that
read it (the file checks of test_docs_site.py, the browser check of test_site_browser.py).

Under pytest-xdist each worker has its own session: the first worker to need the site builds it into the folder the
workers share (the parent of their temporary folders) while holding a lock; the others wait and read the same
build, so a test run builds the site once. A failed build fails every test that needs it, with mkdocs' output,
without building again.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build_site(out: Path) -> Path:
    """The site built by ``mkdocs build --strict`` into ``out`` (fails with mkdocs' output on any warning)."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    pages = len(list(out.rglob("*.html")))
    print(f"\nmkdocs build --strict: {elapsed:.1f} s, {pages} HTML files")
    return out


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site (read-only for the tests), one build per test run."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by this run's workers (each has its own folder below it)
    site, done, failed = root / "docs-site", root / "docs-site.built", root / "docs-site.failed"
    with open(root / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if failed.exists():  # another worker's build failed: the same failure, without building again
            pytest.fail(failed.read_text(), pytrace=False)
        if not done.exists():
            try:
                build_site(site)
            except AssertionError as error:
                failed.write_text(str(error))
                raise
            done.touch()
    return site
