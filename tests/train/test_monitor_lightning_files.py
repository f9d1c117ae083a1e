"""CollapseMonitorCallback and an out_dir holding an earlier fit's CSV: a fresh fit refuses in one line and leaves the
rows as they were, unless ``overwrite=True``; a fit resumed from a checkpoint goes on from its step; the folder is
checked when the callback is built, and released when a fit ends or fails."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN

from graphnorm.train import CollapseMonitorCallback
from graphnorm.train.monitor import MONITOR_CSV, CollapseMonitor

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\).*:FutureWarning"),
]

NODES, FEATURES = 12, 4


def graph() -> Data:
    generator = torch.Generator().manual_seed(0)
    edges = torch.randint(0, NODES, (2, 30), generator=generator)
    return Data(x=torch.randn(NODES, FEATURES, generator=generator), edge_index=edges, y=torch.arange(NODES) % 3)


class LitGCN(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.gnn = GCN(FEATURES, 6, 2, out_channels=3)

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.gnn(batch.x, batch.edge_index), batch.y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(callback: CollapseMonitorCallback, folder: Path, epochs: int = 4, ckpt_path: str | None = None) -> L.Trainer:
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=folder,
        callbacks=[callback],
    )
    trainer.fit(LitGCN(), DataLoader([graph()], batch_size=None), ckpt_path=ckpt_path)
    return trainer


def test_a_fresh_fit_keeps_an_earlier_fits_rows_unless_told(tmp_path) -> None:
    out = tmp_path / "monitor"
    fit(CollapseMonitorCallback(graph(), every_n_steps=2, model="gnn", layers="convs", out_dir=out), tmp_path)
    earlier = (out / MONITOR_CSV).read_bytes()
    assert sorted(set(pd.read_csv(out / MONITOR_CSV).step)) == [0, 2, 4]
    with pytest.raises(RuntimeError) as caught:
        fit(CollapseMonitorCallback(graph(), every_n_steps=1, model="gnn", layers="convs", out_dir=out), tmp_path)
    message = str(caught.value)
    assert "\n" not in message and str(out / MONITOR_CSV) in message and "overwrite=True" in message
    assert (out / MONITOR_CSV).read_bytes() == earlier
    overwriting = CollapseMonitorCallback(
        graph(), every_n_steps=1, model="gnn", layers="convs", out_dir=out, overwrite=True
    )
    fit(overwriting, tmp_path, epochs=2)
    assert sorted(set(pd.read_csv(out / MONITOR_CSV).step)) == [0, 1, 2]


def test_a_resumed_fit_goes_on_from_its_step(tmp_path) -> None:
    out = tmp_path / "monitor"
    callback = CollapseMonitorCallback(graph(), every_n_steps=1, model="gnn", layers="convs", out_dir=out)
    trainer = fit(callback, tmp_path, epochs=2)
    trainer.save_checkpoint(tmp_path / "two.ckpt")
    callback.monitor.close()  # the fit has ended: nothing holds the folder
    fit(
        CollapseMonitorCallback(graph(), every_n_steps=1, model="gnn", layers="convs", out_dir=out),
        tmp_path,
        4,
        str(tmp_path / "two.ckpt"),
    )
    counts = pd.read_csv(out / MONITOR_CSV).groupby("step").size()
    assert counts.index.tolist() == [0, 1, 2, 3, 4] and counts.nunique() == 1  # step 2 written once


def test_the_folder_is_released_when_a_fit_fails(tmp_path) -> None:
    out = tmp_path / "monitor"

    def broken(model, sample):
        raise RuntimeError("the probe's forward failed")

    with pytest.raises(RuntimeError, match="forward failed"):
        fit(
            CollapseMonitorCallback(graph(), every_n_steps=1, model="gnn", layers="convs", forward=broken, out_dir=out),
            tmp_path,
        )
    model = GCN(FEATURES, 6, 2)
    CollapseMonitor(model, graph(), out_dir=out, layers=model.convs).close()  # not held by the failed fit


def test_the_out_dir_is_checked_when_the_callback_is_built(tmp_path) -> None:
    taken = tmp_path / "a file"
    taken.write_text("x\n")
    with pytest.raises(ValueError, match="a file"):
        CollapseMonitorCallback(graph(), out_dir=taken)
    with pytest.raises(TypeError, match="overwrite"):
        CollapseMonitorCallback(graph(), out_dir=tmp_path, overwrite="yes")


class ElsewhereGCN(LitGCN):
    """Says it is on the meta device: where a callback moving the sample to the module's device would send it."""

    @property
    def device(self) -> torch.device:
        return torch.device("meta")


def test_the_callers_sample_stays_where_it_was(tmp_path) -> None:
    data = graph()
    tensors = {key: (value, value.clone()) for key, value in data.items()}
    callback = CollapseMonitorCallback(data, every_n_steps=2, model="gnn", layers="convs")
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[callback],
    )
    trainer.fit(ElsewhereGCN(), DataLoader([graph()], batch_size=None))
    assert callback.sample is data
    for key, (tensor, values) in tensors.items():
        assert data[key] is tensor and tensor.device.type == "cpu" and torch.equal(tensor, values)
