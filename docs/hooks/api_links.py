"""mkdocs hook: links from the API reference into the torch, PyG, NumPy and Python documentation, with no network.

mkdocstrings marks every name it can link (a signature's ``torch.Tensor``, a docstring role turned into an optional
cross-reference by ``rst_markdown.py``) as an ``<autoref identifier="...">``; names the site does not document stay
plain code. Sphinx inventories (``objects.inv``) would link the external ones, but fetching them needs the
network at build time. Instead :func:`external_url` maps a dotted name to its page by the URL patterns of those
sites (a small table below), and :func:`on_env` registers, before mkdocs-autorefs resolves the references, the
external names that the built pages actually mention; a graphnorm module without a page of its own links to its
source file in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.plugins import event_priority

REPO = Path(__file__).resolve().parents[2]

TORCH = "https://pytorch.org/docs/stable"
PYG = "https://pytorch-geometric.readthedocs.io/en/latest"
NUMPY = "https://numpy.org/doc/stable/reference"
PYTHON = "https://docs.python.org/3/library"
# Pages that do not follow the sites' one-page-per-name pattern.
SPECIAL = {
    "torch.Tensor": f"{TORCH}/tensors.html#torch.Tensor",
    "torch.dtype": f"{TORCH}/tensor_attributes.html#torch.dtype",
    "torch.device": f"{TORCH}/tensor_attributes.html#torch.device",
    "torch.optim.Optimizer": f"{TORCH}/optim.html#torch.optim.Optimizer",
    "torch.utils.data.DataLoader": f"{TORCH}/data.html#torch.utils.data.DataLoader",
    "torch.utils.data.Dataset": f"{TORCH}/data.html#torch.utils.data.Dataset",
    "numpy.ndarray": f"{NUMPY}/generated/numpy.ndarray.html",
}
# Standard-library modules whose names the docstrings and signatures use.
PYTHON_MODULES = ("pathlib", "collections", "typing", "dataclasses", "os", "json", "logging", "threading", "re")
_AUTOREF = re.compile(r"<autoref\b[^>]*?\bidentifier=\"([^\"]+)\"")
_NAME = re.compile(r"^[A-Za-z_][\w.]*$")


def external_url(identifier: str) -> str | None:
    """The documentation page of a torch / PyG / NumPy / standard-library name, else None."""
    if not _NAME.match(identifier):
        return None
    if identifier in SPECIAL:
        return SPECIAL[identifier]
    top, _, rest = identifier.partition(".")
    if not rest:
        return None
    if top == "torch":
        return f"{TORCH}/generated/{identifier}.html"
    if top == "torch_geometric":
        return f"{PYG}/generated/{identifier}.html"
    if top in ("numpy", "np"):
        return f"{NUMPY}/generated/numpy.{rest}.html"
    if top in PYTHON_MODULES:  # the page of the name's module: collections.abc.Callable -> collections.abc.html
        return f"{PYTHON}/{identifier.rsplit('.', 1)[0]}.html#{identifier}"
    return None


def module_source_url(identifier: str, repo_url: str) -> str | None:
    """The repository page of a graphnorm module (``graphnorm.train.loop`` -> ``graphnorm/train/loop.py``), for a
    module that has no entry of its own in the API reference (only the packages have pages)."""
    if not identifier.startswith("graphnorm.") or not _NAME.match(identifier):
        return None
    path = Path(*identifier.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if (REPO / candidate).is_file():
            return f"{repo_url.rstrip('/')}/blob/main/{candidate.as_posix()}"
    return None


@event_priority(0)  # before mkdocs-autorefs applies the cross-references (its on_env runs at -50)
def on_env(env, config, files):
    """Registers the external names the pages mention with mkdocs-autorefs, each with its documentation page, and
    graphnorm's modules with their source file (a fallback: a name with an entry in the site links there)."""
    autorefs = config.plugins.get("autorefs")
    if autorefs is None:
        return env
    known: set[str] = set()
    for file in files:
        if file.page is not None and file.page.content:
            known.update(_AUTOREF.findall(file.page.content))
    for identifier in sorted(known):
        url = external_url(identifier) or module_source_url(identifier, config.get("repo_url") or "")
        if url is not None:
            autorefs.register_url(identifier, url)
    return env
