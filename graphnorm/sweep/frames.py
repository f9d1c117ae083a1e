"""A sweep folder's tables as frames: its runs, layers, learning curves and steps, its metric, and the labels that
tell its variants apart (the norm, plus any other config key that varies within a norm).

``split`` (a dataset's standard splits) is a repetition like ``seed``: "over seeds" means over every seed x split run
of a label.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from graphnorm.sweep.tables import DEFAULT_METRICS

# Config columns that never define a variant (they are the axes or the repetition).
_NON_VARIANT = {"num_layers", "seed", "split", "dataset", "data_root", "run_id", "status", "epochs"}


def load_epochs(run_dir: str | Path) -> pd.DataFrame:
    """The sweep's learning curves (``epochs.csv``: run_id, epoch, train_loss, val/test metric, ...); empty when
    the sweep has none."""
    path = Path(run_dir) / "epochs.csv"
    return pd.read_csv(path) if path.exists() and path.stat().st_size > 0 else pd.DataFrame()


def load_steps(run_dir: str | Path) -> pd.DataFrame:
    """The sweep's collapse over training steps (``steps.csv``: run_id, step, epoch, layer, rows, metric, stat,
    value, ...); empty when the sweep has none."""
    path = Path(run_dir) / "steps.csv"
    return pd.read_csv(path) if path.exists() and path.stat().st_size > 0 else pd.DataFrame()


def load_sweep(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, layers) of a sweep directory; layers is empty when the sweep has no layers.csv."""
    run_dir = Path(run_dir)
    runs_path = run_dir / "runs.csv"
    if not runs_path.exists():
        raise FileNotFoundError(f"{runs_path} not found: expected a sweep output directory with runs.csv")
    runs = pd.read_csv(runs_path)
    for column in ("run_id", "norm", "num_layers"):
        if column not in runs.columns:
            raise ValueError(f"{runs_path} has no column {column!r} (columns: {', '.join(runs.columns)})")
    if "status" in runs.columns:
        runs = runs[runs["status"] == "ok"]
    layers_path = run_dir / "layers.csv"
    layers = pd.read_csv(layers_path) if layers_path.exists() and layers_path.stat().st_size > 0 else pd.DataFrame()
    return runs.reset_index(drop=True), layers


def sweep_metric(run_dir: str | Path) -> str | None:
    """The sweep's own ``metric`` (top-level key of its YAML, saved as ``sweep.yaml`` in its folder), or None."""
    metric = sweep_config(run_dir).get("metric")
    return str(metric) if metric else None


def sweep_config(run_dir: str | Path) -> dict:
    """The sweep's YAML as saved in its folder (``sweep.yaml``), named after the folder when it names nothing; a
    folder without one (runs.csv from elsewhere) is a sweep of that name with no grid."""
    path = Path(run_dir) / "sweep.yaml"
    config = {}
    if path.exists():
        import yaml

        loaded = yaml.safe_load(path.read_text())
        config = loaded if isinstance(loaded, dict) else {}
    return {**config, "name": config.get("name") or Path(run_dir).resolve().name}


def main_metric(runs: pd.DataFrame, metric: str | None = None) -> str:
    """``metric`` (the sweep's own, e.g. test_acc_last) when given, else the task metric present in ``runs``:
    test_acc, test_rocauc or test_mae (first found). ``ValueError`` when ``metric`` has no values in ``runs``."""
    if metric is not None:
        if metric not in runs.columns or not runs[metric].notna().any():
            raise ValueError(f"the sweep's metric {metric!r} has no values in runs.csv (columns: {list(runs.columns)})")
        return metric
    for name in DEFAULT_METRICS:
        if name in runs.columns and runs[name].notna().any():
            return name
    raise ValueError(f"runs has none of the task metrics {DEFAULT_METRICS} (columns: {', '.join(runs.columns)})")


def _variant_columns(runs: pd.DataFrame) -> list[str]:
    """``norm`` and the config keys that vary within a norm: the columns a label is made of."""
    from graphnorm.config import RunConfig

    candidates = [c for c in RunConfig.field_names() if c in runs.columns and c not in _NON_VARIANT and c != "norm"]
    # Only keys that vary *within* a norm tell its lines apart; per-norm settings (norm_settings) follow the norm.
    as_text = runs[candidates].astype(str).assign(norm=runs["norm"].astype(str))
    varying = [c for c in candidates if (as_text.groupby("norm")[c].nunique() > 1).any()]
    return ["norm", *varying]


def with_label(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with a ``label`` column: the norm, then ``(key=value, ...)`` of the other keys that vary within it."""
    columns = _variant_columns(runs)
    runs = runs.copy()
    if len(columns) == 1:
        runs["label"] = runs["norm"].astype(str)
    else:
        runs["label"] = (
            runs[columns]
            .astype(str)
            .apply(lambda row: row["norm"] + " (" + ", ".join(f"{c}={row[c]}" for c in columns[1:]) + ")", axis=1)
        )
    return runs


def layer_table(runs: pd.DataFrame, layers: pd.DataFrame, rows: str = "node") -> pd.DataFrame:
    """Layer metrics of one kind of rows (``"node"``, or ``"token"``: the graph-token rows) joined with the runs'
    label / depth / seed / dataset: one value per (run, layer, metric); the per-graph "value" (one graph) or "mean"
    (over graphs) statistic, the first split if several."""
    columns = ["run_id", "layer", "metric", "value", "label", "num_layers", "seed", "dataset"]
    if layers.empty:
        return pd.DataFrame(columns=columns)
    table = layers
    if "rows" in table.columns:
        table = table[table["rows"] == rows]
    elif rows != "node":  # layers.csv without a rows column holds node rows only
        return pd.DataFrame(columns=columns)
    if "stat" in table.columns:
        table = table[table["stat"].isin(["value", "mean"]) | table["stat"].isna()]
    if "split" in table.columns and table["split"].notna().any():
        table = table[table["split"] == sorted(table["split"].dropna().unique())[0]]
    labelled = with_label(runs)
    keep = ["run_id", "label", "num_layers", "seed"] + (["dataset"] if "dataset" in labelled.columns else [])
    table = table.merge(labelled[keep], on="run_id", how="inner")
    if "dataset" not in table.columns:
        table["dataset"] = "data"
    return table


def datasets_of(frame: pd.DataFrame) -> list[str]:
    """The datasets of ``frame`` in sorted order (``["data"]`` without a dataset column)."""
    return sorted(frame["dataset"].astype(str).unique()) if "dataset" in frame.columns else ["data"]
