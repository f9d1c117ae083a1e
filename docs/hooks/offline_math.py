"""mkdocs hook: MathJax 3 inside the built site, from the ``django-static-mathjax`` package (in ``.[docs]``).

The site renders its formulas (pymdownx.arithmatex, generic mode; configured by ``docs/javascripts/mathjax.js``)
with no network: the combined component ``tex-mml-chtml.js`` and the folders it loads on demand (CHTML fonts, TeX
extensions, the accessibility and menu components) are added to the build as ``javascripts/mathjax/...``, read in
place from the installed package (nothing is copied into git). The package ships MathJax's own files only; its
Django app is not used.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SITE_FOLDER = "javascripts/mathjax"
# The combined component the pages load, and what it may fetch later relative to itself.
ENTRY = "tex-mml-chtml.js"
ON_DEMAND = ("output/chtml/fonts/woff-v2", "input/tex/extensions", "a11y", "ui", "sre", "adaptors")


def mathjax_folder() -> Path:
    """The ``es5`` folder of the installed MathJax package; an error naming the missing extra otherwise."""
    spec = importlib.util.find_spec("mathjax")
    folder = Path(spec.origin).parent / "static" / "mathjax" / "es5" if spec and spec.origin else None
    if folder is None or not (folder / ENTRY).is_file():
        raise RuntimeError(
            "MathJax for the site comes from the django-static-mathjax package: pip install -e '.[docs]'"
        )
    return folder


def mathjax_files() -> dict[str, Path]:
    """Site path -> installed file, for the entry component and every file it loads on demand."""
    folder = mathjax_folder()
    files = {f"{SITE_FOLDER}/{ENTRY}": folder / ENTRY}
    for sub in ON_DEMAND:
        for path in sorted((folder / sub).rglob("*")):
            if path.is_file():
                files[f"{SITE_FOLDER}/{path.relative_to(folder).as_posix()}"] = path
    return files


def on_files(files, config):
    """Adds MathJax's files to the build, read where the package installed them."""
    from mkdocs.structure.files import File

    for site_path, source in mathjax_files().items():
        if files.get_file_from_path(site_path) is None:
            files.append(File.generated(config, site_path, abs_src_path=str(source)))
    return files
