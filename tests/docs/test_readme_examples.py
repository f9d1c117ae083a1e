"""The README's Python examples run as written, one after the other (the PyG block uses the first block's ``task``),
in a fresh interpreter with the suite's data root, from an empty working folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)


def test_readme_has_the_ten_line_example_and_the_pyg_example() -> None:
    blocks = readme_python_blocks()
    assert len(blocks) == 2, "the README's examples: the ten lines and your own PyG model"
    assert len(blocks[0].strip().splitlines()) <= 10 and "CollapseMonitor" in blocks[1]


@pytest.mark.slow
def test_readme_python_examples_run(tmp_path: Path, data_root: Path) -> None:
    checks = (
        "\nassert len(table[table.metric == 'effective_rank']) == 32  # 31 hidden layers' norms and the output\n"
        "rows = monitor.step(0)\n"
        "assert rows is not None and (rows['metric'] == 'effective_rank').any()\n"
        "assert (Path('runs/my_gcn') / 'collapse_steps.csv').is_file()\n"
    )
    code = "from pathlib import Path\nimport torch\ntorch.set_num_threads(1)\n" + "\n".join(readme_python_blocks())
    env = {**os.environ, "GRAPHNORM_DATA": str(data_root)}
    result = subprocess.run(
        [sys.executable, "-c", code + checks], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
