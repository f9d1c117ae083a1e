"""mkdocs hooks: pages built from the code and from files that live outside ``docs/``.

* The catalogues of norms, models and datasets are generated from the registries at build time: a page holding
  ``<!-- catalogue:norms -->`` (``models``, ``datasets``) gets the table and one section per registered entry, so
  a newly registered norm appears without editing the docs (:func:`norms_catalogue`, :func:`models_catalogue`,
  :func:`datasets_catalogue`).
* The results pages, ``analysis/README.md`` (the summary) and ``analysis/questions/*.md`` (one per question, listed
  under the nav's "Results"), and their figures are added as ``results/studies.md``, ``results/questions/`` and
  ``results/figures/``, read in place; ``<!-- results:benchmarks -->`` receives the benchmarks question's page.
* Every executed notebook ``notebooks/*.ipynb`` is added at its repository path (rendered by mkdocs-jupyter with its
  outputs, not executed; a page at ``notebooks/<name>/``) and listed under the nav's "Tutorials", so a new notebook
  needs no docs edit.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import sys
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).parent))

from mkdocs.plugins import event_priority  # noqa: E402
from rst_markdown import expand_grouped_arguments, rst_to_markdown  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RESULTS_PAGE = "results/studies.md"
QUESTIONS = "results/questions"  # the results' question pages, as analysis/questions/ beside analysis/README.md
# Question pages that a page of docs/ shows whole (through a marker), so the site has no page of their own.
IN_OTHER_PAGES = {f"{QUESTIONS}/benchmarks.md": "results/benchmarks.md"}
log = logging.getLogger("mkdocs.hooks.graphnorm")  # under "mkdocs": a warning here fails a strict build

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Raises|Returns|Yields):\s*$")
_ARG = re.compile(r"^(\*{0,2}\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


# ---------------------------------------------------------------------------------------------- docstrings


def split_docstring(obj: object) -> tuple[str, dict[str, str]]:
    """(the docstring without its Args / Raises / Returns sections, as Markdown; {argument: description})."""
    lines = expand_grouped_arguments((inspect.getdoc(obj) or "").splitlines())
    body: list[str] = []
    arguments: dict[str, str] = {}
    section = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section = header.group(1)
            continue
        if section and line and not line.startswith(" "):
            section = None  # the section ended: text at the docstring's own indentation again
        if section is None:
            body.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            match = _ARG.match(line[4:]) if line.startswith("    ") and not line.startswith("     ") else None
            if match:
                name = match.group(1).lstrip("*")
                arguments[name] = match.group(2)
            elif arguments:
                last = next(reversed(arguments))
                arguments[last] = f"{arguments[last]} {line.strip()}"
    return rst_to_markdown("\n".join(body).strip()), {k: rst_to_markdown(v) for k, v in arguments.items()}


def first_paper(text: str) -> str:
    """The first Markdown link of ``text`` (the paper a docstring cites first), else its first URL, else a dash."""
    link = re.search(r"\[([^\]]+)\]\((https?://[^)\s]+)\)", text)
    if link:
        return link.group(0)
    url = re.search(r"https?://[^\s)>`,]+", text)
    return f"<{url.group(0).rstrip('.')}>" if url else "—"


def cell(text: str) -> str:
    """``text`` fit for one Markdown table cell."""
    return re.sub(r"(?<!\\)\|", r"\\|", " ".join(text.split())) or " "


def options_table(parameters: list[inspect.Parameter], described: dict[str, str]) -> list[str]:
    """A table of constructor options: name, default (the signature's) and meaning (the docstring's Args)."""
    if not parameters:
        return ["No options."]
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for parameter in parameters:
        default = "required" if parameter.default is parameter.empty else f"`{parameter.default!r}`"
        rows.append(f"| `{parameter.name}` | {cell(default)} | {cell(described.get(parameter.name, ''))} |")
    return rows


def api_link(obj: object, package: str) -> str:
    """A cross-reference to ``obj`` in the API reference when ``package`` exports it, else its dotted path."""
    name = getattr(obj, "__name__", repr(obj))
    module = sys.modules.get(package)
    if module is not None and getattr(module, name, None) is obj and name in getattr(module, "__all__", []):
        return f"[`{package}.{name}`][{package}.{name}]"
    return f"`{obj.__module__}.{name}`"


def public_parameters(target: object, skip: tuple[str, ...]) -> list[inspect.Parameter]:
    """The named parameters of ``target``'s signature, without ``self``, ``*args``, ``**kwargs`` and ``skip``."""
    parameters = inspect.signature(target).parameters.values()
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p for p in parameters if p.name not in ("self", *skip) and p.kind not in variadic]


# ---------------------------------------------------------------------------------------------- catalogues


def norms_catalogue() -> str:
    """Every registered norm: a table, then per norm its class, paper, docstring (formula, deviations) and options."""
    from graphnorm.norms import available_norms, norm_class

    table = ["| name | class | paper | options |", "|---|---|---|---|"]
    sections = []
    for name in available_norms():
        cls = norm_class(name)
        body, described = split_docstring(cls)
        parameters = public_parameters(cls.__init__, skip=("channels",))
        paper = first_paper(body)
        options = ", ".join(f"`{p.name}`" for p in parameters) or "—"
        link = api_link(cls, "graphnorm.norms")
        table.append(f"| [`{name}`](#{anchor(name)}) | {link} | {cell(paper)} | {options} |")
        sections += [
            f"## `{name}` {{#{anchor(name)}}}",
            "",
            f'**Class** {link} · **Paper** {paper} · **Build** `build_norm("{name}", channels, **options)`',
            "",
            body,
            "",
            "**Options**",
            "",
            *options_table(parameters, described),
            "",
        ]
    return "\n".join([*table, "", *sections])


def models_catalogue() -> str:
    """Every registered model: a table, then per model its factory, levels, inputs, docstring and keywords."""
    from graphnorm.models.registry import TASK_KEYWORDS, available_models, model_spec

    table = ["| name | class | levels | options |", "|---|---|---|---|"]
    filled = ", ".join(f"`{keyword}`" for keyword in TASK_KEYWORDS)
    sections = []
    for name in available_models():
        spec = model_spec(name)
        target = spec.factory.__init__ if inspect.isclass(spec.factory) else spec.factory
        body, described = split_docstring(spec.factory)
        described = {**split_docstring(target)[1], **described} if inspect.isclass(spec.factory) else described
        parameters = public_parameters(target, skip=TASK_KEYWORDS)
        link = api_link(spec.factory, "graphnorm.models")
        levels = ", ".join(spec.levels)
        table.append(f"| [`{name}`](#{anchor(name)}) | {link} | {levels} | {len(parameters)} keywords |")
        facts = [f"**Class** {link}", f"**Levels** {levels}", f"**Called** `{spec.inputs}`-style"]
        if spec.token_rows:
            facts.append("**Graph-token rows** always (SepNorm runs on it)")
        sections += [
            f"## `{name}` {{#{anchor(name)}}}",
            "",
            " · ".join(facts),
            "",
            body,
            "",
            f"**Options** (`model: {name}` in a run config; the task fills {filled})",
            "",
            *options_table(parameters, described),
            "",
        ]
    return "\n".join([*table, "", *sections])


def datasets_catalogue() -> str:
    """Every registered dataset: name, level, task type, metric, standard splits, options and loader."""
    from graphnorm.data.registry import available_datasets, dataset_spec

    rows = ["| name | level | task | metric | standard splits | options | loader |", "|---|---|---|---|---|---|---|"]
    for name in available_datasets():
        spec = dataset_spec(name)
        options = ", ".join(f"`{option}`" for option in spec.options()) or "—"
        summary, _ = split_docstring(spec.loader)
        loader = f"`{spec.loader.__module__}.{spec.loader.__name__}`: {summary.split(chr(10) + chr(10))[0]}"
        rows.append(
            f"| `{name}` | {spec.level} | {spec.task_type or 'from the options'} | {spec.metric or 'from the options'} "
            f"| {spec.num_splits} | {options} | {cell(loader)} |"
        )
    return "\n".join(rows)


def tutorials_list() -> str:
    """One line per executed notebook: its title, linked to its page in the Tutorials section."""
    return "\n".join(
        f"* [{notebook_title(path)}](../notebooks/{path.name}) (`notebooks/{path.name}`)" for path in notebooks()
    )


CATALOGUES = {
    "norms": norms_catalogue,
    "models": models_catalogue,
    "datasets": datasets_catalogue,
    "tutorials": tutorials_list,
}


def anchor(name: str) -> str:
    """The HTML id of a catalogue entry."""
    return re.sub(r"[^a-z0-9_-]", "-", name.lower())


# ---------------------------------------------------------------------------------------------- external files


def notebooks() -> list[Path]:
    """The executed notebooks, in name order."""
    return sorted((REPO / "notebooks").glob("*.ipynb"))


def notebook_title(path: Path) -> str:
    """The notebook's first Markdown heading, else its name."""
    for cell_ in json.loads(path.read_text()).get("cells", []):
        if cell_.get("cell_type") == "markdown":
            for line in "".join(cell_.get("source", [])).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return path.stem.replace("_", " ")


def question_pages() -> dict[str, Path]:
    """Site path -> repository file of the results' question pages (``analysis/questions/*.md``, at
    ``results/questions/``), in name order; not those another page shows (:data:`IN_OTHER_PAGES`)."""
    pages = {f"{QUESTIONS}/{page.name}": page for page in sorted((REPO / "analysis" / "questions").glob("*.md"))}
    return {site: page for site, page in pages.items() if site not in IN_OTHER_PAGES}


def page_title(path: Path) -> str:
    """A Markdown page's first heading, else its name."""
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem.replace("-", " ")


def external_files() -> dict[str, Path]:
    """Site path -> repository file, for the results pages and their figures."""
    files = {RESULTS_PAGE: REPO / "analysis" / "README.md", **question_pages()}
    for figure in sorted((REPO / "analysis" / "figures").glob("*")):
        if figure.is_file():
            files[f"results/figures/{figure.name}"] = figure
    return files


def on_config(config):
    """Lists every notebook under the nav's "Tutorials" and every results question page under "Results", after the
    results summary (a page named ``leaderboard`` first), both after the pages the config names."""
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Tutorials" in entry:
            listed = entry["Tutorials"]
            for notebook in notebooks():
                listed.append({notebook_title(notebook): f"notebooks/{notebook.name}"})
        if isinstance(entry, dict) and "Results" in entry:
            listed = entry["Results"]
            after = next((i + 1 for i, item in enumerate(listed) if RESULTS_PAGE in dict(item).values()), 0)
            listed[after:after] = [{page_title(source): site} for site, source in ordered_question_pages()]
    return config


def ordered_question_pages() -> list[tuple[str, Path]]:
    """The question pages in the results summary's order (the order of its links), a page named ``leaderboard``
    first, then any page the summary does not link."""
    pages = question_pages()
    linked = re.findall(r"\]\(questions/([\w-]+\.md)\)", (REPO / "analysis" / "README.md").read_text())
    order = [f"{QUESTIONS}/{name}" for name in dict.fromkeys(linked) if f"{QUESTIONS}/{name}" in pages]
    order += [site for site in pages if site not in order]
    order.sort(key=lambda site: site != f"{QUESTIONS}/leaderboard.md")  # stable: the rest keep the summary's order
    return [(site, pages[site]) for site in order]


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns the notebooks it finds into pages
def on_files(files, config):
    """Adds the results pages, their figures and the notebooks, read where they are."""
    from mkdocs.structure.files import File

    for site_path, source in external_files().items():
        if files.get_file_from_path(site_path) is None:
            files.append(File.generated(config, site_path, abs_src_path=str(source)))
    # mkdocs-jupyter reads a notebook through its File's source folder (a generated File has none), so a notebook
    # keeps its repository path, with the repository as its source folder.
    for notebook in notebooks():
        site_path = f"notebooks/{notebook.name}"
        if files.get_file_from_path(site_path) is None:
            files.append(File(site_path, str(REPO), config["site_dir"], config["use_directory_urls"]))
    return files


# ---------------------------------------------------------------------------------------------- page text


_MARKER = re.compile(r"<!-- (catalogue|results):(\w+) -->")
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def benchmark_section() -> tuple[str, str, str]:
    """The results' benchmark section, the site page that holds it and its repository folder: the question page
    ``analysis/questions/benchmarks.md`` without its title, else the results page's section whose heading names
    benchmarks (to the next heading of its level or above)."""
    question = REPO / "analysis" / "questions" / "benchmarks.md"
    if question.exists():
        body = re.sub(r"\A# .*\n", "", question.read_text())  # the page that includes it has its own heading
        return body.strip(), f"{QUESTIONS}/benchmarks.md", "analysis/questions"
    lines = (REPO / "analysis" / "README.md").read_text().splitlines()
    for start, line in enumerate(lines):
        heading = re.match(r"^(#{2,3}) .*benchmark", line, re.I)
        if heading:
            level = len(heading.group(1))
            end = next(
                (i for i in range(start + 1, len(lines)) if re.match(rf"^#{{1,{level}}} ", lines[i])), len(lines)
            )
            return "\n".join(lines[start + 1 : end]).strip(), RESULTS_PAGE, "analysis"
    log.warning("analysis/ has no benchmark section (questions/benchmarks.md) for results/benchmarks.md")
    return "", RESULTS_PAGE, "analysis"


def repository_link(page_dir: PurePosixPath, source_dir: PurePosixPath, match: re.Match[str]) -> str:
    """A link of a page read from ``source_dir`` in the repository, pointed at its page in the site: notebooks at
    their tutorial page, README.md at the home page, docs/ pages as themselves; a link to another repository file (code,
    configs) becomes the file's path as code, since the site does not hold it. A link into the site whose target
    is missing (a figure that was not built) stays a link, so the strict build reports it."""
    bang, text, target = match.groups()
    if re.match(r"^([a-z]+:|#)", target):
        return match.group(0)
    path, _, fragment = target.partition("#")
    resolved = PurePosixPath(*_normalize(source_dir / path)) if path else None
    site_path = None
    if resolved is not None:
        name = str(resolved)
        if name.startswith("analysis/figures/"):
            site_path = "results/figures/" + resolved.name
        elif name == "analysis/README.md":
            site_path = RESULTS_PAGE
        elif name.startswith("analysis/questions/") and name.endswith(".md"):
            site_path = f"{QUESTIONS}/{resolved.name}"
            site_path = IN_OTHER_PAGES.get(site_path, site_path)
        elif name == "README.md":
            site_path = "index.md"
        elif name.startswith("docs/"):
            site_path = name[len("docs/") :]
        elif name.startswith("notebooks/") and name.endswith(".ipynb"):
            site_path = name
    if site_path is None:
        shown = f"`{resolved}`" if resolved is not None else ""
        return text if shown.strip("`") in text else f"{text} ({shown})"
    relative = PurePosixPath(*_relative(page_dir, PurePosixPath(site_path)))
    return f"{bang}[{text}]({relative}{'#' + fragment if fragment else ''})"


def _normalize(path: PurePosixPath) -> list[str]:
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if parts:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return parts


def _relative(start: PurePosixPath, target: PurePosixPath) -> list[str]:
    common = 0
    while common < min(len(start.parts), len(target.parts) - 1) and start.parts[common] == target.parts[common]:
        common += 1
    return [".."] * (len(start.parts) - common) + list(target.parts[common:])


def on_page_markdown(markdown, page, config, files):
    """Fills the catalogue and benchmark markers; points the results page's repository links into the site."""
    source = {RESULTS_PAGE: "analysis", **dict.fromkeys(question_pages(), "analysis/questions")}.get(page.file.src_uri)
    if source is not None:
        page_dir = PurePosixPath(page.file.src_uri).parent
        markdown = _LINK.sub(lambda m: repository_link(page_dir, PurePosixPath(source), m), markdown)

    def fill(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind == "catalogue" and name in CATALOGUES:
            return CATALOGUES[name]()
        if (kind, name) == ("results", "benchmarks"):
            section, holder, source = benchmark_section()
            page_dir = PurePosixPath(page.file.src_uri).parent
            # its anchors are those of the page that holds it: "#study" -> "<that page>#study"
            results = PurePosixPath(*_relative(page_dir, PurePosixPath(holder)))
            section = re.sub(r"\]\(#", f"]({results}#", section)
            return _LINK.sub(lambda m: repository_link(page_dir, PurePosixPath(source), m), section)
        log.warning(f"{page.file.src_uri}: unknown marker {match.group(0)}")
        return match.group(0)

    return _MARKER.sub(fill, markdown)


# A table's first column names things (a norm, a metric): its code names never break inside a word. Results tables
# are wide (one column per depth, mean ± std cells): there every code name stays whole, and the scroll bar stays
# visible (Material shows it only on hover).
TABLE_STYLE = """<style>
.md-typeset__table table:not([class]) td:first-child code { white-space: nowrap; }
</style>"""
RESULTS_STYLE = """<style>
.md-typeset__scrollwrap { scrollbar-width: thin; scrollbar-color: var(--md-default-fg-color--light) transparent; }
.md-typeset__table table:not([class]) code { word-break: normal; overflow-wrap: normal; white-space: nowrap; }
</style>"""


def on_post_page(output, page, config):
    """Adds :data:`TABLE_STYLE` to every page, and :data:`RESULTS_STYLE` to the results pages."""
    style = TABLE_STYLE + (RESULTS_STYLE if page.file.src_uri.startswith("results/") else "")
    return output.replace("</head>", f"{style}</head>", 1)
