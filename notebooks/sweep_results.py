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
# # Sweep results: collapse across depth
#
# Loads a sweep's output directory (`runs.csv`, `layers.csv`, written by `graphnorm.sweep`) and reproduces the
# report figures of `graphnorm.analysis.plots.make_report`. Set `GRAPHNORM_RUN_DIR` (or edit `RUN_DIR`) to your
# sweep directory. Every run probes its final model by default (`probe: true`), which fills `layers.csv`.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from graphnorm.analysis import plots

RUN_DIR = Path(os.environ.get("GRAPHNORM_RUN_DIR", "runs/cora_depth"))
runs, layers = plots.load_sweep(RUN_DIR)
print(f"{len(runs)} successful runs, {len(layers)} layer-metric rows from {RUN_DIR}")
runs.head()

# %% [markdown]
# ## Task metric against depth (mean ± std over seeds)

# %%
figure = plots.plot_main_metric_vs_depth(runs)
plt.show()

# %% [markdown]
# ## Collapse metrics layer by layer
# One panel per metric and depth, one line per norm; the band is the std over seeds.

# %%
table = plots.layer_table(runs, layers)
if not table.empty:
    figure = plots.plot_metric_vs_layer(table)
    plt.show()

# %% [markdown]
# ## Singular-value spectra (deepest model; first, middle and last layer)

# %%
if table["metric"].astype(str).str.startswith("sv_").any():
    figure = plots.plot_spectra(table)
    plt.show()

# %% [markdown]
# ## Summary table

# %%
display(Markdown(plots.summary_markdown(runs, layers)))
