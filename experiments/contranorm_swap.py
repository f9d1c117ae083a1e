"""ContraNorm's linear-time estimator swapped into trained networks: what the estimator itself does to a model's
accuracy, apart from how training amplifies any difference (the protocol's 16-layer cell is chaotic when trained).

Each network is trained once (``experiments/sweeps/cora_contranorm_linear.yaml``: the 16-layer cell, exact or with
``m`` random features), then scored with the same (best-validation) weights in eval mode, exact and with the estimator
for every ``m`` and feature seed (:meth:`graphnorm.norms.contranorm.ContraNorm.use_random_features`), on the
protocol's nodes (outside train and validation): an accuracy difference is the estimator's alone.

    python -m experiments.contranorm_swap --seeds 0 1 2 --trained-with exact 256 --out runs/contranorm_swap

writes ``swap.csv`` (one row per network and scoring; a re-run skips the networks it holds) and ``cells.csv``: per
training form, ``m`` and cell of three seeds, the mean difference from the exact scoring, per feature seed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from torch import nn

from graphnorm.config import RunConfig
from graphnorm.files import atomic_write_text
from graphnorm.norms.contranorm import ContraNorm
from graphnorm.sweep.grid import expand_grid, load_sweep_config
from graphnorm.train.loop import train
from graphnorm.train.node_level import evaluate_nodes, node_eval_mask

PRESET = Path(__file__).resolve().parent / "sweeps" / "cora_contranorm_linear.yaml"
CELL_SEEDS = 3  # seeds per cell of the summary (the protocol's cell)
COLUMNS = ["seed", "trained_with", "train_test_acc", "scored_with", "feature_seed", "test_acc", "minus_exact"]


def _form_name(random_features: int | None) -> str:
    return "exact" if random_features is None else str(random_features)


def _training_form(text: str) -> int | None:
    """``--trained-with`` values: ``exact`` or a positive number of random features."""
    if text == "exact":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is neither 'exact' nor a positive number of random features")
    return int(text)


def network_configs(seeds: list[int], trained_with: list[int | None], overrides: list[str]) -> list[RunConfig]:
    """The preset's runs for these seeds and training forms (exact: ``None``): its exact kernel's settings, with
    ``random_features`` added for an estimator."""
    exact = next(k for k in load_sweep_config(PRESET).get("grid")["norm_kwargs"] if "random_features" not in k)
    kernels = [exact | ({} if m is None else {"random_features": m}) for m in trained_with]
    sweep = load_sweep_config(PRESET, [f"grid.seed={seeds}", f"grid.norm_kwargs={kernels}", *overrides])
    return expand_grid(sweep, log=None)


def use_form(model: nn.Module, random_features: int | None, feature_seed: int = 0) -> None:
    """Every ContraNorm of ``model`` computes with this form (exact: ``None``)."""
    norms = [module for module in model.modules() if isinstance(module, ContraNorm)]
    if not norms:
        raise ValueError(f"{type(model).__name__} has no ContraNorm to switch")
    for norm in norms:
        norm.use_random_features(random_features, feature_seed)


def score_network(config: RunConfig, features: list[int], feature_seeds: list[int]) -> list[dict]:
    """Train ``config`` once; its accuracy scored with the exact form and with each (m, feature seed)."""
    model, task, record = train(config)
    eval_mask = node_eval_mask(task, config.eval_nodes)

    def accuracy() -> float:
        return evaluate_nodes(model, task.data, task, eval_mask)[2]

    base = {
        "seed": config.seed,
        "trained_with": _form_name(config.norm_kwargs.get("random_features")),
        "train_test_acc": record["test_acc"],
    }
    use_form(model, None)
    exact = accuracy()
    rows = [base | {"scored_with": "exact", "feature_seed": -1, "test_acc": exact, "minus_exact": 0.0}]
    for m in features:
        for feature_seed in feature_seeds:
            use_form(model, m, feature_seed)
            value = accuracy()
            rows.append(
                base
                | {"scored_with": str(m), "feature_seed": feature_seed, "test_acc": value, "minus_exact": value - exact}
            )
    return rows


def seed_cells(seeds: list[int], size: int = CELL_SEEDS) -> dict[int, str]:
    """Each seed's cell: the sorted seeds in consecutive groups of ``size`` (a last, smaller group if they do not
    divide), named by their range ("0-2") or list ("1, 4, 9")."""
    ordered = sorted(set(seeds))
    cells = {}
    for start in range(0, len(ordered), size):
        group = ordered[start : start + size]
        consecutive = group == list(range(group[0], group[-1] + 1))
        name = f"{group[0]}-{group[-1]}" if consecutive and len(group) > 1 else ", ".join(map(str, group))
        cells.update(dict.fromkeys(group, name))
    return cells


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """The estimator's scoring minus the exact one, mean over each cell of seeds (points): one row per training form,
    m and cell, one column per feature seed."""
    swapped = table[table.scored_with != "exact"].assign(m=lambda frame: frame.scored_with.astype(int))
    swapped["seeds"] = swapped.seed.map(seed_cells(swapped.seed.tolist()))
    means = swapped.groupby(["trained_with", "m", "seeds", "feature_seed"]).minus_exact.mean().mul(100).round(2)
    wide = means.unstack("feature_seed")
    wide.columns = [f"feature seed {seed} (points)" for seed in wide.columns]
    labels = [f"{form}, m={m}, seeds {seeds}" for form, m, seeds in wide.index]
    return wide.reset_index(drop=True).set_axis(labels).rename_axis("cell").reset_index()


def read_table(path: Path) -> pd.DataFrame:
    """The rows written so far (none when ``path`` does not exist)."""
    if not path.is_file():
        return pd.DataFrame(columns=COLUMNS)
    return pd.read_csv(path, dtype={"trained_with": str, "scored_with": str})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--trained-with", nargs="+", type=_training_form, default=[None, 256], help="exact and/or feature counts"
    )
    parser.add_argument("--features", type=int, nargs="+", default=[64, 256, 1024], help="m to score with")
    parser.add_argument("--feature-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/contranorm_swap"))
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the preset, e.g. base.epochs=2")
    args = parser.parse_args(argv)
    path = args.out / "swap.csv"
    table = read_table(path)
    done = set(zip(table.seed, table.trained_with))
    for config in network_configs(args.seeds, args.trained_with, args.overrides):
        key = (config.seed, _form_name(config.norm_kwargs.get("random_features")))
        if key in done:
            print(f"seed {key[0]}, trained with {key[1]}: in {path}, skipped")
            continue
        rows = pd.DataFrame(score_network(config, args.features, args.feature_seeds), columns=COLUMNS)
        table = pd.concat([table, rows], ignore_index=True) if len(table) else rows
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, table.to_csv(index=False))  # a network at a time: an interruption loses one
    cells = summary(table)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path.with_name("cells.csv"), cells.to_csv(index=False))
    print(f"{path}: accuracy scored with the estimator minus scored exact, mean over each cell of seeds (points)")
    print(cells.to_string(index=False))


if __name__ == "__main__":
    main()
