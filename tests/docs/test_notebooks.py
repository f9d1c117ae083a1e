"""The notebooks: each committed ``.ipynb`` matches its jupytext source and carries outputs, and each notebook runs
(with tiny settings) with its kernel in ``notebooks/`` while Jupyter's folder ($PWD) is the repository root, as when a
user starts Jupyter there: relative paths (the data root, a sweep's folder) must be read from $PWD, not the kernel's
folder. The results notebook, which looks for its folder in several places, runs with its kernel in both."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
NAMES = ("sweep_results", "train_collapse", "molecules_collapse", "pyg_model_collapse", "csbm_depth")
KERNEL_DIRS = {"repo_root": REPO, "notebooks_dir": NOTEBOOKS}
# Tiny settings for the execution tests (a few seconds of work each, beside the kernel's start and imports).
TINY = {
    "train_collapse": {"GRAPHNORM_NB_EPOCHS": "2", "GRAPHNORM_NB_DEPTHS": "2,3"},
    "molecules_collapse": {"GRAPHNORM_NB_GRAPHS": "40", "GRAPHNORM_NB_EPOCHS": "1", "GRAPHNORM_NB_LAYERS": "2"},
    "pyg_model_collapse": {"GRAPHNORM_NB_EPOCHS": "2", "GRAPHNORM_NB_LAYERS": "3"},
    "csbm_depth": {"GRAPHNORM_NB_NODES": "1000"},
}


def cell_sources(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in notebook.cells]


def sync_problems(name: str) -> list[str]:
    """How ``notebooks/<name>.ipynb`` differs from ``notebooks/<name>.py`` (cell types and sources), or []."""
    if not (NOTEBOOKS / f"{name}.ipynb").is_file():
        return [f"no executed copy notebooks/{name}.ipynb"]
    source = cell_sources(jupytext.read(NOTEBOOKS / f"{name}.py"))
    executed = cell_sources(nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4))
    problems = []
    if len(source) != len(executed):
        problems.append(f"{len(executed)} cells in the .ipynb, {len(source)} in the .py")
    for index, (ours, theirs) in enumerate(zip(source, executed)):
        if ours != theirs:
            problems.append(f"cell {index} ({ours[0]}) differs: .py {ours[1][:60]!r}... .ipynb {theirs[1][:60]!r}...")
    return problems


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_matches_its_source(name):
    problems = sync_problems(name)
    assert not problems, (
        f"notebooks/{name}.ipynb is out of date with notebooks/{name}.py: {problems}; "
        f"regenerate it: python notebooks/execute.py {name}"
    )


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_carries_outputs(name):
    assert (NOTEBOOKS / f"{name}.ipynb").is_file(), f"no executed copy: run python notebooks/execute.py {name}"
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code), "every code cell was executed"
    outputs = [output for cell in code for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    assert any("image/png" in output.get("data", {}) for output in outputs), "no figure in the committed notebook"


def _execute_script():
    """notebooks/execute.py as a module (notebooks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("notebooks_execute", NOTEBOOKS / "execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_stable_cell_ids(name):
    """Cell ids come from the notebook's name and the cell's position, not jupytext's random draw: executing again
    changes the outputs only."""
    stable_cell_ids = _execute_script().stable_cell_ids
    expected = [cell.id for cell in stable_cell_ids(jupytext.read(NOTEBOOKS / f"{name}.py"), name).cells]
    assert expected == [cell.id for cell in stable_cell_ids(jupytext.read(NOTEBOOKS / f"{name}.py"), name).cells]
    assert len(set(expected)) == len(expected)
    committed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    assert [cell.id for cell in committed.cells] == expected, f"run python notebooks/execute.py --markdown-only {name}"


def test_sync_check_fails_when_a_source_cell_changes(tmp_path, monkeypatch):
    for suffix in (".py", ".ipynb"):
        (tmp_path / f"train_collapse{suffix}").write_bytes((NOTEBOOKS / f"train_collapse{suffix}").read_bytes())
    monkeypatch.setattr(f"{__name__}.NOTEBOOKS", tmp_path)
    assert sync_problems("train_collapse") == []
    source = tmp_path / "train_collapse.py"
    text = source.read_text()
    changed = re.sub(r'"GRAPHNORM_NB_EPOCHS", "(\d+)"', lambda m: f'"GRAPHNORM_NB_EPOCHS", "{int(m[1]) + 1}"', text)
    assert changed != text, "the test's edit no longer matches the source"
    source.write_text(changed)
    problems = sync_problems("train_collapse")
    assert len(problems) == 1 and problems[0].startswith("cell 1 (code) differs")
    source.write_text(source.read_text() + "\n# %%\nprint('one more cell')\n")
    cells = len(jupytext.read(source).cells)
    assert sync_problems("train_collapse")[0] == f"{cells - 1} cells in the .ipynb, {cells} in the .py"


def _execute(name: str, kernel_dir: Path, env: dict[str, str], monkeypatch) -> nbformat.NotebookNode:
    """Execute ``notebooks/<name>.py`` in a fresh kernel working in ``kernel_dir``, with ``env`` added (the kernel
    inherits the environment); the executed notebook."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    notebook = jupytext.read(NOTEBOOKS / f"{name}.py")
    resources = {"metadata": {"path": str(kernel_dir)}}
    NotebookClient(notebook, timeout=180, kernel_name="python3", resources=resources).execute()
    return notebook


def _assert_ran_with_figures(notebook: nbformat.NotebookNode) -> None:
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    assert any("image/png" in output.get("data", {}) for output in outputs), "no figure was drawn"


@pytest.mark.slow
@pytest.mark.parametrize("kernel_dir", KERNEL_DIRS.values(), ids=KERNEL_DIRS.keys())
def test_sweep_results_notebook(tiny_sweep, monkeypatch, kernel_dir):
    # GRAPHNORM_RUN_DIR relative to the folder Jupyter was started in ($PWD), wherever the kernel works.
    base = tiny_sweep.parent
    notebook = _execute("sweep_results", kernel_dir, {"PWD": str(base), "GRAPHNORM_RUN_DIR": "tiny_sweep"}, monkeypatch)
    _assert_ran_with_figures(notebook)
    text = "".join(output.get("text", "") for output in notebook.cells[1].outputs)
    assert f"{(base / 'tiny_sweep').resolve()}: 4 successful runs" in text


@pytest.mark.slow
def test_sweep_results_notebook_without_results_says_to_run_the_main_job(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHNORM_RUN_DIR", str(tmp_path / "missing"))
    with pytest.raises(CellExecutionError) as caught:
        _execute("sweep_results", NOTEBOOKS, {}, monkeypatch)
    message = str(caught.value)
    assert "FileNotFoundError" in message and f"no sweep results in {tmp_path / 'missing'}" in message
    assert "Run the main job first" in message and "graphnorm sweep experiments/sweeps/cora_depth_quick.yaml" in message


@pytest.mark.slow
@pytest.mark.parametrize("name", ["train_collapse", "molecules_collapse", "pyg_model_collapse", "csbm_depth"])
def test_training_notebook(name, data_root, monkeypatch):
    # The kernel in notebooks/ and $PWD the repository root: of the two folders a kernel may work in, the one where
    # a relative data root (CI's mirror is ../shared/data) read from the kernel's folder instead of $PWD goes wrong.
    env = {**TINY[name], "GRAPHNORM_DATA_MIRROR": os.environ.get("GRAPHNORM_DATA_MIRROR", ""), "PWD": str(REPO)}
    notebook = _execute(name, NOTEBOOKS, env, monkeypatch)
    _assert_ran_with_figures(notebook)
