"""The docs' "Your own model and dataset" example (``docs/how-to/own-model-and-dataset.md``) runs as written: a
GraphSAGE stack and a tiny PyG dataset registered from user code, trained by graphnorm's trainer and a sweep, probed
layer by layer.

The code is the first ```python block after the page's heading :data:`HEADING` when the page has it (so the page
stays executed), else ``tests/examples/byo_model.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from graphnorm.data.registry import _DATASETS
from graphnorm.models.registry import _MODELS

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "how-to" / "own-model-and-dataset.md"
HEADING = "# Your own model and dataset"
EXAMPLE = REPO / "tests" / "examples" / "byo_model.py"

pytestmark = pytest.mark.usefixtures("one_thread")


def example_code() -> tuple[str, str]:
    """(code, where it comes from)."""
    page = PAGE.read_text() if PAGE.exists() else ""
    if HEADING in page:
        section = page.split(HEADING, 1)[1]
        match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
        assert match, f"{PAGE.name}: no ```python block after {HEADING!r}"
        return match.group(1), str(PAGE.relative_to(REPO))
    return EXAMPLE.read_text(), str(EXAMPLE)


def test_docs_code_is_the_example_file_when_present() -> None:
    code, where = example_code()
    if where != str(EXAMPLE):
        assert code.strip() == EXAMPLE.read_text().strip(), f"{where} example and tests/examples/byo_model.py differ"


def test_bring_your_own_model_and_dataset(tmp_path: Path) -> None:
    code, where = example_code()
    namespace: dict = {"__name__": "byo_example"}
    try:
        exec(compile(code, where, "exec"), namespace)
        assert "sage" in _MODELS and "two_blocks" in _DATASETS
        record, layers, runs = namespace["main"](data_root=str(tmp_path / "data"), out_dir=str(tmp_path / "sweep"))
    finally:
        _MODELS.pop("sage", None)
        _DATASETS.pop("two_blocks", None)
    assert record["metric"] == "acc" and record["test_acc"] >= 0.8  # two communities: easy once trained
    assert record["history"][-1]["epoch"] == 19 and record["majority_acc"] <= 0.6
    # The probe found the model's three norms (one per hidden layer of the 4-layer stack) without any extra method.
    cones = layers[layers.metric == "cone_angle"]
    assert list(cones.layer) == [1, 2, 3] and list(cones.layer_name) == ["norms.0", "norms.1", "norms.2"]
    assert cones.value.notna().all() and set(layers.rows) == {"node"} and set(layers.stat) == {"value"}
    assert len(runs) == 4 and set(runs.status) == {"ok"} and set(runs.num_layers) == {2, 4}
    # The sweep's own probe (graphnorm.train.run) measured every run the same way: num_layers - 1 norms each.
    swept = pd.read_csv(tmp_path / "sweep" / "layers.csv")
    depth = (
        swept.merge(runs[["run_id", "num_layers"]], on="run_id")
        .groupby("run_id")
        .agg(layers=("layer", "max"), num_layers=("num_layers", "first"))
    )
    assert len(depth) == 4 and (depth.layers == depth.num_layers - 1).all()


def test_sweep_run_fn_module_registers_its_model_before_the_grid_is_checked(
    tmp_path: Path, monkeypatch, data_root: Path
) -> None:
    """A sweep's ``run_fn`` module is imported before its grid is validated, so a model it registers can be named in
    the grid (what ``graphnorm sweep`` with ``run_fn: my_models:run`` relies on)."""
    from graphnorm.sweep import run_sweep

    (tmp_path / "my_models.py").write_text(
        "from torch import nn\n"
        "from graphnorm.models import register_model\n"
        "from graphnorm.train import run as graphnorm_run\n\n"
        "@register_model('tiny_mlp', levels=('node',))\n"
        "class TinyMLP(nn.Module):\n"
        "    def __init__(self, in_channels, out_channels, hidden_channels=8):\n"
        "        super().__init__()\n"
        "        self.net = nn.Sequential(nn.Linear(in_channels, hidden_channels), nn.ReLU(),\n"
        "                                 nn.Linear(hidden_channels, out_channels))\n\n"
        "    def forward(self, x, edge_index, batch=None):\n"
        "        return self.net(x.to_dense() if x.is_sparse else x)\n\n"
        "def run(config):\n"
        "    return graphnorm_run(config)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sweep = {
        "name": "mlp",
        "run_fn": "my_models:run",
        "base": {"model": "tiny_mlp", "epochs": 2, "probe": False, "data_root": str(data_root)},
        "grid": {"seed": [0]},
    }
    try:
        runs = run_sweep(sweep, tmp_path / "out", executor="serial", make_plots=False)
        assert list(runs.status) == ["ok"] and list(runs.model) == ["tiny_mlp"] and 0.0 < runs.test_acc[0] <= 1.0
    finally:
        _MODELS.pop("tiny_mlp", None)
