"""The README's Python examples: the ten lines and the PyG model. Each runs alone (``test_snippets.py`` runs every
snippet and compares its printed output); here each also runs with checks of what it leaves behind, in a fresh
interpreter with the suite's data root, from an empty working folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKS = [
    "\nassert len(rank) == 32 and rank[32] <= 7  # 31 hidden layers and the 7-class output\n",
    "\nassert (rows['metric'] == 'effective_rank').sum() == 7  # one per hidden layer's norm\n"
    "assert (Path('runs/my_gcn') / 'collapse_steps.csv').is_file()\n",
]


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)


def test_readme_has_the_ten_line_example_and_the_pyg_example() -> None:
    blocks = readme_python_blocks()
    assert len(blocks) == 2, "the README's examples: the ten lines and your own PyG model"
    assert len(blocks[0].strip().splitlines()) <= 10 and "CollapseMonitor" in blocks[1]


@pytest.mark.slow
@pytest.mark.parametrize("number", range(len(CHECKS)))
def test_readme_python_example_runs_alone(number: int, tmp_path: Path, data_root: Path) -> None:
    code = "from pathlib import Path\n" + readme_python_blocks()[number] + CHECKS[number]
    env = {**os.environ, "GRAPHNORM_DATA": str(data_root)}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
