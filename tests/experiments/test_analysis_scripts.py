"""make_report and analysis/plot_sweep.py on a real (tiny) sweep: Cora, 1 epoch, probed layers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_make_report_writes_figures_and_summary(tiny_sweep, tmp_path):
    from graphnorm.sweep.report import make_report

    layers = pd.read_csv(tiny_sweep / "layers.csv")
    assert {"run_id", "layer", "layer_name", "rows", "metric", "value", "stat"} <= set(layers.columns)
    assert layers.metric.str.startswith("sv_").any()
    paths = make_report(tiny_sweep, tmp_path / "report")
    names = {path.name for path in paths}
    for stem in ("main_metric_vs_depth", "metric_vs_layer", "spectra", "learning_curves"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    assert all(path.stat().st_size > 1000 for path in paths if path.suffix in (".png", ".pdf"))
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "test_acc" in summary and "pairnorm" in summary
    assert "effective_rank at the last probed layer (gcn: the classifier output" in summary


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
    from graphnorm.sweep.frames import with_label

    runs = pd.DataFrame(
        {
            "norm": ["pairnorm", "pairnorm", "none", "none"],
            "norm_kwargs": ['{"scale": 1.0}', '{"scale": 1.0}', "{}", "{}"],  # per-norm setting: not in the label
            "seed": [0, 1, 0, 1],
            "num_layers": [2, 2, 2, 2],
        }
    )
    assert sorted(set(with_label(runs)["label"])) == ["none", "pairnorm"]
    runs["hidden_channels"] = [32, 64, 32, 32]  # varies within pairnorm: the label must tell those lines apart
    assert sorted(set(with_label(runs)["label"])) == [
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
    from graphnorm.sweep.report import load_sweep, make_report, summary_markdown

    run_dir = graphormer_like_sweep(tmp_path / "sweep")
    summary = summary_markdown(*load_sweep(run_dir), digits=4)  # four digits: the .5 of the means shows
    # last layer = layer 3 (embedding + 2 encoder layers), node rows: 130 + norm index + seed, mean over seeds 0, 1
    last = summary.split("effective_rank at the last probed layer (the last layer the probe watched)")[1].split("##")[0]
    assert "| layernorm | 130.5 ± 0.7 |" in last and "| sepnorm | 131.5 ± 0.7 |" in last
    tokens = summary.split("effective_rank of the graph-token rows by layer (2 layers)")[1].split("##")[0]
    assert "| norm \\ layer | 1 | 2 | 3 |" in tokens
    assert "| sepnorm | 11.50 ± 0.71 | 21.50 ± 0.71 | 31.50 ± 0.71 |" in tokens
    nodes = summary.split("effective_rank of the node rows by layer (2 layers)")[1].split("##")[0]
    assert "| layernorm | 110.5 ± 0.7 | 120.5 ± 0.7 | 130.5 ± 0.7 |" in nodes
    names = {path.name for path in make_report(run_dir, tmp_path / "report")}
    assert {"token_metric_vs_layer.png", "metric_vs_layer.png", "summary.md"} <= names


def test_report_without_token_rows_has_no_token_sections(tmp_path):
    from graphnorm.sweep.report import load_sweep, summary_markdown

    run_dir = graphormer_like_sweep(tmp_path / "sweep")
    layers = pd.read_csv(run_dir / "layers.csv")
    layers[layers["rows"] == "node"].to_csv(run_dir / "layers.csv", index=False)
    summary = summary_markdown(*load_sweep(run_dir))
    assert "effective_rank at the last probed layer" in summary and "graph-token" not in summary


def protocol_like_sweep(run_dir: Path, majority: bool = True) -> Path:
    """A node-level GCN sweep whose own metric is test_acc_last (sweep.yaml), with best-validation test_acc far
    from it (as the ContraNorm-protocol sweep: vanilla at 16 layers 0.31 best-validation, 0.10 last epoch)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "sweep.yaml").write_text("name: proto\nmetric: test_acc_last\nbase: {}\ngrid: {num_layers: [2, 16]}\n")
    runs = []
    for norm, last in (("none", {2: 0.80, 16: 0.10}), ("contranorm", {2: 0.81, 16: 0.70})):
        for depth in (2, 16):
            for seed in (0, 1):
                runs.append(
                    {"run_id": f"{norm}-{depth}-{seed}", "status": "ok", "norm": norm, "model": "gcn", "seed": seed,
                     "num_layers": depth, "test_acc": 0.31, "test_acc_last": last[depth] + 0.01 * seed,
                     **({"majority_acc": 0.319} if majority else {})}
                )  # fmt: skip
    pd.DataFrame(runs).to_csv(run_dir / "runs.csv", index=False)
    return run_dir


def test_report_plots_and_tabulates_the_sweeps_own_metric(tmp_path):
    """Failed before: main_metric ignored sweep.yaml's metric and showed best-validation test_acc (0.31)."""
    from graphnorm.sweep.report import load_sweep, make_report, plot_main_metric_vs_depth, sweep_metric

    run_dir = protocol_like_sweep(tmp_path / "sweep")
    assert sweep_metric(run_dir) == "test_acc_last"
    make_report(run_dir, tmp_path / "report")
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert summary.startswith("# proto: test_acc_last, mean ± std over seeds (8 ok, 0 failed runs)")
    assert "| none | 0.805 ± 0.007 | 0.105 ± 0.007 * |" in summary
    assert "| contranorm | 0.815 ± 0.007 | 0.705 ± 0.007 |" in summary
    runs, _ = load_sweep(run_dir)
    figure = plot_main_metric_vs_depth(runs, metric="test_acc_last")
    axis = figure.axes[0]
    curves = {container.get_label(): list(container.lines[0].get_ydata()) for container in axis.containers}
    assert axis.get_ylabel() == "test acc last"
    assert [round(v, 3) for v in curves["none"]] == [0.805, 0.105]
    # The majority class: a dashed horizontal line with a legend entry.
    majority = [line for line in axis.get_lines() if line.get_label().startswith("majority class")]
    assert len(majority) == 1 and majority[0].get_linestyle() == "--" and list(majority[0].get_ydata()) == [0.319] * 2
    assert "majority class (0.319)" in [text.get_text() for text in axis.get_legend().get_texts()]
    assert "majority class (always the most frequent training class): 0.319" in summary


def test_one_summary_per_sweep_folder(tmp_path):
    """make_report adds its figures and collapse tables to the sweep's own summary.md (what write_summary wrote
    beside runs.csv), and writes no second one into report/; the sweep's table keeps its format."""
    from graphnorm.sweep.report import make_report
    from graphnorm.sweep.tables import write_summary

    run_dir = graphormer_like_sweep(tmp_path / "sweep")
    runs = pd.read_csv(run_dir / "runs.csv")
    sweep = {"name": "sweep", "grid": {"norm": ["layernorm", "sepnorm"], "seed": [0, 1]}}
    write_summary(sweep, runs, run_dir, log=lambda _: None)
    written = (run_dir / "summary.md").read_text()
    paths = make_report(run_dir)
    summary = (run_dir / "summary.md").read_text()
    assert run_dir / "summary.md" in paths and not (run_dir / "report" / "summary.md").exists()
    assert summary.startswith(written)  # the sweep's title, table and note as the sweep wrote them
    assert "![metric_vs_layer](report/metric_vs_layer.png)" in summary  # links from the summary's folder
    assert summary.count("# ") - summary.count("## ") == 1  # one title
    assert "effective_rank of the graph-token rows by layer (2 layers) (mean ± std over 2 seeds)" in summary
    assert "## data: test_mae" not in summary  # the metric's table once: the sweep's own
    elsewhere = tmp_path / "elsewhere"
    make_report(run_dir, elsewhere)  # a report kept elsewhere: its summary there, links beside it
    assert "![metric_vs_layer](metric_vs_layer.png)" in (elsewhere / "summary.md").read_text()
    assert (run_dir / "summary.md").read_text() == summary


def test_report_without_majority_column_has_no_majority_line(tmp_path):
    from graphnorm.sweep.report import load_sweep, plot_main_metric_vs_depth, summary_markdown

    runs, layers = load_sweep(protocol_like_sweep(tmp_path / "sweep", majority=False))
    axis = plot_main_metric_vs_depth(runs, metric="test_acc_last").axes[0]
    assert not [line for line in axis.get_lines() if line.get_label().startswith("majority")]
    assert "majority" not in summary_markdown(runs, layers, "test_acc_last")
    with pytest.raises(ValueError, match="'test_rocauc' has no values"):
        plot_main_metric_vs_depth(runs, metric="test_rocauc")


def test_last_layer_description_names_the_layer_per_model():
    from graphnorm.sweep.report import last_layer_description

    assert "classifier output (logits" in last_layer_description(pd.DataFrame({"model": ["gcn"]}))
    graph_level = pd.DataFrame({"model": ["gcn"], "readout": ["mean"]})
    assert "before the readout" in last_layer_description(graph_level)
    # A node-level run records num_eval_nodes; its readout column holds the config default "mean" all the same.
    node_level = pd.DataFrame({"model": ["gat"], "readout": ["mean"], "num_eval_nodes": [2568]})
    assert "classifier output (logits" in last_layer_description(node_level)
    assert "before the output Linear" in last_layer_description(pd.DataFrame({"model": ["gcnii"]}))
    assert last_layer_description(pd.DataFrame({"norm": ["x"]})) == "the last layer the probe watched"


def test_sweep_summary_prints_and_marks_the_majority_class(tmp_path):
    """graphnorm.sweep.tables.write_summary (the printed table and summary.md): a majority-class note, cells within one
    point of it (or below) marked; nothing of the kind without the majority_acc column."""
    from graphnorm.sweep.tables import write_summary

    runs = pd.read_csv(protocol_like_sweep(tmp_path / "sweep").joinpath("runs.csv"))
    sweep = {"name": "proto", "grid": {"norm": ["none", "contranorm"], "num_layers": [2, 16], "seed": [0, 1]}}
    printed: list[str] = []
    write_summary({**sweep, "metric": "test_acc_last"}, runs, tmp_path, log=printed.append)
    text = (tmp_path / "summary.md").read_text()
    assert "| none | 0.805 ± 0.007 | 0.105 ± 0.007 * |" in text
    assert "| contranorm | 0.815 ± 0.007 | 0.705 ± 0.007 |" in text
    assert "majority class (always the most frequent training class): 0.319" in text and "0.319" in printed[0]
    write_summary({**sweep, "metric": "test_acc_last"}, runs.drop(columns="majority_acc"), tmp_path, log=print)
    assert "majority" not in (tmp_path / "summary.md").read_text() and " *" not in (tmp_path / "summary.md").read_text()
    # Several datasets: each one's level in the note, no marks (one level would not fit every row).
    two = pd.concat([runs.assign(dataset="cora"), runs.assign(dataset="texas", majority_acc=0.59)])
    sweep["grid"]["dataset"] = ["cora", "texas"]
    write_summary({**sweep, "metric": "test_acc_last"}, two, tmp_path, log=print)
    text = (tmp_path / "summary.md").read_text()
    assert "majority class (always the most frequent training class): cora 0.319, texas 0.590" in text
    assert " *" not in text


def test_summary_with_significant_digits_states_the_seed_count_once(tmp_path):
    """digits=3 (the results page): three significant digits, the std to the mean's decimals, the count in the
    title; a cell over fewer runs than the rest names its own count. The sweep's own report has the same format."""
    from graphnorm.sweep.report import load_sweep, summary_markdown

    run_dir = protocol_like_sweep(tmp_path / "sweep")
    runs, layers = load_sweep(run_dir)
    summary = summary_markdown(runs, layers, "test_acc_last", digits=3)
    assert "## data: test_acc_last (mean ± std over 2 seeds)" in summary
    assert "| none | 0.805 ± 0.007 | 0.105 ± 0.007 ≤maj |" in summary and "(n=" not in summary
    fewer = runs[~((runs["norm"] == "none") & (runs["num_layers"] == 16) & (runs["seed"] == 1))]
    summary = summary_markdown(fewer, layers, "test_acc_last", digits=3)
    assert "| none | 0.805 ± 0.007 | 0.100 (n=1) ≤maj |" in summary  # one run: no spread, its count named
    one_seed = summary_markdown(runs[runs["seed"] == 0], layers, "test_acc_last", digits=3)
    assert "## data: test_acc_last (1 seed)" in one_seed and "| none | 0.800 | 0.100 ≤maj |" in one_seed
    assert summary_markdown(runs, layers, "test_acc_last") == summary_markdown(runs, layers, "test_acc_last", digits=3)


def test_collapse_tables_name_their_count_after_the_runs(tmp_path):
    """digits=3 on a Graphormer-like sweep: every collapse table's title gives its count once; when the runs repeat
    a dataset's splits (not seeds), the titles say seed x split runs."""
    from graphnorm.sweep.report import load_sweep, summary_markdown

    runs, layers = load_sweep(graphormer_like_sweep(tmp_path / "sweep"))
    summary = summary_markdown(runs, layers, digits=3)
    last = "effective_rank at the last probed layer (the last layer the probe watched) (mean ± std over 2 seeds)"
    assert last in summary and "(n=" not in summary
    assert "| sepnorm | 11.5 ± 0.7 | 21.5 ± 0.7 | 31.5 ± 0.7 |" in summary  # std to the mean's decimals
    splits = runs.assign(split=runs["seed"], seed=0)
    summary = summary_markdown(splits, layers, digits=3)
    assert "## data: test_mae (mean ± std over 2 seed x split runs)" in summary
    assert "of the graph-token rows by layer (2 layers) (mean ± std over 2 seed x split runs)" in summary
    assert "seeds)" not in summary


def test_depth_figure_has_a_panel_per_dataset_setting_with_its_reference_accuracy():
    """A grid over the dataset's options (CSBM homophily x SNR) is one panel per setting, each with its own
    lines and the Bayes level its runs recorded, titled by the options that vary."""
    from graphnorm.sweep.report import plot_main_metric_vs_depth

    rows = []
    for homophily, reference in ((0.5, 0.6), (0.9, 0.75)):
        kwargs = json.dumps({"homophily": homophily, "num_nodes": 100})
        for depth in (1, 2):
            for seed in (0, 1):
                accuracy = reference + 0.1 * depth * (homophily - 0.5) + 0.01 * seed
                rows.append(
                    dict(
                        run_id=f"r{homophily}{depth}{seed}",
                        dataset="csbm",
                        norm="none",
                        num_layers=depth,
                        seed=seed,
                        dataset_kwargs=kwargs,
                        test_acc=accuracy,
                        reference_accuracy=reference,
                        metric="acc",
                    )
                )
    figure = plot_main_metric_vs_depth(pd.DataFrame(rows), metric="test_acc")
    panels = [axis for axis in figure.axes if axis.get_visible()]
    assert [axis.get_title() for axis in panels] == ["homophily=0.5", "homophily=0.9"]
    for axis, reference in zip(panels, (0.6, 0.75)):
        levels = [line for line in axis.get_lines() if line.get_label().startswith("Bayes from own features")]
        assert len(levels) == 1 and list(levels[0].get_ydata()) == [reference] * 2
        assert [t.get_text() for t in axis.get_xticklabels()] == ["1", "2"]
    curve = panels[1].containers[0].lines[0].get_ydata()
    assert [round(v, 3) for v in curve] == [0.795, 0.835]


@contextlib.contextmanager
def _fails_if_blocked(seconds: int):
    """A writer that opens a FIFO waits for a reader forever: raise in it after ``seconds`` instead."""

    def blocked(signum, frame):
        raise TimeoutError("the writer blocked (opened a FIFO?)")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["summary-link", "figure-link", "summary-fifo", "report-link"])
def test_make_report_writes_through_no_planted_link_or_fifo(tiny_sweep, tmp_path, planted):
    from graphnorm.files import OutputPathError
    from graphnorm.sweep.report import make_report

    run_dir = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, run_dir)
    shutil.rmtree(run_dir / "report", ignore_errors=True)
    users_file = tmp_path / "users_notes.md"
    users_file.write_text("keep me")
    report = run_dir / "report"
    if planted == "report-link":
        (tmp_path / "elsewhere").mkdir()
        report.symlink_to(tmp_path / "elsewhere")
    else:
        report.mkdir()
        target = run_dir / "summary.md" if planted.startswith("summary") else report / "spectra.png"  # the summary
        target.unlink(missing_ok=True)  # is the sweep's own, beside runs.csv
        os.mkfifo(target) if planted.endswith("fifo") else target.symlink_to(users_file)
    with _fails_if_blocked(60), pytest.raises(OutputPathError, match="link|FIFO|fifo"):
        make_report(run_dir)
    assert users_file.read_text() == "keep me"
    if planted == "report-link":
        assert not list((tmp_path / "elsewhere").iterdir())
