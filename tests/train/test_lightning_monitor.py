"""CollapseMonitorCallback in a real ``lightning.Trainer`` fit of a PyG GCN on Cora (the whole graph as one batch):
the per-layer metrics reach the trainer's CSVLogger at the probed steps and equal the callback's own rows; the fit
trains as without the callback; the optional dependency's error names the extra to install."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import lightning as L
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN

from graphnorm.analysis import CollapseProbe
from graphnorm.data import load_dataset
from graphnorm.train import CollapseMonitor, CollapseMonitorCallback

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # Lightning's advice for real workloads (dataloader workers, a logging interval longer than the epoch)
    pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
    # lightning against a newer torch: its pytree helper uses a deprecated torch class
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\).*:FutureWarning"),
]

EPOCHS = 7  # one optimizer step per epoch: steps 0..7


@pytest.fixture(scope="module")
def cora(data_root: Path) -> Data:
    return load_dataset("cora", root=data_root).data


class LitGCN(L.LightningModule):
    """A PyG GCN trained full-batch on the training nodes, dropout on."""

    def __init__(self, data: Data) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.gnn = GCN(data.num_features, 16, 3, out_channels=7, dropout=0.5)

    def forward(self, x, edge_index):
        return self.gnn(x, edge_index)

    def training_step(self, batch, batch_idx):
        out = self(batch.x, batch.edge_index)
        loss = F.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask])
        self.log("train_loss", loss, batch_size=1)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def fit(data: Data, folder: Path, callbacks: list) -> tuple[LitGCN, L.Trainer]:
    torch.manual_seed(1)
    module = LitGCN(data)
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=CSVLogger(folder),
        callbacks=callbacks,
        log_every_n_steps=50,  # longer than the fit: the callback's own logging must not depend on it
    )
    trainer.fit(module, DataLoader([data], batch_size=None))  # the whole graph as one batch
    return module, trainer


def test_logged_metrics_read_back_from_the_csv_logger(cora, tmp_path) -> None:
    callback = CollapseMonitorCallback(cora, every_n_steps=3, layers="gnn.convs", out_dir=tmp_path / "monitor")
    module, trainer = fit(cora, tmp_path / "logs", [callback])
    logged = pd.read_csv(Path(trainer.logger.log_dir) / "metrics.csv")
    keys = [key for key in logged.columns if key.startswith("collapse/")]
    assert {f"collapse/effective_rank/layer_{k}" for k in (1, 2, 3)} <= set(keys)
    probed = logged.dropna(subset=["collapse/effective_rank/layer_3"])
    assert probed.step.tolist() == [0, 3, 6]
    table = callback.table
    assert sorted(set(table.step)) == [0, 3, 6] and table.epoch.tolist()[0] == 0
    for step in (0, 3, 6):
        rows = table[(table.step == step) & (table.stat == "value")]
        for row in rows.itertuples():
            value = probed.loc[probed.step == step, f"collapse/{row.metric}/layer_{row.layer}"].item()
            assert value == pytest.approx(row.value, rel=1e-12, nan_ok=True)
    written = pd.read_csv(tmp_path / "monitor" / "collapse_steps.csv")
    pd.testing.assert_frame_equal(written, table.astype({"epoch": "int64"}), check_dtype=False)
    # the last probe equals a direct probe of the final weights (step 7 = after the last update; 6 is before it), by a
    # monitor on the same out_dir: the fit's monitor let it go when training ended
    direct = CollapseProbe(module.gnn, layers=module.gnn.convs, num_singular_values=0).probe(cora)
    with CollapseMonitor(module.gnn, cora, out_dir=tmp_path / "monitor", layers=module.gnn.convs) as final:
        assert final.probe_now(EPOCHS).value.tolist() == pytest.approx(direct.value.tolist(), nan_ok=True)
    assert sorted(set(pd.read_csv(tmp_path / "monitor" / "collapse_steps.csv").step)) == [0, 3, 6, EPOCHS]


def test_the_fit_trains_as_without_the_callback(cora, tmp_path) -> None:
    plain, _ = fit(cora, tmp_path / "plain", [])
    monitored, _ = fit(cora, tmp_path / "monitored", [CollapseMonitorCallback(cora, 1, model="gnn", layers="convs")])
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), monitored.state_dict().values()))


def test_bad_arguments_are_named(cora) -> None:
    for every in (0, -1, 2.5):
        with pytest.raises(ValueError, match="every_n_steps must be a positive integer"):
            CollapseMonitorCallback(cora, every_n_steps=every)
    with pytest.raises(ValueError, match="the sample has no nodes"):
        CollapseMonitorCallback(Data(x=torch.empty(0, 3), edge_index=torch.empty(2, 0, dtype=torch.long)))


def test_bad_submodule_path_is_named(cora, tmp_path) -> None:
    callback = CollapseMonitorCallback(cora, every_n_steps=1, model="gcn")
    with pytest.raises(ValueError, match="model='gcn' names no submodule of LitGCN"):
        fit(cora, tmp_path, [callback])


def test_missing_lightning_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)  # import lightning.pytorch now raises ImportError
    monkeypatch.delitem(sys.modules, "graphnorm.train.lightning_monitor")
    with pytest.raises(ImportError, match=r"pip install 'graphnorm\[lightning\]'"):
        importlib.import_module("graphnorm.train.lightning_monitor")
    monkeypatch.undo()
    assert importlib.import_module("graphnorm.train.lightning_monitor").CollapseMonitorCallback
