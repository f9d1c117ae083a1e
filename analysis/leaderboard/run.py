"""Run or resume a leaderboard tier through graphnorm's sweeps: first every tuning sweep (each norm's knob
combinations at the reference depth), the best mean validation metric chosen per (host, graph, norm) and written to
``<tier>_knobs.csv``; then every grid sweep with those knobs fixed; then the tidy table ``<tier>.csv``
(:mod:`.tables`). Sweep folders live under ``runs/leaderboard/<tier>/``; re-running skips every finished run, and
so does a fresh clone: a run the committed tables record (a tuning sweep's knob rows, a grid run's row with the
same run id) is not run again, and the tables written keep it beside what the sweep folders hold.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from graphnorm.config import config_run_id
from graphnorm.files import check_output_dir
from graphnorm.sweep.grid import expand_grid
from graphnorm.sweep.results import load_results
from graphnorm.sweep.tables import atomic_write_csv

from .protocol import (
    PROTOCOL,
    REPO,
    Graph,
    Part,
    Protocol,
    grid_sweep,
    knob_choices,
    load_protocol,
    metric_of,
    runnable_norms,
    setting_config,
    setting_name,
    tuning_sweep,
)

RESULTS = REPO / "analysis" / "leaderboard" / "results"
RUNS = Path("runs") / "leaderboard"
KNOB_COLUMNS = ["part", "host", "graph", "norm", "norm_kwargs", "val_metric", "val_mean", "runs", "chosen", "cpu_s",
                "run_ids"]  # fmt: skip


@dataclass
class Execution:
    """How the sweeps run: ``executor`` and its options as :func:`graphnorm.sweep.run_sweep` takes them."""

    executor: str = "local"
    workers: int | None = None
    threads: int | None = None
    retry_failed: bool = False
    slurm: Any = None
    log: Callable[[str], None] = print
    only_hosts: list[str] = field(default_factory=list)
    only_graphs: list[str] = field(default_factory=list)
    collect_only: bool = False  # run nothing; the tables from what the sweep folders and committed tables hold

    def sweep(self, sweep: dict[str, Any], out: Path) -> None:
        from graphnorm.sweep import run_sweep

        run_sweep(sweep, out, executor=self.executor, workers=self.workers, threads=self.threads,
                  retry_failed=self.retry_failed, slurm=self.slurm, make_plots=False, progress=False,
                  log=self.log)  # fmt: skip

    def selected(self, host: str, graph: Graph) -> bool:
        return (
            not self.collect_only
            and (not self.only_hosts or host in self.only_hosts)
            and (not self.only_graphs or graph.name in self.only_graphs)
        )


def results_paths(tier: str, results: Path = RESULTS) -> tuple[Path, Path]:
    """(the folder of the tidy runs table, one CSV per part and host; the knob choices) of ``tier``."""
    return results / tier, results / f"{tier}_knobs.csv"


def knob_rows(protocol: Protocol, part: Part, host: str, graph: Graph, norm: str, out: Path) -> list[dict[str, Any]]:
    """One row per knob combination of ``norm`` on (host, graph): its mean validation metric over the tuning runs
    found in ``out``, their CPU seconds, whether it is chosen (the best; ties and no result at all: the first
    listed) and the run ids of its tuning runs (a committed row stands for those runs only)."""
    sweep = tuning_sweep(protocol, part, host, graph, norm)
    configs = expand_grid(sweep, log=None)
    results = load_results(out, [config_run_id(c) for c in configs]) if out.is_dir() else {}
    _, val_metric, higher = metric_of(graph)
    keys = [json.dumps(c["norm_kwargs"], sort_keys=True) for c in sweep_choices(sweep)]
    scores: dict[str, list[float]] = {key: [] for key in keys}
    cpu: dict[str, float] = dict.fromkeys(keys, 0.0)
    ids: dict[str, list[str]] = {key: [] for key in keys}
    for config in configs:
        key = json.dumps(config.norm_kwargs, sort_keys=True)
        ids[key].append(config_run_id(config))
        result = results.get(config_run_id(config)) or {}
        record = result.get("record") or {}
        value = record.get(val_metric) if result.get("status") == "ok" else None
        if isinstance(value, (int, float)) and math.isfinite(value):
            scores[key].append(float(value))
            cpu[key] += float(record.get("cpu_s") or 0.0)
    means = {key: sum(v) / len(v) if v else math.nan for key, v in scores.items()}
    ranked = [key for key in means if not math.isnan(means[key])]
    best = (max if higher else min)(ranked, key=lambda k: means[k]) if ranked else keys[0]
    return [
        {"part": part.name, "host": host, "graph": graph.name, "norm": norm, "norm_kwargs": key,
         "val_metric": val_metric, "val_mean": means[key], "runs": len(scores[key]), "chosen": key == best,
         "cpu_s": cpu[key], "run_ids": " ".join(ids[key])}
        for key in keys
    ]  # fmt: skip


def recorded_knob_rows(recorded: pd.DataFrame, fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The committed knob rows of the tuning sweep ``fresh`` describes (:func:`knob_rows`), where they stand for the
    same runs (same knob combinations, same run ids), else ``[]``."""
    if recorded.empty:
        return []
    first = fresh[0]
    mine = recorded[(recorded["part"] == first["part"]) & (recorded["host"] == first["host"])
                    & (recorded["graph"] == first["graph"]) & (recorded["norm"] == first["norm"])]  # fmt: skip
    rows = mine[KNOB_COLUMNS].to_dict("records")
    same = [(r["norm_kwargs"], r["run_ids"]) for r in rows] == [(r["norm_kwargs"], r["run_ids"]) for r in fresh]
    return rows if same else []


def read_knobs(path: Path) -> pd.DataFrame:
    """The knob table ``run`` wrote (:data:`KNOB_COLUMNS`; ``chosen`` as booleans), empty where there is none."""
    if not Path(path).exists():
        return pd.DataFrame(columns=KNOB_COLUMNS)
    knobs = pd.read_csv(path, keep_default_na=False, na_values=[""])
    for column in ("cpu_s", "run_ids"):
        if column not in knobs:
            knobs[column] = math.nan if column == "cpu_s" else ""
    knobs["run_ids"] = knobs["run_ids"].astype(object).where(knobs["run_ids"].notna(), "").astype(str)
    knobs["chosen"] = knobs["chosen"].astype(str).str.lower() == "true"
    return knobs[KNOB_COLUMNS]


def sweep_choices(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """The tuning sweep's knob combinations as ``{"norm_kwargs": ...}``, in order."""
    return [{"norm_kwargs": kwargs} for kwargs in sweep["grid"]["norm_kwargs"]]


def chosen_kwargs(knobs: pd.DataFrame, part: str, host: str, graph: str) -> dict[str, dict[str, Any]]:
    """norm -> its chosen keywords on (host, graph), from a knob table (:data:`KNOB_COLUMNS`)."""
    if knobs.empty:
        return {}
    rows = knobs[(knobs["part"] == part) & (knobs["host"] == host) & (knobs["graph"] == graph) & knobs["chosen"]]
    return {row.norm: json.loads(row.norm_kwargs) for row in rows.itertuples()}


def setting_kwargs(protocol: Protocol, part: Part, host: str, graph: Graph, knobs: pd.DataFrame) -> dict[str, dict]:
    """Every runnable norm's keywords on (host, graph): the chosen knobs where tuned, else the fixed keywords."""
    from .protocol import fixed_kwargs

    chosen = chosen_kwargs(knobs, part.name, host, graph.name)
    norms, _ = runnable_norms(setting_config(part, host, graph), protocol.norms)
    return {norm: chosen.get(norm, fixed_kwargs(protocol, graph, norm)) for norm in norms}


def tuned_norms(protocol: Protocol, part: Part, host: str, graph: Graph) -> list[str]:
    """The runnable norms of (host, graph) with more than one knob combination."""
    norms, _ = runnable_norms(setting_config(part, host, graph), protocol.norms)
    return [norm for norm in norms if len(knob_choices(protocol, norm)) > 1]


def tune(protocol: Protocol, root: Path, execution: Execution, recorded: pd.DataFrame) -> pd.DataFrame:
    """Run every tuning sweep of the tier that neither its folder nor the committed knob table ``recorded`` holds
    whole (resuming), then the knob table of every setting: from the folder, or the committed rows where they
    record more runs."""
    rows = []
    for part, host, graph in protocol.settings():
        for norm in tuned_norms(protocol, part, host, graph):
            out = root / "tune" / f"{setting_name(part, host, graph)}_{norm}"
            fresh = knob_rows(protocol, part, host, graph, norm, out)
            committed = recorded_knob_rows(recorded, fresh)
            planned = sum(len(row["run_ids"].split()) for row in fresh)
            if execution.selected(host, graph) and ended(fresh) < planned and ended(committed) < planned:
                execution.sweep(tuning_sweep(protocol, part, host, graph, norm), out)
                fresh = knob_rows(protocol, part, host, graph, norm, out)
            rows += fresh if ended(fresh) >= ended(committed) else committed
    return pd.DataFrame(rows, columns=KNOB_COLUMNS)


def ended(rows: list[dict[str, Any]]) -> int:
    """The tuning runs with a validation value that knob rows count."""
    return sum(int(row["runs"]) for row in rows)


def run_grid(protocol: Protocol, root: Path, knobs: pd.DataFrame, execution: Execution, recorded: pd.DataFrame) -> None:
    """Run every grid sweep of the tier (resuming) with the chosen knobs, but the runs the committed tidy table
    ``recorded`` has ended (failed ones too, unless retrying)."""
    from .tables import recorded_rows

    rows = recorded_rows(recorded)  # ended there: ok, or failed (run again only when retrying)
    done = {run_id for run_id, row in rows.items() if row["status"] == "ok" or not execution.retry_failed}
    for part, host, graph in protocol.settings():
        if not execution.selected(host, graph):
            continue
        kwargs = setting_kwargs(protocol, part, host, graph, knobs)
        sweep = grid_sweep(part, host, graph, list(kwargs), kwargs)
        out = root / "grid" / setting_name(part, host, graph)
        configs = expand_grid(sweep, log=None)
        local = load_results(out, [config_run_id(c) for c in configs]) if out.is_dir() else {}
        elsewhere = [c for c in configs if config_run_id(c) in done and config_run_id(c) not in local]
        if len(elsewhere) == len(configs):
            execution.log(f"grid {setting_name(part, host, graph)}: every run recorded in the committed table")
            continue
        sweep["exclude"] = sweep.get("exclude", []) + recorded_points(elsewhere, graph.replicate_key)
        execution.sweep(sweep, out)


def recorded_points(configs: list[Any], replicate_key: str) -> list[dict[str, list]]:
    """``exclude`` entries of a grid sweep (:mod:`graphnorm.sweep.grid`) leaving out exactly ``configs``, one per
    (norm, depth) with its replicates."""
    points: dict[tuple[str, int], list] = {}
    for config in configs:
        points.setdefault((config.norm, config.num_layers), []).append(getattr(config, replicate_key))
    return [{"norm": [norm], "num_layers": [depth], replicate_key: replicates}
            for (norm, depth), replicates in points.items()]  # fmt: skip


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` as CSV, text cells safe for spreadsheets, atomically, into a folder checked first."""
    check_output_dir(path.parent, "the leaderboard's results folder")
    atomic_write_csv(path, frame)


def write_budget(protocol: Protocol, knobs: pd.DataFrame, table: pd.DataFrame, results: Path) -> None:
    """``<tier>_budget.csv``: CPU-hours estimated (from ``<tier>_timings.csv`` where it exists) and spent."""
    from .budget import budget_table, read_budget

    timings_path = results / f"{protocol.tier}_timings.csv"
    timings = pd.read_csv(timings_path) if timings_path.exists() else None
    path = results / f"{protocol.tier}_budget.csv"
    write_csv(budget_table(protocol, table, knobs, timings, read_budget(path)), path)


def check_selection(protocol: Protocol, execution: Execution) -> None:
    """``ValueError`` naming a selected host or graph the tier does not have (a typo would run nothing)."""
    for what, chosen, valid in (
        ("host", execution.only_hosts, {host for _, host, _ in protocol.settings()}),
        ("graph", execution.only_graphs, {graph.name for _, _, graph in protocol.settings()}),
    ):
        unknown = sorted(set(chosen) - valid)
        if unknown:
            raise ValueError(
                f"tier {protocol.tier} has no {what} {', '.join(unknown)}; valid: {', '.join(sorted(valid))}"
            )


def run_tier(
    tier: str = "full",
    execution: Execution | None = None,
    runs: Path = RUNS,
    results: Path = RESULTS,
    protocol_path: Path = PROTOCOL,
) -> Path:
    """Tune, run the grid and write the tidy table of ``tier``; returns the table's folder."""
    from .tables import read_runs, tidy_runs, write_runs

    execution = execution or Execution()
    protocol = load_protocol(tier, protocol_path)
    check_selection(protocol, execution)
    root = Path(runs) / tier
    table_path, knobs_path = results_paths(tier, Path(results))
    start = time.perf_counter()
    recorded = read_runs(table_path)  # the committed tables: what a fresh clone resumes from
    knobs = tune(protocol, root, execution, read_knobs(knobs_path))
    write_csv(knobs, knobs_path)
    execution.log(f"knobs chosen on validation -> {knobs_path}")
    run_grid(protocol, root, knobs, execution, recorded)
    table = tidy_runs(protocol, root, knobs, recorded)
    write_runs(table, table_path)
    write_budget(protocol, knobs, table, Path(results))
    counts = table["status"].value_counts().to_dict()
    execution.log(
        f"leaderboard {tier}: {len(table)} rows {counts} -> {table_path} ({time.perf_counter() - start:.0f} s)"
    )
    return table_path
