"""CollapseMonitor in a plain training loop: a PyG GCN on Cora trains to bit-identical weights with and without it
(dropout on, and a probe whose forward draws random numbers); its CSV rows equal a direct CollapseProbe of the same
weights; a resumed monitor writes no step twice; its TensorBoard points read back; bad input gets a clear error."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from record_tolerance import assert_close_records
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch_geometric.data import Batch, Data
from torch_geometric.nn.models import GCN

from graphnorm.analysis import CollapseProbe
from graphnorm.data import load_dataset
from graphnorm.train import CollapseMonitor
from graphnorm.train.monitor import MONITOR_CSV, preserved_random_state, step_scalars
from graphnorm.train.record import STEP_COLUMNS

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS = 24


@pytest.fixture(scope="module")
def cora(data_root: Path) -> Data:
    return load_dataset("cora", root=data_root).data


def gcn(data: Data, num_layers: int = 4) -> GCN:
    torch.manual_seed(0)
    return GCN(data.num_features, 16, num_layers, out_channels=7, dropout=0.5)


def train(
    model: GCN, data: Data, monitor: CollapseMonitor | None = None, steps: int = STEPS, draw_at: int | None = None
) -> list[tuple[int, dict]]:
    """A plain full-batch loop (dropout on) calling the monitor before every update (``draw_at``: one extra torch
    draw before that step instead); the weights at each probed step."""
    torch.manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    probed = []
    for step in range(steps):
        if monitor is not None and monitor.step(step) is not None:
            probed.append((step, copy.deepcopy(model.state_dict())))
        if step == draw_at:
            torch.rand(3)
        model.train()
        optimizer.zero_grad()
        F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    return probed


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    first, second = a.state_dict(), b.state_dict()
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def drawing_forward(model, data):
    """A probe forward that draws from every global generator: the monitor must hide these draws from training."""
    torch.rand(3), random.random(), np.random.rand()
    return model(data.x, data.edge_index)


def test_training_is_bit_identical_with_and_without_the_monitor(cora, tmp_path) -> None:
    plain = gcn(cora)
    train(plain, cora)
    monitored = gcn(cora)
    probed = train(monitored, cora, CollapseMonitor(monitored, cora, every=5, out_dir=tmp_path, layers=monitored.convs))
    assert [step for step, _ in probed] == [0, 5, 10, 15, 20]
    assert same_weights(plain, monitored)
    drawing = gcn(cora)
    train(drawing, cora, CollapseMonitor(drawing, cora, every=3, layers=drawing.convs, forward=drawing_forward))
    assert same_weights(plain, drawing)
    # the comparison can fail: one draw the loop does not hide gives other dropout masks, other weights
    disturbed = gcn(cora)
    train(disturbed, cora, draw_at=0)
    assert not same_weights(plain, disturbed)


def test_preserved_random_state_restores_every_generator() -> None:
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    expected = (torch.rand(2), random.random(), np.random.rand())
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    with preserved_random_state():
        torch.rand(5), random.random(), np.random.rand(4)
    got = (torch.rand(2), random.random(), np.random.rand())
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


def test_csv_rows_equal_a_direct_probe_of_the_same_weights(cora, tmp_path) -> None:
    model = gcn(cora)
    monitor = CollapseMonitor(model, cora, every=8, out_dir=tmp_path, layers=model.convs)
    probed = train(model, cora, monitor)
    written = pd.read_csv(tmp_path / MONITOR_CSV)
    assert list(written.columns) == list(STEP_COLUMNS)
    assert sorted(set(written.step)) == [step for step, _ in probed] == [0, 8, 16]
    assert written.epoch.isna().all()  # the loop gave no epoch
    pd.testing.assert_frame_equal(written, monitor.table.astype({"epoch": "float64"}), check_dtype=False)
    for step, weights in probed:
        copied = gcn(cora)
        copied.load_state_dict(weights)
        direct = CollapseProbe(copied, layers=copied.convs, num_singular_values=0).probe(cora)
        rows = written[written.step == step].drop(columns=["step", "epoch"]).reset_index(drop=True)
        # The monitor's probe during training and a fresh probe of the same weights: round-off apart.
        assert list(rows.columns) == list(direct.columns)
        assert_close_records(rows.to_dict("records"), direct.to_dict("records"), step)
    assert len(set(written.layer)) == 4 and {"effective_rank", "mean_cosine"} <= set(written.metric)


def test_probe_in_eval_mode_without_gradients_and_mode_restored(cora) -> None:
    model = gcn(cora)
    monitor = CollapseMonitor(model, cora, every=1, layers=model.convs)
    model.train()
    first, second = monitor.probe_now(0), monitor.probe_now(1)  # dropout would make the two differ
    assert model.training and all(p.grad is None for p in model.parameters())
    pd.testing.assert_series_equal(first.value, second.value)
    model.eval()
    monitor.probe_now(2)
    assert not model.training


def test_resume_writes_no_step_twice(cora, tmp_path) -> None:
    model = gcn(cora, num_layers=2)
    first = CollapseMonitor(model, cora, every=2, out_dir=tmp_path, layers=model.convs)
    for step in range(5):
        first.step(step, epoch=step)
    rows_per_probe = len(first.table) // 3
    first.close()  # one monitor per out_dir at a time
    again = CollapseMonitor(model, cora, every=2, out_dir=tmp_path, layers=model.convs)  # keeps steps 0, 2, 4
    assert [again.step(step) for step in range(5)] == [None] * 5
    assert again.probe_now(4) is None  # written already: not probed, not written again
    assert again.step(6) is not None
    written = pd.read_csv(tmp_path / MONITOR_CSV)
    assert written.groupby("step").size().to_dict() == dict.fromkeys([0, 2, 4, 6], rows_per_probe)
    assert written.epoch.tolist()[: 3 * rows_per_probe] == [e for e in (0, 2, 4) for _ in range(rows_per_probe)]
    again.close()
    # a loop resumed from a checkpoint at step 3: the interrupted attempt's steps 4 and 6 go, and are probed again
    resumed = CollapseMonitor(model, cora, every=2, out_dir=tmp_path, layers=model.convs, start_step=3)
    assert sorted(set(pd.read_csv(tmp_path / MONITOR_CSV).step)) == [0, 2]
    assert resumed.step(3) is None and resumed.step(4) is not None
    assert sorted(set(resumed.table.step)) == [0, 2, 4]
    counts = pd.read_csv(tmp_path / MONITOR_CSV).groupby("step").size().to_dict()
    assert counts == dict.fromkeys([0, 2, 4], rows_per_probe)


def test_a_line_cut_short_by_a_crash_is_removed(cora, tmp_path) -> None:
    model = gcn(cora, num_layers=2)
    CollapseMonitor(model, cora, every=1, out_dir=tmp_path, layers=model.convs).step(0)
    path = tmp_path / MONITOR_CSV
    whole = path.read_text()
    path.write_text(whole + "1,,1,gcnconv1,node,effective_ra")  # a block cut inside its first line
    monitor = CollapseMonitor(model, cora, every=1, out_dir=tmp_path, layers=model.convs)
    assert path.read_text() == whole
    assert monitor.step(0) is None and monitor.step(1) is not None
    assert sorted(set(pd.read_csv(path).step)) == [0, 1]


def test_tensorboard_points_read_back(cora, tmp_path) -> None:
    model = gcn(cora, num_layers=3)
    with CollapseMonitor(model, cora, every=4, layers=model.convs, tensorboard=tmp_path / "tb") as monitor:
        train(model, cora, monitor, steps=9)
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {f"collapse/effective_rank/layer_{k}" for k in (1, 2, 3)} <= tags
    expected = step_scalars(monitor.table.to_dict("records"))  # the last probe's values by tag
    assert set(expected) == tags
    for tag in tags:
        points = events.Scalars(tag)
        assert [point.step for point in points] == [0, 4, 8]
        assert points[-1].value == pytest.approx(expected[tag], rel=1e-6, abs=1e-6)
    rank = monitor.table.query("metric == 'effective_rank' and layer == 2").value.tolist()
    assert [p.value for p in events.Scalars("collapse/effective_rank/layer_2")] == pytest.approx(rank, rel=1e-6)


def test_graph_level_sample_as_a_list_of_graphs() -> None:
    torch.manual_seed(0)
    ring = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    graphs = [Data(x=torch.randn(4, 3), edge_index=ring) for _ in range(3)]
    model = GCN(3, 8, 2)
    table = CollapseMonitor(model, graphs, every=1, layers=model.convs).step(0)
    direct = CollapseProbe(model, layers=model.convs, num_singular_values=0).probe(Batch.from_data_list(graphs))
    pd.testing.assert_frame_equal(table.drop(columns=["step", "epoch"]), direct, check_dtype=False)
    assert {"mean", "std", "pooled"} <= set(table.stat)  # per-graph statistics over the three graphs


@pytest.mark.parametrize("every", [0, -3, 1.5, True, "10"])
def test_every_must_be_a_positive_integer(cora, every) -> None:
    model = gcn(cora, num_layers=2)
    with pytest.raises(ValueError, match="every must be a positive integer"):
        CollapseMonitor(model, cora, every=every, layers=model.convs)


def test_bad_samples_and_steps_are_named(cora, tmp_path) -> None:
    model = gcn(cora, num_layers=2)
    empty = Data(x=torch.empty(0, cora.num_features), edge_index=torch.empty(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="the sample has no nodes"):
        CollapseMonitor(model, empty, layers=model.convs)
    broken = cora.clone()
    broken.x = broken.x.clone()
    broken.x[[3, 7], 0] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or infinite values \(2 of 2708 nodes\)"):
        CollapseMonitor(model, broken, layers=model.convs)
    with pytest.raises(TypeError, match="sample must be a PyG Data or Batch"):
        CollapseMonitor(model, cora.x, layers=model.convs)
    with pytest.raises(ValueError, match="empty list"):
        CollapseMonitor(model, [], layers=model.convs)
    with pytest.raises(TypeError, match="must hold PyG Data graphs, got Tensor"):
        CollapseMonitor(model, [cora.x], layers=model.convs)
    monitor = CollapseMonitor(model, cora, layers=model.convs)
    for step in (-1, 2.0, None):
        with pytest.raises(ValueError, match="step must be an integer >= 0"):
            monitor.step(step)
    with pytest.raises(TypeError, match="tensorboard must be a log folder or a SummaryWriter"):
        CollapseMonitor(model, cora, layers=model.convs, tensorboard=3)
    (tmp_path / MONITOR_CSV).write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not this monitor's table"):
        CollapseMonitor(model, cora, out_dir=tmp_path, layers=model.convs)
