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
# Trains a few DeepGCNs (plain and with PairNorm, at several depths) with small settings and, after each model,
# probes every layer with `CollapseProbe` and redraws effective rank and cone angle against layer.
# `GRAPHNORM_NB_EPOCHS` / `GRAPHNORM_NB_DEPTHS` shrink it further (the test suite runs it with 2 epochs).

# %%
import os
import time

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import clear_output, display

from graphnorm.analysis import CollapseProbe
from graphnorm.config import RunConfig
from graphnorm.train import train

EPOCHS = int(os.environ.get("GRAPHNORM_NB_EPOCHS", "100"))
DEPTHS = [int(d) for d in os.environ.get("GRAPHNORM_NB_DEPTHS", "2,8,16").split(",")]
NORMS = ["none", "pairnorm"]

# %%
tables = []
results = []
for depth in DEPTHS:
    for norm in NORMS:
        config = RunConfig(dataset="cora", norm=norm, num_layers=depth, epochs=EPOCHS, hidden_channels=32, seed=0)
        model, task, record = train(config)
        probe = CollapseProbe(model, num_singular_values=0)
        start = time.perf_counter()
        table = probe.probe(task.data)
        table["norm"], table["depth"] = norm, depth
        tables.append(table)
        results.append(
            {"norm": norm, "depth": depth, "test_acc": record["test_acc"], "probe_s": time.perf_counter() - start}
        )
        # Redraw after every model: the picture fills in while training goes on.
        everything = pd.concat(tables)
        clear_output(wait=True)
        figure, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        for axis, metric in zip(axes, ["effective_rank", "cone_angle"]):
            for (norm_name, layers_count), group in everything[everything.metric == metric].groupby(["norm", "depth"]):
                axis.plot(group.layer, group.value, marker=".", label=f"{norm_name}, {layers_count} layers")
            axis.set_xlabel("layer")
            axis.set_ylabel(metric.replace("_", " "))
            axis.grid(alpha=0.3)
        axes[1].legend(fontsize=8)
        figure.tight_layout()
        plt.show()
        display(pd.DataFrame(results))

# %% [markdown]
# Test accuracy and the probe's cost per model:

# %%
pd.DataFrame(results)
