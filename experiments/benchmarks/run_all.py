"""Run every benchmark and write ONE markdown report (tables, targets met or not, plots) to ``--out``.

    python -m experiments.benchmarks.run_all [--quick] [--out DIR] [--only NAME ...] [--threads T]

:data:`BENCHMARKS` names them in run order; each module's docstring says what it compares, and the protocols are on
the benchmarks page (``docs/results/benchmarks.md``). Every benchmark compares against a baseline run in the same
process (interleaved rounds, median) and notes the machine load (``os.getloadavg()``) before and after it: on a
shared machine the ratios are what carries over, absolute times do not. ``--quick`` runs tiny sizes (the smoke test
in ``tests/experiments/test_benchmarks_suite.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from graphnorm.sweep.tables import format_number, markdown_table

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "runs" / "benchmarks"
REPORT_NAME = "report.md"
TARGET_COLUMNS = ["target", "required", "measured", "met"]  # a targets table's; "met" may be the bold **NO**

# name -> module under experiments.benchmarks, in run order
BENCHMARKS: dict[str, str] = {
    "contranorm": "bench_contranorm",
    "norms": "bench_norms",
    "gcn": "bench_gcn",
    "probe": "bench_probe",
    "contranorm_model": "bench_contranorm_model",
    "contranorm_linear": "bench_contranorm_linear",
    "gcnii": "bench_gcnii",
    "gat": "bench_gat",
    "gin": "bench_gin",
    "threads": "bench_threads",
    "sweep_overhead": "bench_sweep_overhead",
    "scale": "bench_scale",
}


@dataclass
class Target:
    """One performance target: what is required, the measured value, and whether it was met (None: no target)."""

    what: str
    required: str
    measured: float | None
    met: bool | None


@dataclass
class BenchReport:
    """One benchmark's section of the report."""

    name: str
    title: str
    setup: str
    tables: list[str] = field(default_factory=list)  # markdown tables
    targets: list[Target] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    load_before: tuple[float, float, float] | None = None
    load_after: tuple[float, float, float] | None = None
    seconds: float | None = None
    error: str | None = None

    def to_markdown(self, relative_to: Path | None = None) -> str:
        lines = [f"## {self.title}", "", self.setup, ""]
        if self.load_before is not None and self.load_after is not None:
            lines += [
                f"Load average (1/5/15 min): before {_fmt_load(self.load_before)}, after {_fmt_load(self.load_after)}."
            ]
        if self.seconds is not None:
            lines += [f"Wall time of this benchmark: {self.seconds:.1f} s.", ""]
        if self.error:
            lines += ["**Failed:**", "", "```", self.error.rstrip(), "```", ""]
        for table in self.tables:
            lines += [table.rstrip("\n"), ""]
        if self.targets:
            rows = [[t.what, t.required, t.measured, _fmt_met(t.met)] for t in self.targets]
            lines += [markdown_table(pd.DataFrame(rows, columns=TARGET_COLUMNS), prose=True, index=False)]
        for plot in self.plots:
            shown = Path(plot)
            if relative_to is not None:
                with contextlib.suppress(ValueError):  # plots outside the report folder keep their full path
                    shown = shown.relative_to(relative_to)
            lines += [f"![{shown.stem}]({shown.as_posix()})", ""]
        return "\n".join(lines)


def _fmt_load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{value:.2f}" for value in load)


def _fmt_met(met: bool | None) -> str:
    return "n/a" if met is None else ("yes" if met else "**NO**")


def format_row(row: dict) -> str:
    """One result row as ``key=value`` pairs for the console."""
    return "  ".join(f"{key}={format_number(value)}" for key, value in row.items())


def table_report(
    name: str, title: str, setup: str, rows: list[dict], targets: list[Target], plots: Sequence[Path] = ()
) -> BenchReport:
    """A benchmark's section whose results are one table, of ``rows``."""
    tables = [markdown_table(rows)]
    return BenchReport(name=name, title=title, setup=setup, tables=tables, targets=targets, plots=list(plots))


def bench_main(
    run: Callable[..., BenchReport], description: str | None, argv: list[str] | None = None, out_help: str | None = None
) -> None:
    """One benchmark's command line (``[--quick] [--out DIR]``): prints the section ``run(quick, out_dir)`` returns."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", type=Path, default=None, help=out_help)
    args = parser.parse_args(argv)
    print(run(quick=args.quick, out_dir=args.out).to_markdown())


def machine_summary() -> str:
    load = os.getloadavg()
    return (
        f"{platform.platform()}, Python {platform.python_version()}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, load average {_fmt_load(load)} at start"
    )


def run_benchmark(name: str, quick: bool, out_dir: Path) -> BenchReport:
    """Run one benchmark, never raising: a failure becomes the section's error text."""
    module_name = f"experiments.benchmarks.{BENCHMARKS[name]}"
    load_before = os.getloadavg()
    start = time.perf_counter()
    try:
        module = importlib.import_module(module_name)
        if name == "contranorm":
            report = _run_helper_contranorm(module, quick, out_dir)
        else:
            report = module.run(quick=quick, out_dir=out_dir)
    except Exception:  # the report says what failed; the other benchmarks still run
        report = BenchReport(name=name, title=name, setup=f"`{module_name}`", error=traceback.format_exc())
    report.seconds = time.perf_counter() - start
    report.load_before, report.load_after = load_before, os.getloadavg()
    return report


def _run_helper_contranorm(module: object, quick: bool, out_dir: Path) -> BenchReport:
    """``bench_contranorm`` (another module): ``run_with_targets(quick, out_dir) -> (markdown, targets)``, the
    markdown embedded with its headings demoted one level. Quick mode measures none of the target sizes."""
    markdown, targets = module.run_with_targets(quick=quick, out_dir=out_dir)
    body = "\n".join("#" + line if line.startswith("#") else line for line in markdown.strip().splitlines())
    return BenchReport(
        name="contranorm",
        title="1-2. ContraNorm kernel vs dense reference, and its scaling (bench_contranorm)",
        setup="From `experiments.benchmarks.bench_contranorm.run_with_targets`.",
        tables=[body],
        targets=[Target(*target) for target in targets]
        or [Target("none at --quick sizes (n = 2708 and 20,000 are the target sizes)", "-", None, None)],
    )


def write_report(reports: list[BenchReport], out_dir: Path, quick: bool, header: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now().isoformat(timespec="seconds")
    lines = [
        "# graphnorm benchmark report" + (" (--quick: tiny sizes, smoke test only)" if quick else ""),
        "",
        f"Generated {now} by `python -m experiments.benchmarks.run_all{' --quick' if quick else ''}`.",
        "",
        f"Machine: {header}.",
        "",
        "Ratios compare against a baseline timed in the same process (interleaved rounds, median). The machine may "
        "be shared: read the load average of each section; absolute times are not comparable across runs.",
        "",
        "## Summary",
        "",
    ]
    rows = []
    for report in reports:
        if report.error:
            rows.append([report.name, "(failed, see below)", "-", None, "**NO**"])
        rows += [[report.name, t.what, t.required, t.measured, _fmt_met(t.met)] for t in report.targets]
    summary = pd.DataFrame(rows, columns=["benchmark", *TARGET_COLUMNS])
    lines.append(markdown_table(summary, prose=True, index=False))  # prose: the bold **NO**
    for report in reports:
        lines += [report.to_markdown(relative_to=out_dir), ""]
    path = out_dir / REPORT_NAME
    path.write_text("\n".join(lines))
    return path


def run_all(
    quick: bool = False, out_dir: Path = DEFAULT_OUT, only: list[str] | None = None, threads: int | None = None
) -> Path:
    """Run the benchmarks ``only`` (default all) and write the report; returns its path.

    ``threads``: torch intra-op threads for every benchmark (default: 1 with ``quick``, where tensors are tiny and
    threads only add start-up and spinning, else torch's default, i.e. all cores). Restored afterwards.
    """
    names = only or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; valid: {', '.join(BENCHMARKS)}")
    previous_threads = torch.get_num_threads()
    if threads is None and quick:
        threads = 1
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        header = machine_summary()
        print(f"# {header}", flush=True)
        reports = []
        for name in names:
            print(f"## {name}", flush=True)
            report = run_benchmark(name, quick, out_dir)
            if report.error:
                print(report.error, file=sys.stderr, flush=True)
            reports.append(report)
    finally:
        torch.set_num_threads(previous_threads)
    path = write_report(reports, out_dir, quick, header)
    print(f"report: {path}", flush=True)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test, seconds)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"report folder (default {DEFAULT_OUT})")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=None, help="run only these")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: 1 with --quick, else torch's default)"
    )
    args = parser.parse_args(argv)
    run_all(quick=args.quick, out_dir=args.out, only=args.only, threads=args.threads)


if __name__ == "__main__":
    # Run through the importable module so the report types are the ones the benchmarks import.
    from experiments.benchmarks.run_all import main as _main

    _main()
