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
    for stem in ("main_metric_vs_depth", "metric_vs_layer", "spectra", "learning_curves"):
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


def graphormer_like_sweep(run_dir: Path) -> Path:
    """runs.csv / layers.csv as a Graphormer sweep writes them: 2 norms x 2 seeds, 2 encoder layers, the probe's
    layer 1 the embedding (so the last layer is num_layers + 1), node rows ("mean" over graphs) and token rows."""
    run_dir.mkdir(parents=True, exist_ok=True)
    runs, layers = [], []
    for norm_index, norm in enumerate(["layernorm", "sepnorm"]):
        for seed in (0, 1):
            run_id = f"{norm}-{seed}"
            runs.append({"run_id": run_id, "norm": norm, "num_layers": 2, "seed": seed, "test_mae": 0.5 - 0.1 * seed})
            for layer in (1, 2, 3):
                for rows, stat in (("node", "mean"), ("token", "value")):
                    # token effective rank: 10 * layer + norm index + seed, node: 100 + that
                    value = 10.0 * layer + norm_index + seed + (100.0 if rows == "node" else 0.0)
                    for metric in ("effective_rank", "cone_angle"):
                        layers.append(
                            {"run_id": run_id, "layer": layer, "layer_name": f"l{layer}", "rows": rows,
                             "metric": metric, "stat": stat, "value": value, "split": "val_sample"}
                        )  # fmt: skip
    pd.DataFrame(runs).to_csv(run_dir / "runs.csv", index=False)
    pd.DataFrame(layers).to_csv(run_dir / "layers.csv", index=False)
    return run_dir


def test_report_shows_graph_token_rows_by_layer_and_the_true_last_layer(tmp_path):
    from graphnorm.analysis.plots import load_sweep, make_report, summary_markdown

    run_dir = graphormer_like_sweep(tmp_path / "sweep")
    summary = summary_markdown(*load_sweep(run_dir))
    # last layer = layer 3 (embedding + 2 encoder layers), node rows: 130 + norm index + seed, mean over seeds 0, 1
    last = summary.split("effective_rank at the last layer")[1].split("##")[0]
    assert "| layernorm | 130.5 ± 0.71 (n=2) |" in last and "| sepnorm | 131.5 ± 0.71 (n=2) |" in last
    tokens = summary.split("effective_rank of the graph-token rows by layer (2 layers)")[1].split("##")[0]
    assert "| norm \\ layer | 1 | 2 | 3 |" in tokens
    assert "| sepnorm | 11.5 ± 0.71 (n=2) | 21.5 ± 0.71 (n=2) | 31.5 ± 0.71 (n=2) |" in tokens
    nodes = summary.split("effective_rank of the node rows by layer (2 layers)")[1].split("##")[0]
    assert "| layernorm | 110.5 ± 0.71 (n=2) | 120.5 ± 0.71 (n=2) | 130.5 ± 0.71 (n=2) |" in nodes
    names = {path.name for path in make_report(run_dir, tmp_path / "report")}
    assert {"token_metric_vs_layer.png", "metric_vs_layer.png", "summary.md"} <= names


def test_report_without_token_rows_has_no_token_sections(tmp_path):
    from graphnorm.analysis.plots import load_sweep, summary_markdown

    run_dir = graphormer_like_sweep(tmp_path / "sweep")
    layers = pd.read_csv(run_dir / "layers.csv")
    layers[layers["rows"] == "node"].to_csv(run_dir / "layers.csv", index=False)
    summary = summary_markdown(*load_sweep(run_dir))
    assert "effective_rank at the last layer" in summary and "graph-token" not in summary
