"""mkdocs hook: what a researcher looks for on a library's site, generated from the repository at build time.

* The home page ends with a citation block, BibTeX converted from ``CITATION.cff`` (:func:`bibtex`).
* ``changelog.md`` is ``CHANGELOG.md``, added to the build as a page (:func:`on_files`).
* ``<!-- generated:capabilities -->`` (in the norms catalogue) receives the norms' capability matrix, derived
  from the registry and the classes: per graph, ``edge_index``, graph token, learnable parameters, and the cost
  of a forward pass measured at build time (:func:`capability_matrix`).
* A notebook's page gets a link to download the ``.ipynb``; generated pages get "edit this page" links to the
  repository file they come from (:func:`on_page_context`).
"""

from __future__ import annotations

import math
import re
import time
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
GRAPHS = 8
SIZES = (256, 1024)  # nodes per graph: the cost is timed at both, and its growth with graph size read from them


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


def _graph_batch(nodes: int):
    """``GRAPHS`` ring graphs of ``nodes`` nodes each: features, graph ids, edges and a token mask (each graph's
    first row, as Graphormer's graph token)."""
    import torch

    x = torch.randn(GRAPHS * nodes, CHANNELS, generator=torch.Generator().manual_seed(0))
    batch = torch.arange(GRAPHS).repeat_interleave(nodes)
    ring = torch.arange(GRAPHS * nodes)
    nxt = ring - ring % nodes + (ring % nodes + 1) % nodes
    return x, batch, torch.stack([torch.cat([ring, nxt]), torch.cat([nxt, ring])]), ring % nodes == 0


def forward_seconds(norm, nodes: int, repeats: int = 3) -> float:
    """The best of ``repeats`` timed forward passes (after one untimed) on ``GRAPHS`` graphs of ``nodes`` nodes."""
    import torch

    x, batch, edges, tokens = _graph_batch(nodes)
    given = {"edge_index": edges, "token_mask": tokens}
    kwargs = {name: given[name] for name in getattr(norm, "_optional_inputs", ())}
    best = math.inf
    with torch.no_grad():
        for attempt in range(repeats + 1):
            start = time.perf_counter()
            norm(x, batch=batch, batch_size=GRAPHS, **kwargs)
            if attempt:
                best = min(best, time.perf_counter() - start)
    return best


def capability_rows() -> list[dict[str, str]]:
    """Per registered norm: what it computes per, what it takes, what it learns and what it costs."""
    import torch

    from graphnorm.norms import available_norms, build_norm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the cost of the norm, not of the machine's free cores
    try:
        rows, seconds = [], {}
        for name in available_norms():
            norm = build_norm(name, CHANNELS).eval()
            takes = getattr(norm, "_optional_inputs", ())
            edges = "—"
            if "edge_index" in takes:
                edges = "needed (default options)" if getattr(norm, "needs_edge_index", False) else "optional"
            counts = {
                c: sum(p.numel() for p in build_norm(name, c).parameters() if p.requires_grad) for c in (16, 32, 64)
            }
            small, large = (forward_seconds(norm, n) for n in SIZES)
            seconds[name] = large
            growth = math.log(max(large, 1e-9) / max(small, 1e-9)) / math.log(SIZES[1] / SIZES[0])
            rows.append(
                {
                    "name": name,
                    "per graph": "yes" if getattr(norm, "per_graph", False) else "—",
                    "edge_index": edges,
                    "graph token": "yes (`token_mask`)" if "token_mask" in takes else "—",
                    "learnable parameters": parameter_formula(counts),
                    "growth": "quadratic" if growth > 1.5 else "linear",
                }
            )
    finally:
        torch.set_num_threads(threads)
    reference = seconds.get("layernorm") or min(seconds.values())
    for row in rows:
        ratio = seconds[row["name"]] / reference
        row["cost"] = "≤ 2×" if ratio <= 2 else ("2–10×" if ratio <= 10 else "> 10×")
    return rows


def capability_matrix() -> str:
    """The capability matrix as Markdown: a table and how each column is derived."""
    rows = capability_rows()
    columns = ["per graph", "edge_index", "graph token", "learnable parameters", "cost", "growth"]
    table = ["| norm | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    table += [f"| [`{r['name']}`](#{r['name']}) | " + " | ".join(r[c] for c in columns) + " |" for r in rows]
    nodes = " and ".join(str(n) for n in SIZES)
    return "\n".join(
        [
            *table,
            "",
            "Derived from the registry when the site is built, not kept by hand: **per graph**, the norm's statistics "
            "are per graph of a mini-batch (`per_graph`); **edge_index**, the norm's `_normalize` takes the edges "
            "(needed: without them it falls back, see its section); **graph token**, it takes `token_mask` "
            "(Graphormer's virtual token); **learnable parameters**, counted at three widths, C = channels; "
            f"**cost**, one forward pass on {GRAPHS} graphs of {SIZES[1]} nodes and {CHANNELS} channels, one thread, "
            "relative to `layernorm`, measured on the machine that built this page; **growth**, how that time grows "
            f"with the graph size (timed at {nodes} nodes per graph).",
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


def on_page_content(html, page, config, files):
    """A download link at the top of every notebook's page (the ``.ipynb`` that mkdocs-jupyter copies beside it)."""
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
