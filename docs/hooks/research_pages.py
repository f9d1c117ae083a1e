"""mkdocs hook: what a researcher looks for on a library's site, generated from the repository at build time.

* The home page ends with a citation block, BibTeX converted from ``CITATION.cff`` (:func:`bibtex`).
* ``changelog.md`` is ``CHANGELOG.md``, added to the build as a page (:func:`on_files`).
* ``<!-- generated:capabilities -->`` (in the norms catalogue) receives the norms' capability matrix, derived
  from the registry and the classes: per graph, ``edge_index``, graph token, learnable parameters, and how the
  cost of a forward pass grows, from counted FLOPs (:func:`capability_matrix`).
* A notebook's page and the tutorials list get links to download the ``.ipynb``; generated pages get "edit this
  page" links to the repository file they come from (:func:`on_page_context`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHANGELOG_PAGE = "changelog.md"
# Generated page -> the repository file to edit instead.
EDIT_SOURCES = {CHANGELOG_PAGE: "CHANGELOG.md", "results/studies.md": "analysis/README.md"}
_MARKER = re.compile(r"<!-- generated:(\w+) -->")


# ---------------------------------------------------------------------------------------------- citation


def _bibtex_author(author: dict) -> str:
    if "name" in author:  # an entity ("graphnorm developers"): braced so BibTeX keeps it whole
        return "{" + author["name"] + "}"
    given, family = author.get("given-names", ""), author.get("family-names", "")
    particle = f"{author['name-particle']} " if "name-particle" in author else ""
    return f"{particle}{family}, {given}".strip(", ")


def bibtex(cff: dict) -> str:
    """A BibTeX entry from a CITATION.cff mapping: its ``preferred-citation`` where it has one, else the software."""
    work = cff.get("preferred-citation", cff)
    kind = {"article": "article", "conference-paper": "inproceedings"}.get(work.get("type", "software"), "software")
    date = str(work.get("date-released", work.get("year", "")))
    fields = {
        "author": " and ".join(_bibtex_author(a) for a in work.get("authors", [])),
        "title": "{" + work.get("title", cff.get("title", "")) + "}",
        "year": date[:4],
        "version": work.get("version", ""),
        "url": work.get("repository-code", work.get("url", "")),
        "license": work.get("license", ""),
        "doi": work.get("doi", ""),
    }
    key = re.sub(r"\W", "", (cff.get("title", "software").split(":")[0]).lower()) + fields["year"]
    body = ",\n".join(f"  {name:<8}= {{{value}}}" for name, value in fields.items() if value)
    return f"@{kind}{{{key},\n{body}\n}}"


def citation_block() -> str:
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    return "\n".join(
        [
            "## Citing graphnorm",
            "",
            f"{cff.get('message', 'If you use this software, please cite it.')} The entry is generated from "
            '`CITATION.cff` in the repository (GitHub\'s "Cite this repository" reads the same file):',
            "",
            "```bibtex",
            bibtex(cff),
            "```",
        ]
    )


# ---------------------------------------------------------------------------------------------- capability matrix

CHANNELS = 64
GRAPHS = 2
SIZES = (64, 256)  # nodes per graph; the cost's growth is read from the counts at both sizes (and at two widths)


def parameter_formula(counts: dict[int, int]) -> str:
    """Learnable parameters as a formula in C (channels), from the counts at three widths; a count if none fits."""
    (c1, p1), (c2, p2), (c3, p3) = sorted(counts.items())
    # p(C) = a C^2 + b C + c through the three points (C = 16, 32, 64: exact in floats)
    a = ((p3 - p2) / (c3 - c2) - (p2 - p1) / (c2 - c1)) / (c3 - c1)
    b = (p2 - p1) / (c2 - c1) - a * (c1 + c2)
    c = p1 - a * c1 * c1 - b * c1
    if not all(float(v).is_integer() for v in (a, b, c)):
        return f"{p3} at C = {c3}"
    terms = [(int(a), "C²"), (int(b), "C"), (int(c), "")]
    shown = [f"{k if k != 1 or not unit else ''}{unit}" for k, unit in terms if k]
    return " + ".join(shown).replace("+ -", "− ") or "none"


def _graph_batch(nodes: int, channels: int):
    """``GRAPHS`` ring graphs of ``nodes`` nodes each: features, graph ids, edges and a token mask (each graph's
    first row, as Graphormer's graph token)."""
    import torch

    x = torch.randn(GRAPHS * nodes, channels, generator=torch.Generator().manual_seed(0))
    batch = torch.arange(GRAPHS).repeat_interleave(nodes)
    ring = torch.arange(GRAPHS * nodes)
    nxt = ring - ring % nodes + (ring % nodes + 1) % nodes
    return x, batch, torch.stack([torch.cat([ring, nxt]), torch.cat([nxt, ring])]), ring % nodes == 0


def matmul_flops(name: str, nodes: int, channels: int) -> int:
    """The matrix-product FLOPs (torch's FlopCounterMode) of one forward pass of the norm with default options on
    ``GRAPHS`` graphs of ``nodes`` nodes: a count that does not depend on the machine that builds the site."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from graphnorm.norms import build_norm

    norm = build_norm(name, channels).eval()
    x, batch, edges, tokens = _graph_batch(nodes, channels)
    given = {"edge_index": edges, "token_mask": tokens}
    kwargs = {key: given[key] for key in getattr(norm, "_optional_inputs", ())}
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        norm(x, batch=batch, batch_size=GRAPHS, **kwargs)
    return counter.get_total_flops()


def cost_class(name: str) -> str:
    """``O(n·C)`` for a norm without matrix products (elementwise and per-graph sums), else the order of its
    matrix-product FLOPs in n (nodes per graph) and C (channels), read from counts at two sizes and two widths."""
    (n1, n2), (c1, c2) = SIZES, (CHANNELS // 2, CHANNELS)
    base = matmul_flops(name, n1, c1)
    if base == 0:
        return "O(n·C), elementwise"
    in_n = round(math.log(matmul_flops(name, n2, c1) / base, n2 / n1))
    in_c = round(math.log(matmul_flops(name, n1, c2) / base, c2 / c1))
    power = {0: "", 1: "", 2: "²", 3: "³"}
    terms = [f"{symbol}{power.get(k, f'^{k}')}" for symbol, k in (("n", in_n), ("C", in_c)) if k]
    return f"O({'·'.join(terms) or '1'}), matrix products"


def capability_rows() -> list[dict[str, str]]:
    """Per registered norm: what it computes per, what it takes, what it learns and how its cost grows."""
    from graphnorm.norms import available_norms, build_norm

    rows = []
    for name in available_norms():
        norm = build_norm(name, CHANNELS)
        takes = getattr(norm, "_optional_inputs", ())
        edges = "—"
        if "edge_index" in takes:
            edges = "needed (default options)" if getattr(norm, "needs_edge_index", False) else "optional"
        counts = {c: sum(p.numel() for p in build_norm(name, c).parameters() if p.requires_grad) for c in (16, 32, 64)}
        rows.append(
            {
                "name": name,
                "per graph": "yes" if getattr(norm, "per_graph", False) else "—",
                "edge_index": edges,
                "graph token": "yes (`token_mask`)" if "token_mask" in takes else "—",
                "learnable parameters": parameter_formula(counts),
                "cost": cost_class(name),
            }
        )
    return rows


def capability_matrix() -> str:
    """The capability matrix as Markdown: a table and how each column is derived."""
    columns = ["per graph", "edge_index", "graph token", "learnable parameters", "cost"]
    table = ["| norm | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    table += [
        f"| [`{r['name']}`](#{r['name']}) | " + " | ".join(r[c] for c in columns) + " |" for r in capability_rows()
    ]
    return "\n".join(
        [
            *table,
            "",
            "Derived from the registry when the site is built, not kept by hand, for each norm with its default "
            "options: **per graph**, its statistics are per graph of a mini-batch (`per_graph`); **edge_index**, its "
            "`_normalize` takes the edges (needed: without them it falls back, see its section); **graph token**, it "
            "takes `token_mask` (Graphormer's virtual token); **learnable parameters**, counted at three widths, "
            "C = channels; **cost**, how one forward pass grows with n, the nodes of a graph, and C: the order of "
            "its matrix-product FLOPs as torch's FlopCounterMode counts them at two sizes and two widths, or "
            "O(n·C) for a norm made of elementwise operations and sums.",
        ]
    )


GENERATED = {"capabilities": capability_matrix}


# ---------------------------------------------------------------------------------------------- mkdocs events


def on_files(files, config):
    """Adds the changelog page, read from CHANGELOG.md."""
    from mkdocs.structure.files import File

    if files.get_file_from_path(CHANGELOG_PAGE) is None:
        files.append(File.generated(config, CHANGELOG_PAGE, abs_src_path=str(REPO / "CHANGELOG.md")))
    return files


def on_page_markdown(markdown, page, config, files):
    """Fills the ``generated`` markers; appends the citation block to the home page."""
    markdown = _MARKER.sub(lambda m: GENERATED[m.group(1)]() if m.group(1) in GENERATED else m.group(0), markdown)
    if page.file.src_uri == "index.md" and "## Citing graphnorm" not in markdown:
        markdown = f"{markdown.rstrip()}\n\n{citation_block()}\n"
    return markdown


_NOTEBOOK_LINK = re.compile(r'(<a href="((?:\.\./)*notebooks/)(\w+)/">.*?</a>)', re.S)


def on_page_content(html, page, config, files):
    """A download link for every notebook: at the top of its page (the ``.ipynb`` that mkdocs-jupyter copies beside
    it), and after each link to it in the tutorials list."""
    if page.file.src_uri == "tutorials/index.md":
        return _NOTEBOOK_LINK.sub(r'\1 (<a href="\2\3/\3.ipynb" download>download</a>)', html)
    if page.file.src_uri.endswith(".ipynb"):
        name = Path(page.file.src_uri).name
        link = (
            f'<p class="notebook-download"><a href="{name}" download>Download the notebook ({name})</a>: '
            f'run it with <code>jupyter lab</code> after <code>pip install -e ".[notebooks]"</code>.</p>'
        )
        return link + html
    return html


def on_page_context(context, page, config, nav):
    """ "Edit this page" on a generated page opens the repository file it comes from."""
    source = EDIT_SOURCES.get(page.file.src_uri)
    if page.file.src_uri.endswith(".ipynb"):
        source = page.file.src_uri
    if source and config.get("repo_url"):
        page.edit_url = f"{config['repo_url'].rstrip('/')}/edit/main/{source}"
    return context
