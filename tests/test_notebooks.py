"""Execute the notebooks (jupytext percent .py files) with small settings so they never rot."""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient
from test_analysis_scripts import build_tiny_sweep

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _execute(name: str, env: dict[str, str], monkeypatch) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the kernel inherits the environment
    notebook = jupytext.read(NOTEBOOKS / name)
    NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    assert any("image/png" in output.get("data", {}) for output in outputs), "no figure was drawn"


@pytest.mark.slow
def test_sweep_results_notebook(tmp_path_factory, data_root, monkeypatch):
    sweep_dir = build_tiny_sweep(tmp_path_factory.getbasetemp())
    _execute("sweep_results.py", {"GRAPHNORM_RUN_DIR": str(sweep_dir)}, monkeypatch)


@pytest.mark.slow
def test_train_collapse_notebook(data_root, monkeypatch):
    env = {
        "GRAPHNORM_NB_EPOCHS": "2",
        "GRAPHNORM_NB_DEPTHS": "2,4",
        "GRAPHNORM_DATA_MIRROR": os.environ.get("GRAPHNORM_DATA_MIRROR", ""),
    }
    _execute("train_collapse.py", env, monkeypatch)
