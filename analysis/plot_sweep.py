"""Figures and a markdown summary for a finished sweep.

Usage: python analysis/plot_sweep.py RUN_DIR [--out DIR]

RUN_DIR is a sweep output directory (runs.csv, optionally layers.csv). Writes metric-vs-layer, task-metric-vs-depth
and singular-value-spectrum figures (PNG and PDF) into DIR (default RUN_DIR/report) and adds them to the sweep's
summary.md (RUN_DIR's own; with --out, one in DIR).
"""

from __future__ import annotations

import argparse
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display needed

from graphnorm.sweep.report import make_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="sweep output directory containing runs.csv (and layers.csv)")
    parser.add_argument("--out", default=None, help="output directory (default: RUN_DIR/report)")
    args = parser.parse_args(argv)
    try:
        paths = make_report(args.run_dir, args.out)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
