"""``python -m experiments.leaderboard run|estimate|cell|page``, from the repository root: run or resume a tier of
the leaderboard (``--tier quick`` checks the pipeline in minutes), print its CPU-hours per part before running it,
re-run one cell and compare it with the recorded values, or rebuild the page from the committed results."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from analysis.leaderboard import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.main())
