# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Training deep GCNs on Cora and watching them collapse
#
# Trains DeepGCNs on Cora, plain and with ContraNorm, at several depths, in the README main job's setting (hidden
# 32, row-normalized adjacency and features, Kipf initialization, dropout 0.2 before each convolution, 40 epochs of
# Adam at lr 0.02), and after each model probes every layer with `CollapseProbe`, redrawing the effective rank and
# the robust cone angle (the smallest cone around 90 % of the node rows) against layer. The accuracy is the last
# epoch's, on the standard 1000 test nodes.
#
# **Runtime at the defaults** (depths 4 and 16, no norm and ContraNorm, 40 epochs each, one torch thread): about
# two minutes, nearly all of it the 16-layer ContraNorm model (measured: see `notebooks/README.md`).
#
# Smaller or larger settings through environment variables, set before starting Jupyter: `GRAPHNORM_NB_EPOCHS`,
# `GRAPHNORM_NB_DEPTHS` (e.g. `2,8,16`), `GRAPHNORM_NB_NORMS` (e.g. `none,pairnorm,contranorm`; ContraNorm costs
# several times more per layer), `GRAPHNORM_NB_THREADS` (torch threads, default 1). The test suite runs it with 2
# epochs. Datasets come from the data root (`GRAPHNORM_DATA`, `GRAPHNORM_DATA_MIRROR`; relative paths are taken
# from the folder where Jupyter was started).

# %%
import os
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import clear_output, display

# tqdm.auto warns that ipywidgets is missing (harmless: progress comes as text lines); before graphnorm imports it
warnings.filterwarnings("ignore", message="IProgress not found")

from graphnorm.analysis import CollapseProbe  # noqa: E402
from graphnorm.config import RunConfig  # noqa: E402
from graphnorm.train import train  # noqa: E402

# One thread: these models are small, and a second thread slows them down on a busy machine.
torch.set_num_threads(int(os.environ.get("GRAPHNORM_NB_THREADS", "1")))
EPOCHS = int(os.environ.get("GRAPHNORM_NB_EPOCHS", "40"))
DEPTHS = [int(depth) for depth in os.environ.get("GRAPHNORM_NB_DEPTHS", "4,16").split(",")]
NORMS = os.environ.get("GRAPHNORM_NB_NORMS", "none,contranorm").split(",")
METRICS = {"effective_rank": "effective rank", "cone_angle_q90": "robust cone angle (deg, 90 % of rows)"}

# The main job's setting (experiments/sweeps/cora_depth_quick.yaml); each norm with the options of its paper.
BASE = dict(
    dataset="cora",
    hidden_channels=32,
    dropout=0.2,
    lr=0.02,
    weight_decay=5e-4,
    adjacency="row",
    feature_norm="row_l1",
    layer_order="dropout-conv-norm-act",
    model_kwargs={"init": "kipf"},
    seed=0,
)
NORM_SETTINGS = {
    "pairnorm": {"norm_kwargs": {"mode": "PN", "scale": 1.0}},
    "contranorm": {"norm_kwargs": {"scale": 1.0, "layer_norm": False}, "shared_layernorm": True},
}

# Data folders given as relative paths are taken from where Jupyter was started, not from notebooks/.
for variable in ("GRAPHNORM_DATA", "GRAPHNORM_DATA_MIRROR"):
    value = os.environ.get(variable)
    if value and not Path(value).expanduser().is_absolute():
        os.environ[variable] = str((Path(os.environ.get("PWD", Path.cwd())) / value).resolve())


# %%
def draw(tables: list[pd.DataFrame]) -> None:
    """Effective rank and robust cone angle against layer, one line per (norm, depth)."""
    everything = pd.concat(tables)
    figure, axes = plt.subplots(1, len(METRICS), figsize=(11, 3.8))
    for axis, (metric, label) in zip(axes, METRICS.items()):
        for (norm, depth), group in everything[everything.metric == metric].groupby(["norm", "depth"]):
            style = "-" if norm == "none" else "--"
            axis.plot(group.layer, group.value, style, marker=".", label=f"{norm}, {depth} layers")
        axis.set_xlabel("layer (the last one is the classifier output)")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[-1].legend(fontsize=8)
    figure.tight_layout()
    plt.show()


tables, results = [], []
for depth in DEPTHS:
    for norm in NORMS:
        config = RunConfig(**{**BASE, **NORM_SETTINGS.get(norm, {})}, norm=norm, num_layers=depth, epochs=EPOCHS)
        model, task, record = train(config)
        table = CollapseProbe(model, num_singular_values=0).probe(task.data)
        table = table[table.stat.isin(["value", "mean"])].assign(norm=norm, depth=depth)
        tables.append(table)
        last = table[table.layer == table.layer.max()].set_index("metric").value
        results.append(
            {
                "norm": norm,
                "depth": depth,
                "test_acc_last": round(record["test_acc_last"], 3),
                "majority_acc": round(record["majority_acc"], 3),
                "effective_rank (output)": round(last["effective_rank"], 2),
                "train_s": round(record["wall_time_s"], 1),
            }
        )
        clear_output(wait=True)  # redraw after every model: the picture fills in while training goes on
        draw(tables)
        display(pd.DataFrame(results))

# %% [markdown]
# How to read the figure: a model whose lines reach effective rank 1 and a cone angle near 0 has collapsed, every
# node's representation points the same way, and its classifier can only tell the nodes apart by length.
#
# Accuracy (last epoch) against the majority-class level (always predicting the most frequent training class),
# the effective rank at the output layer, and each model's training time:

# %%
summary = pd.DataFrame(results)
summary["above_majority"] = (summary.test_acc_last - summary.majority_acc).round(3)
display(summary)
