"""make_report and analysis/plot_sweep.py on a real (tiny) sweep: Cora, 1 epoch, probed layers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_SWEEP = {
    "name": "tiny",
    "base": {"dataset": "cora", "epochs": 1, "hidden_channels": 16},
    "grid": {"norm": ["none", "pairnorm"], "num_layers": [2, 4], "seed": [0]},
}


def build_tiny_sweep(base_dir: Path) -> Path:
    """Run (or resume: a finished sweep is not re-run) the tiny sweep with the collapse probe in each run."""
    from graphnorm.sweep import run_sweep

    out = base_dir / "tiny_sweep"
    run_sweep(
        TINY_SWEEP,
        out_dir=out,
        executor="serial",
        make_plots=False,
        progress=False,
        log=lambda message: None,
    )
    return out


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory, data_root) -> Path:
    return build_tiny_sweep(tmp_path_factory.getbasetemp())


@pytest.mark.slow
def test_make_report_writes_figures_and_summary(tiny_sweep, tmp_path):
    from graphnorm.analysis.plots import make_report

    layers = pd.read_csv(tiny_sweep / "layers.csv")
    assert {"run_id", "layer", "layer_name", "rows", "metric", "value", "stat"} <= set(layers.columns)
    assert layers.metric.str.startswith("sv_").any()
    paths = make_report(tiny_sweep, tmp_path / "report")
    names = {path.name for path in paths}
    for stem in ("main_metric_vs_depth", "metric_vs_layer", "spectra"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    assert all(path.stat().st_size > 1000 for path in paths if path.suffix in (".png", ".pdf"))
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "test_acc" in summary and "pairnorm" in summary and "effective_rank at the last layer" in summary


@pytest.mark.slow
def test_plot_sweep_script(tiny_sweep, tmp_path):
    out = tmp_path / "figures"
    result = subprocess.run(
        [sys.executable, str(REPO / "analysis" / "plot_sweep.py"), str(tiny_sweep), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (out / "metric_vs_layer.png").exists() and (out / "summary.md").exists()


def test_plot_sweep_script_clear_error_without_runs(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO / "analysis" / "plot_sweep.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and "runs.csv" in result.stderr


def test_line_labels_name_only_keys_that_vary_within_a_norm() -> None:
    from graphnorm.analysis.plots import _with_label

    runs = pd.DataFrame(
        {
            "norm": ["pairnorm", "pairnorm", "none", "none"],
            "norm_kwargs": ['{"scale": 1.0}', '{"scale": 1.0}', "{}", "{}"],  # per-norm setting: not in the label
            "seed": [0, 1, 0, 1],
            "num_layers": [2, 2, 2, 2],
        }
    )
    assert sorted(set(_with_label(runs)["label"])) == ["none", "pairnorm"]
    runs["hidden_channels"] = [32, 64, 32, 32]  # varies within pairnorm: the label must tell those lines apart
    assert sorted(set(_with_label(runs)["label"])) == [
        "none (hidden_channels=32)",
        "pairnorm (hidden_channels=32)",
        "pairnorm (hidden_channels=64)",
    ]
