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
# # Sweep results: accuracy and collapse across depth
#
# Loads a sweep's output folder (`runs.csv`, `layers.csv`, `sweep.yaml`, written by `graphnorm sweep`) and draws
# the report of `graphnorm.sweep.report.make_report`: the sweep's metric against depth (with the majority-class
# level when the runs recorded it), the collapse metrics layer by layer, singular-value spectra, and the summary
# tables.
#
# **Which folder.** By default the README's main job, `runs/cora_depth_quick` in the repository (found from the
# installed package, so the notebook runs from any working directory). Run that job first, from the repository root:
#
# ```bash
# graphnorm sweep experiments/sweeps/cora_depth_quick.yaml
# ```
#
# Any other sweep: set `GRAPHNORM_RUN_DIR` before starting Jupyter (a relative path is taken from the folder where
# you started Jupyter, then from the repository root), or edit `RUN_DIR` below.
#
# **Runtime:** a few seconds (it only reads and plots; no training).

# %%
import os
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

# tqdm.auto warns that ipywidgets is missing (harmless: progress comes as text lines); before graphnorm imports it
warnings.filterwarnings("ignore", message="IProgress not found")

import graphnorm  # noqa: E402
from graphnorm.sweep import report  # noqa: E402

MAIN_JOB = "experiments/sweeps/cora_depth_quick.yaml"
DEFAULT_RUN_DIR = "runs/cora_depth_quick"  # the main job's output, relative to the repository root


def repository_root() -> Path:
    """The graphnorm checkout: the installed package's parent folder (editable install), else the nearest folder
    above the working directory that holds graphnorm's pyproject.toml."""
    for folder in [Path(graphnorm.__file__).resolve().parents[1], Path.cwd(), *Path.cwd().parents]:
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and 'name = "graphnorm"' in pyproject.read_text():
            return folder
    raise FileNotFoundError("cannot find the graphnorm repository (pyproject.toml): start Jupyter inside a checkout")


def resolve(path: str) -> Path:
    """An absolute ``path`` as is; a relative one from the folder where Jupyter was started ($PWD), the kernel's
    working directory, then the repository root: the first that exists (else the repository-root reading)."""
    if Path(path).expanduser().is_absolute():
        return Path(path).expanduser()
    bases = [Path(os.environ.get("PWD", Path.cwd())), Path.cwd(), repository_root()]
    candidates = [base / path for base in bases]
    return next((candidate.resolve() for candidate in candidates if candidate.exists()), candidates[-1].resolve())


RUN_DIR = resolve(os.environ.get("GRAPHNORM_RUN_DIR", DEFAULT_RUN_DIR))
if not (RUN_DIR / "runs.csv").is_file():
    raise FileNotFoundError(
        f"no sweep results in {RUN_DIR} (runs.csv missing). Run the main job first, from the repository root "
        f"{repository_root()}:\n    graphnorm sweep {MAIN_JOB}\nor set GRAPHNORM_RUN_DIR to a sweep's output folder."
    )
runs, layers = report.load_sweep(RUN_DIR)
metric = report.main_metric(runs, report.sweep_metric(RUN_DIR))  # the sweep's own metric (sweep.yaml), if it names one
shown = RUN_DIR.relative_to(repository_root()) if RUN_DIR.is_relative_to(repository_root()) else RUN_DIR
print(f"{shown}: {len(runs)} successful runs, {len(layers)} layer-metric rows; metric: {metric}")

# %% [markdown]
# ## The sweep's metric against depth (mean ± std over seeds)
# The dashed line is the majority-class level (always predicting the most frequent training class), when the runs
# recorded it: a model on that line has learned nothing from the graph.

# %%
figure = report.plot_main_metric_vs_depth(runs, metric=metric)
plt.show()

# %% [markdown]
# ## Collapse metrics layer by layer
# One panel per metric and depth, one line per norm; the band is the std over seeds (none with one seed).

# %%
table = report.layer_table(runs, layers)
if table.empty:
    print("no layer metrics: the runs were not probed (probe: false)")
else:
    figure = report.plot_metric_vs_layer(table)
    plt.show()

# %% [markdown]
# ## Singular-value spectra (deepest model; first, middle and last layer)

# %%
if not table.empty and table["metric"].astype(str).str.match(r"sv_\d+$").any():
    figure = report.plot_spectra(table)
    plt.show()

# %% [markdown]
# ## Summary tables

# %%
display(Markdown(report.summary_markdown(runs, layers, metric)))
