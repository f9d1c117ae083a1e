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
# # Molecules: the Graphormer graph token across layers, SepNorm against ShareNorm
#
# Graphormer reads a molecule's prediction from a virtual *graph token* attached to every atom. With one LayerNorm
# shared by token and atom rows ("ShareNorm", the original Graphormer) the token rows are normalized like atoms;
# SepNorm (Chen et al., NeurIPS 2023) normalizes them apart: BatchNorm across the batch's graph tokens, LayerNorm
# for the atoms. Collapse of the token rows means that different molecules get similar graph tokens, so similar
# predictions.
#
# This notebook trains Graphormer-slim (12 layers, hidden 80, 8 heads, pre-LN; the recipe of
# `experiments/runs/zinc_graphormer.yaml`) on a small fixed subset of ZINC, once with `sepnorm` and once with
# `layernorm` (ShareNorm), and probes every layer of each final model on 64 validation molecules: the atom rows
# (metrics per molecule, averaged over molecules) and the graph-token rows (one row per molecule, measured across
# molecules).
#
# **Runtime at the defaults** (500 graphs per split, 6 epochs, two runs, one torch thread): about 2.5 minutes,
# 152-202 s measured (kernel in notebooks/ or in the repository root) on a 2-core machine shared with other jobs,
# so a quiet machine is faster; the first run on a machine adds the preprocessing of the subset (shortest paths,
# cached afterwards).
#
# It is a short run, far from the full recipe: read it as a demonstration of the probe, not as the result. The
# measured full-data comparison (12 epochs on all of ZINC, 3 seeds) is on the results page, `analysis/README.md`.
# Settings through environment variables, set before starting Jupyter: `GRAPHNORM_NB_GRAPHS` (graphs per split),
# `GRAPHNORM_NB_EPOCHS`, `GRAPHNORM_NB_LAYERS`, `GRAPHNORM_NB_THREADS` (torch threads, default 1). The first run
# preprocesses the subset (shortest paths), cached in the data root (`GRAPHNORM_DATA`, `GRAPHNORM_DATA_MIRROR`;
# relative paths are taken from where Jupyter was started).

# %%
import math
import os
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import Markdown, display

# tqdm.auto warns that ipywidgets is missing (harmless: progress comes as text lines); before graphnorm imports it
warnings.filterwarnings("ignore", message="IProgress not found")

from graphnorm.config import RunConfig  # noqa: E402
from graphnorm.train import run  # noqa: E402

# One thread: these models are small, and a second thread slows them down on a busy machine.
torch.set_num_threads(int(os.environ.get("GRAPHNORM_NB_THREADS", "1")))
GRAPHS = int(os.environ.get("GRAPHNORM_NB_GRAPHS", "500"))
EPOCHS = int(os.environ.get("GRAPHNORM_NB_EPOCHS", "6"))
LAYERS = int(os.environ.get("GRAPHNORM_NB_LAYERS", "12"))
BATCH = 32
NORMS = {"sepnorm": "SepNorm", "layernorm": "ShareNorm (one LayerNorm)"}
METRICS = {
    "effective_rank": "effective rank",
    "mean_cosine": "mean cosine",
    "cone_angle_q90": "robust cone angle (deg)",
}
STEPS = EPOCHS * math.ceil(GRAPHS / BATCH)

# Graphormer-slim (experiments/runs/zinc_graphormer.yaml) with a short schedule: warmup over the first 10 % of the
# steps, then linear decay; no weight averaging (too few steps for it).
BASE = dict(
    dataset="zinc",
    model="graphormer",
    num_layers=LAYERS,
    hidden_channels=80,
    num_heads=8,
    model_kwargs={"ffn_channels": 80, "max_degree": 64, "max_distance": 40, "multi_hop_max_dist": 5, "pre_ln": True},
    dropout=0.1,
    max_nodes=64,
    optimizer="adamw",
    scheduler="polynomial",
    lr=1e-3,
    attention_bias_lr_scale=10.0,
    weight_decay=0.01,
    warmup_steps=max(1, STEPS // 10),
    grad_clip=5.0,
    batch_size=BATCH,
    epochs=EPOCHS,
    limit_graphs=GRAPHS,
    probe=True,
    probe_graphs=64,
    seed=0,
)

# Data folders given as relative paths are taken from where Jupyter was started, not from notebooks/.
for variable in ("GRAPHNORM_DATA", "GRAPHNORM_DATA_MIRROR"):
    value = os.environ.get(variable)
    if value and not Path(value).expanduser().is_absolute():
        os.environ[variable] = str((Path(os.environ.get("PWD", Path.cwd())) / value).resolve())

# %% [markdown]
# ## Train and probe both models
# Progress lines (one every 10 s at most) show the epochs as they run.

# %%
records, tables = [], []
for norm in NORMS:
    record = run(RunConfig(**BASE, norm=norm))
    layers = pd.DataFrame(record["layers"])
    # Atom rows: metrics per molecule, averaged over molecules ("mean"); token rows: one set across molecules.
    layers = layers[((layers.rows == "node") & (layers.stat == "mean")) | (layers.rows == "token")]
    tables.append(layers.assign(norm=norm))
    records.append(
        {
            "norm": norm,
            "test_mae": round(record["test_mae"], 3),
            "val_mae": round(record["val_mae"], 3),
            "best_epoch": record["best_epoch"],
            "steps": record["steps"],
            "run_s": round(record["wall_time_s"] + record["probe_time_s"], 1),
        }
    )
layers = pd.concat(tables)
display(pd.DataFrame(records))

# %% [markdown]
# ## Collapse metrics per layer: atom rows and graph-token rows, both norms
# Layer 1 is the input embedding (every graph token starts from the same learned vector, so the token rows there
# are one point: effective rank 1, mean cosine 1); layers 2 and up are the transformer layers' outputs.
# Collapse shows as a low effective rank, a mean cosine near 1 and a small cone.

# %%
figure, axes = plt.subplots(len(METRICS), 2, figsize=(10, 2.6 * len(METRICS)), sharex=True, squeeze=False)
for column, (rows, title) in enumerate([("node", "atom rows (per molecule)"), ("token", "graph-token rows")]):
    for row, (metric, label) in enumerate(METRICS.items()):
        axis = axes[row][column]
        for norm, norm_label in NORMS.items():
            curve = layers[(layers.rows == rows) & (layers.metric == metric) & (layers.norm == norm)]
            axis.plot(curve.layer, curve.value, marker=".", label=norm_label)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axes[0][column].set_title(title)
        axes[-1][column].set_xlabel("layer (1: embedding)")
axes[0][0].legend(fontsize=8)
figure.tight_layout()
plt.show()

# %% [markdown]
# ## The last layer, side by side

# %%
last = layers[(layers.layer == layers.layer.max()) & layers.metric.isin(list(METRICS))]
table = last.pivot_table(index="norm", columns=["rows", "metric"], values="value").round(3)
display(table)
LESS_COLLAPSED = {"effective_rank": "higher", "mean_cosine": "lower", "cone_angle_q90": "larger"}
lines = [
    f"- {METRICS[metric]}: SepNorm {table.loc['sepnorm', ('token', metric)]:.3g}, ShareNorm "
    f"{table.loc['layernorm', ('token', metric)]:.3g} ({LESS_COLLAPSED[metric]} is less collapsed)"
    for metric in METRICS
]
display(
    Markdown(
        f"Graph-token rows at the last layer, after {STEPS} optimizer steps on {GRAPHS} training molecules "
        "(the metrics need not agree in a run this short):\n" + "\n".join(lines)
    )
)
