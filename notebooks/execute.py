"""Regenerate the executed notebooks (``notebooks/<name>.ipynb``, with outputs) from their jupytext sources.

    python notebooks/execute.py                       # all of them, at their defaults
    python notebooks/execute.py train_collapse        # one
    python notebooks/execute.py --cwd . --no-write    # time them with the kernel in the repository root
    python notebooks/execute.py --markdown-only       # copy edited markdown cells into the executed copies

Each source ``notebooks/<name>.py`` is converted with jupytext and executed with nbclient in a fresh ``python3``
kernel, whose working directory is ``notebooks/`` (as when Jupyter opens the notebook) unless ``--cwd`` says
otherwise; the executed notebook is written beside the source and the wall time printed. The sweep notebook needs
the main job's output first (``graphnorm sweep experiments/sweeps/cora_depth_quick.yaml``). Cells get ids made
from the notebook's name and their position (:func:`stable_cell_ids`), so executing again changes only outputs.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent
NAMES = ("sweep_results", "train_collapse", "molecules_collapse", "pyg_model_collapse", "csbm_depth")
TIMEOUT_S = 900  # per cell


def stable_cell_ids(notebook: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """``notebook`` with each cell's id made from ``name`` and the cell's position (jupytext draws random ones)."""
    for index, cell in enumerate(notebook.cells):
        cell.id = hashlib.sha256(f"{name}:{index}".encode()).hexdigest()[:8]
    return notebook


def execute(name: str, cwd: Path, write: bool = True) -> float:
    """Execute ``notebooks/<name>.py`` with the kernel in ``cwd``; write ``<name>.ipynb`` if ``write``; seconds."""
    notebook = stable_cell_ids(jupytext.read(NOTEBOOKS / f"{name}.py"), name)
    start = time.perf_counter()
    client = NotebookClient(
        notebook,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        record_timing=False,  # no timestamps in the committed files: re-executing changes only the outputs
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    seconds = time.perf_counter() - start
    if write:
        nbformat.write(notebook, NOTEBOOKS / f"{name}.ipynb")
    return seconds


def copy_markdown(name: str) -> None:
    """Give ``<name>.ipynb`` the markdown cells of ``<name>.py`` without executing anything: for edits of the
    text only. ``ValueError`` when the code cells (or the cell layout) differ: execute the notebook then."""
    source = jupytext.read(NOTEBOOKS / f"{name}.py")
    executed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    layout = [(cell.cell_type, cell.source if cell.cell_type == "code" else "") for cell in source.cells]
    if layout != [(cell.cell_type, cell.source if cell.cell_type == "code" else "") for cell in executed.cells]:
        raise ValueError(f"{name}: code cells changed, not only markdown: run python notebooks/execute.py {name}")
    for ours, theirs in zip(source.cells, executed.cells):
        theirs.source = ours.source
    nbformat.write(stable_cell_ids(executed, name), NOTEBOOKS / f"{name}.ipynb")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"notebooks to run, of {', '.join(NAMES)} (default: all)")
    parser.add_argument("--cwd", type=Path, default=NOTEBOOKS, help="the kernel's working directory (notebooks/)")
    parser.add_argument("--no-write", action="store_true", help="only execute and time; keep the committed files")
    parser.add_argument("--markdown-only", action="store_true", help="copy the markdown cells only; execute nothing")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in NAMES]
    if unknown:
        parser.error(f"unknown notebook(s) {unknown}; choose from {', '.join(NAMES)}")
    for name in args.names or NAMES:
        if args.markdown_only:
            copy_markdown(name)
            print(f"{name}: markdown cells copied from {name}.py")
            continue
        seconds = execute(name, args.cwd.resolve(), write=not args.no_write)
        print(f"{name}: executed in {seconds:.0f} s (kernel in {args.cwd.resolve()})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
