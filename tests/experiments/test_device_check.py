"""The device check (experiments/benchmarks/device_check.py) in its CPU quick mode: every part runs and passes its
checks, and the table lists them; the GPU run itself needs a GPU machine. Timings are not asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # experiments/ is not an installed package
    sys.path.insert(0, str(REPO))

from experiments.benchmarks import device_check  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_quick_cpu_mode_runs_every_part_and_passes(data_root, tmp_path: Path) -> None:
    table = device_check.run("cpu", quick=True, out=tmp_path)
    assert not table["check"].astype(str).str.contains("FAIL").any(), table.to_string()
    assert set(table["part"]) == {"setup", "main job", "contranorm", "epoch"}
    items = " ".join(table["item"])
    for kernel in ("dense", "tiled", "streaming"):
        assert f"n=300 {kernel} fwd+bwd (s)" in items
    assert table["check"].str.contains("the rule's pick").sum() == 1  # the rule names one of the three kernels
    main_job = table.set_index("item")["value"]
    assert main_job["largest |cpu - cpu| test accuracy"] == 0.0  # the same calls on the same CPU: the same table
    written = (tmp_path / "device_check.md").read_text()
    assert written.startswith("| part | item | value | check |") and "| main job |" in written


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA runs the check itself")
def test_cuda_without_cuda_is_a_one_line_refusal() -> None:
    with pytest.raises(SystemExit, match="CUDA is not available"):
        device_check.run("cuda", quick=True)
