"""The documentation site builds in strict mode and every internal link and image of the built HTML resolves.

``mkdocs build --strict`` fails on any warning: a broken cross-reference or page link, a page named in the nav that
does not exist, a docstring griffe cannot parse, a missing benchmark section. The built HTML is then checked link by
link (relative and site-absolute ``href`` and ``src``, and the ``#anchor`` of a link to another page), since a
theme template or a notebook's HTML can point at files that mkdocs does not validate. The catalogue generators of
``docs/hooks/site_files.py`` are also tested directly, with a norm registered for the test. The build is the
session's one (``built_site`` in ``tests/docs/conftest.py``), shared with the browser check.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

import pytest
from torch import nn

from graphnorm.norms.registry import _NORMS, register_norm

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "docs" / "hooks"
SITE_PATH = urlsplit(re.search(r"^site_url:\s*(\S+)", (REPO / "mkdocs.yml").read_text(), re.M).group(1)).path
EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|//)", re.I)  # http:, https:, mailto:, data:, javascript:, //host


def load_hook(name: str):
    """A module of docs/hooks by file name (they are not a package: mkdocs and griffe load them by path)."""
    if str(HOOKS) not in sys.path:
        sys.path.insert(0, str(HOOKS))
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", HOOKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Links(HTMLParser):
    """Every href / src of a page (with the tag) and every id / name it defines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value is None:
                continue
            if key in ("href", "src"):
                self.links.append((tag, value))
            elif key in ("id", "name"):
                self.ids.add(value)


def _target(site: Path, page: Path, link: str) -> tuple[Path, str]:
    """The file a link of ``page`` points at, and its fragment."""
    parts = urlsplit(link)
    path = unquote(parts.path)
    if not path:
        target = page
    elif path.startswith("/"):  # site-absolute (the 404 page): under site_url's path, /graphnorm/
        target = site / path.removeprefix(SITE_PATH).lstrip("/")
    else:
        target = (page.parent / path).resolve()
    if target.is_dir() or path.endswith("/"):
        target = target / "index.html"
    return target, unquote(parts.fragment)


@pytest.mark.slow
def test_strict_build_with_resolving_links_and_every_registered_entry(built_site: Path) -> None:
    """The site built once per session (tests/docs/conftest.py), checked file by file."""
    check_internal_links_and_images(built_site)
    check_catalogues_list_every_registered_entry(built_site)
    check_results_figures_and_tutorials(built_site)
    check_api_reference_lists_every_public_name(built_site)
    check_research_pages(built_site)


def check_internal_links_and_images(site: Path) -> None:
    parsed: dict[Path, _Links] = {}
    for page in sorted(site.rglob("*.html")):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        parsed[page.resolve()] = parser
    broken, counts = [], {"links": 0, "images": 0, "anchors": 0}
    for page, parser in parsed.items():
        for tag, link in parser.links:
            if EXTERNAL.match(link) or link.startswith("#"):
                continue
            target, fragment = _target(site.resolve(), page, link)
            counts["images" if tag == "img" else "links"] += 1
            if not target.is_file():
                broken.append(f"{page.relative_to(site.resolve())}: {link} (no file {target})")
            elif fragment and target.suffix == ".html" and target != page:
                counts["anchors"] += 1
                if fragment not in parsed[target].ids:
                    broken.append(f"{page.relative_to(site.resolve())}: {link} (no id {fragment!r} there)")
    print(f"\nlink check: {len(parsed)} pages, {counts['links']} internal links, {counts['images']} images, "
          f"{counts['anchors']} cross-page anchors; {len(broken)} broken")  # fmt: skip
    assert not broken, "broken internal links:\n" + "\n".join(broken[:50])
    assert counts["links"] > 100 and counts["images"] > 0  # the check saw the site, not an empty folder


@functools.cache
def _fresh_interpreter_names() -> dict[str, dict[str, list[str]]]:
    """Read once, in a fresh interpreter: the registered norms, models and datasets (what the build's process
    registers, without this session's test registrations), and per package with a reference page its ``__all__`` and
    the names it loads on first use (``_LAZY``; importing them all here would load optional packages)."""
    code = (
        "import importlib, json, graphnorm.norms as n, graphnorm.models as m, graphnorm.data as d\n"
        "registered = {'norms': n.available_norms(), 'models': m.available_models(),\n"
        "              'datasets': d.available_datasets()}\n"
        "public = {}\n"
        "for name in ['norms', 'models', 'analysis', 'data', 'train', 'sweep', 'config', 'predict']:\n"
        "    module = importlib.import_module('graphnorm.' + name)\n"
        "    public[name] = sorted(set(getattr(module, '__all__', [])) | set(getattr(module, '_LAZY', {})))\n"
        "print(json.dumps({'registered': registered, 'public': public}))"
    )
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def _registered() -> dict[str, list[str]]:
    return _fresh_interpreter_names()["registered"]


def _public_names() -> dict[str, list[str]]:
    return _fresh_interpreter_names()["public"]


def check_catalogues_list_every_registered_entry(site: Path) -> None:
    hooks = load_hook("site_files")
    for page, names in _registered().items():
        html = (site / "catalogue" / page / "index.html").read_text(encoding="utf-8")
        assert names, page
        for name in names:
            if page == "datasets":
                assert f"<code>{name}</code>" in html, f"{page} catalogue misses {name!r}"
            else:
                assert f'id="{hooks.anchor(name)}"' in html, f"{page} catalogue misses {name!r}"


def check_results_figures_and_tutorials(site: Path) -> None:
    figures = sorted(p.name for p in (REPO / "analysis" / "figures").glob("*.png"))
    assert figures and sorted(p.name for p in (site / "results" / "figures").glob("*.png")) == figures
    assert "<h1" in (site / "results" / "studies" / "index.html").read_text(encoding="utf-8")
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        page = site / "notebooks" / notebook.stem / "index.html"
        assert page.is_file(), f"{notebook.name} has no tutorial page"
    benchmarks = (site / "results" / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert "<table>" in benchmarks  # the results page's benchmark table was filled in


def check_api_reference_lists_every_public_name(site: Path) -> None:
    """Every name a package exports, the lazily loaded ones included, has its entry; one title per page."""
    missing, found = [], 0
    for package, names in _public_names().items():
        html = (site / "reference" / package / "index.html").read_text(encoding="utf-8")
        assert len(re.findall(r"<h1[ >]", html)) == 1, f"reference/{package}: not exactly one <h1>"
        for name in names:
            found += f'id="graphnorm.{package}.{name}"' in html
            if f'id="graphnorm.{package}.{name}"' not in html:
                missing.append(f"graphnorm.{package}.{name}")
    print(f"\nAPI reference: {found} public names with an entry, {len(missing)} without")
    assert not missing, f"public names without an API entry: {missing}"
    train = (site / "reference" / "train" / "index.html").read_text(encoding="utf-8")
    assert 'class="autorefs autorefs-external"' in train  # torch names link to torch's documentation


def check_research_pages(site: Path) -> None:
    """Citation block, changelog, capability matrix, notebook downloads, offline MathJax, repository links."""
    home = (site / "index.html").read_text(encoding="utf-8")
    home_text = re.sub(r"<[^>]+>", "", home)  # the BibTeX block is highlighted token by token
    assert "Citing graphnorm" in home_text and "@software{graphnorm" in home_text
    changelog = (site / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "Unreleased" in changelog
    norms = (site / "catalogue" / "norms" / "index.html").read_text(encoding="utf-8")
    matrix = norms.split('id="capabilities"', 1)[1].split('id="every-norm"', 1)[0]
    for name in _registered()["norms"]:
        assert f'href="#{name}"' in matrix, f"capability matrix misses {name!r}"
    tutorials = (site / "tutorials" / "index.html").read_text(encoding="utf-8")
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        page = (site / "notebooks" / notebook.stem / "index.html").read_text(encoding="utf-8")
        assert f'href="{notebook.name}" download' in page, f"{notebook.name}: no download link"
        assert f'href="../notebooks/{notebook.stem}/{notebook.name}" download' in tutorials, notebook.name
    assert (site / "javascripts" / "mathjax" / "tex-mml-chtml.js").is_file()
    assert "cdn.jsdelivr" not in home and 'href="https://github.com/graphnorm/graphnorm"' in home
    assert "https://graphnorm.github.io/graphnorm/" in (site / "sitemap.xml").read_text(encoding="utf-8")
    assert f'href="{SITE_PATH}assets/' in (site / "404.html").read_text(encoding="utf-8")  # styled under /graphnorm/


def test_a_newly_registered_norm_appears_in_the_generated_catalogue() -> None:
    hooks = load_hook("site_files")

    @register_norm("docs_test_scaled")
    class DocsTestScaled(nn.Module):
        r"""Scaled rows, from `"A Paper About Scaling"
        <https://example.org/scaling>`_ (Doe, 2099): :math:`\mathbf{x}'_i = a \mathbf{x}_i`.

        .. math::
            \mathbf{x}' = a \mathbf{x}

        Unlike the reference code, ``a`` is checked.

        Args:
            channels: features per node.
            a, b: the factors (default 2.0 and 3.0).

        Raises:
            ValueError: never.
        """

        def __init__(self, channels: int, a: float = 2.0, b: float = 3.0) -> None:
            super().__init__()

    try:
        text = hooks.norms_catalogue()
    finally:
        _NORMS.pop("docs_test_scaled", None)
    section = text.split("## `docs_test_scaled`", 1)[1].split("\n## ", 1)[0]
    assert "[A Paper About Scaling](https://example.org/scaling)" in section  # the titled link, on two lines
    assert "\\(\\mathbf{x}'_i = a \\mathbf{x}_i\\)" in section and "$$\n\\mathbf{x}' = a \\mathbf{x}\n$$" in section
    assert "Unlike the reference code, ``a`` is checked." in section and "Raises" not in section
    assert "| `a` | `2.0` | the factors (default 2.0 and 3.0). |" in section
    assert "| `b` | `3.0` | as ``a``. |" in section
    # Not exported by graphnorm.norms: its dotted path, not a cross-reference that would break the strict build.
    assert f"`{__name__}.DocsTestScaled`" in section and "[`graphnorm.norms.DocsTestScaled`]" not in section
    assert "| [`docs_test_scaled`](#docs_test_scaled) |" in text


def test_rst_constructs_become_markdown() -> None:
    convert = load_hook("rst_markdown").rst_to_markdown
    # A role is an optional cross-reference: a link where the site (or api_links' table) knows the name, else code.
    assert convert("See :func:`~graphnorm.norms.build_norm` and :class:`graphnorm.models.DeepGCN`.") == (
        'See <autoref identifier="graphnorm.norms.build_norm" optional><code>build_norm</code></autoref> and '
        '<autoref identifier="graphnorm.models.DeepGCN" optional><code>graphnorm.models.DeepGCN</code></autoref>.'
    )
    # In the API reference a short name is resolved in the docstring's scope.
    resolved = convert(":class:`~nn.Module`", resolve=lambda name: "torch." + name)
    assert resolved == '<autoref identifier="torch.nn.Module" optional><code>Module</code></autoref>'
    assert convert("Usage::\n\n    x = 1") == "Usage:\n\n    x = 1"
    assert convert('Both :math:`a +\n    b` and `"A\n    Title" <https://example.org/t>`_.') == (
        "Both \\(a + b\\) and [A Title](https://example.org/t)."
    )
    assert convert("Args:\n    a, b: sizes.\n        More.\n    c: other.") == (
        "Args:\n    a: sizes.\n        More.\n    b: as ``a``.\n    c: other."
    )


def test_readme_links_into_the_docs_resolve() -> None:
    readme = (REPO / "README.md").read_text()
    links = [link for link in re.findall(r"\]\(([^)\s]+)\)", readme) if not EXTERNAL.match(link)]
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not (REPO / link.split("#")[0]).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_results_page_links_point_into_the_site_or_become_paths() -> None:
    """The results page is read from ``analysis/``: its links to figures, the README and notebooks are pointed at
    their pages in the site; links to files the site does not hold (configs, code) become the file's path."""
    hooks = load_hook("site_files")

    def link(markdown: str) -> str:
        where = (PurePosixPath("results"), PurePosixPath("analysis"))
        return hooks._LINK.sub(lambda m: hooks.repository_link(*where, m), markdown)

    assert link("![f](figures/a.png)") == "![f](figures/a.png)"
    assert link("[home](../README.md#two-commands)") == "[home](../index.md#two-commands)"
    assert link("[nb](../notebooks/x.ipynb)") == "[nb](../notebooks/x.ipynb)"
    assert link("[sweeps](../docs/how-to/depth-sweeps.md)") == "[sweeps](../how-to/depth-sweeps.md)"
    assert link("[the preset](../experiments/sweeps/a.yaml)") == "the preset (`experiments/sweeps/a.yaml`)"
    assert link("[`experiments/a.yaml`](../experiments/a.yaml)") == "`experiments/a.yaml`"
    assert link("![any](figures/b.png)") == "![any](figures/b.png)"  # a missing one: the strict build reports it
    assert link("[s](#study) and [w](https://example.org)") == "[s](#study) and [w](https://example.org)"
