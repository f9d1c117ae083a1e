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
# # How much smoothing helps: depth against homophily and feature noise on CSBM graphs
#
# A contextual stochastic block model graph (`load_dataset("csbm", ...)`, `graphnorm.data.csbm`) has a known answer:
# its `reference_accuracy` is the best accuracy any classifier reaches from a node's own features, and
# `graphnorm.analysis.smoothing_theory` predicts what `k` steps of mean aggregation do to it. Each step averages a
# node with its neighbours: within a class this averages the noise away (*denoising*), across classes it blurs the
# class means together (*mixing*). Which one wins depends on the homophily `h` (the fraction of edges inside a class)
# and the feature SNR (the distance between class means over the noise scale).
#
# `curve(homophily, feature_snr)` draws one graph, smooths its features `k` times with the GCN's row-normalised
# `D^-1 (A + I)` (the linear SGC-like model: no weights between steps, no nonlinearity), fits a logistic regression
# on the training nodes at every `k`, and plots its test accuracy beside the theory's prediction (the best linear
# classifier under a Gaussian approximation) and the reference accuracy. Call it with other values to see the curve
# move; the three calls below show the three regimes.
#
# **Runtime** at the defaults (4,000 nodes, depths up to 64, one torch thread): a few seconds per call (the whole
# notebook: about a minute on a busy 2-core machine, `notebooks/README.md`). The depth sweep with trained GCNs and
# norms is the study `analysis/data/csbm_depth` (preset `experiments/sweeps/csbm_depth.yaml`).

# %%
import os
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

# tqdm.auto warns that ipywidgets is missing (harmless: progress comes as text lines); before graphnorm imports it
warnings.filterwarnings("ignore", message="IProgress not found")

from graphnorm.analysis.smoothing_theory import linear_accuracy, mean_aggregate, predicted_best_depth  # noqa: E402
from graphnorm.data import load_dataset  # noqa: E402

torch.set_num_threads(int(os.environ.get("GRAPHNORM_NB_THREADS", "1")))
NODES = int(os.environ.get("GRAPHNORM_NB_NODES", "4000"))
DEPTHS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]


# %%
def curve(homophily: float, feature_snr: float, num_nodes: int = NODES, average_degree: float = 10.0, seed: int = 0):
    """Test accuracy of a logistic regression on P^k X against k, with the theory and the reference accuracy."""
    task = load_dataset(
        "csbm", num_nodes=num_nodes, average_degree=average_degree, homophily=homophily,
        feature_snr=feature_snr, seed=seed, train_fraction=0.2, val_fraction=0.2,
    )  # fmt: skip
    data = task.data
    smoothed = mean_aggregate(data.x.double(), data.edge_index, max(DEPTHS))
    train, test = data.train_mask.numpy(), data.test_mask.numpy()
    labels = data.y.numpy()
    measured = []
    for k in DEPTHS:
        # smoothing shrinks the features' scale, which the regularised fit should not see
        scaler = StandardScaler().fit(smoothed[k].numpy()[train])
        features = scaler.transform(smoothed[k].numpy())
        model = LogisticRegression(max_iter=1000).fit(features[train], labels[train])
        measured.append(model.score(features[test], labels[test]))
    theory = linear_accuracy(max(DEPTHS), feature_snr, homophily, average_degree)
    best = predicted_best_depth(feature_snr, homophily, average_degree, depths=DEPTHS, tolerance=0.005)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = np.arange(max(DEPTHS) + 1)
    ax.plot(steps, theory, color="tab:blue", label="theory (best linear classifier)")
    ax.plot(DEPTHS, measured, "o", color="tab:orange", label=f"logistic regression ({int(test.sum())} test nodes)")
    ax.axhline(task.reference_accuracy, color="gray", linestyle="--", label="reference (own features only)")
    ax.axvline(best, color="tab:blue", linestyle=":", label=f"predicted best depth {best}")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("smoothing steps k")
    ax.set_ylabel("test accuracy")
    ax.set_title(
        f"h = {homophily} (realised {task.stats['realised_homophily']:.3f}), SNR = {feature_snr}, "
        f"degree {task.stats['degree_mean']:.1f}"
    )
    ax.legend(fontsize=8)
    plt.show()
    theory_at = theory[DEPTHS]
    return pd.DataFrame({"k": DEPTHS, "measured": measured, "theory": theory_at}).round(3).set_index("k").T


# %% [markdown]
# Strong homophily, weak features (reference accuracy 0.60): each step adds mostly same-class neighbours, so the
# accuracy climbs far above what the features alone allow and stays there: at this homophily mixing is slow enough
# that 64 steps still keep the classes apart.

# %%
curve(0.9, 0.507)

# %% [markdown]
# Moderate homophily, stronger features (reference 0.75): a few steps help, then mixing wins and the accuracy drifts
# down toward chance (still above the reference at 64 steps on this graph); the predicted best depth is small.

# %%
curve(0.7, 1.349)

# %% [markdown]
# No homophily (two classes, h = 0.5): neighbours carry no information about a node's class, so any smoothing only
# hurts. The saw-tooth is real: after an even number of steps part of the average has walked back to the node
# itself, which keeps some of its own signal.

# %%
curve(0.5, 1.349)
