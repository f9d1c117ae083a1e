"""``experiments/contranorm_swap.py``: trained networks scored with the exact form and the estimator, on real Cora
(tiny preset: 4 layers, 3 epochs): a network scored with the form it was trained with gives its run's accuracy, every
scoring is one row, the summary has one row per cell of seeds, and a re-run skips the networks the table holds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments import contranorm_swap

TINY = ["base.num_layers=4", "base.epochs=3"]


def test_scores_every_network_with_every_form_and_resumes(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture, one_thread
) -> None:
    arguments = ["--features", "8", "--feature-seeds", "0", "1", "--out", str(tmp_path), *TINY]
    contranorm_swap.main(["--seeds", "0", "--trained-with", "exact", "8", *arguments])
    table = pd.read_csv(tmp_path / "swap.csv", dtype={"trained_with": str, "scored_with": str})
    assert list(table.columns) == contranorm_swap.COLUMNS
    assert len(table) == 2 * (1 + 2)  # two networks, each scored exact and with m=8 under two feature seeds
    exact = table[(table.trained_with == "exact") & (table.scored_with == "exact")].iloc[0]
    assert exact.test_acc == exact.train_test_acc  # the same weights and form as the run's own test score
    # Trained with 8 features (the preset's feature seed 0): scored with them again, its own accuracy.
    own = table[(table.trained_with == "8") & (table.scored_with == "8") & (table.feature_seed == 0)].iloc[0]
    assert own.test_acc == own.train_test_acc
    swapped = table[table.scored_with != "exact"]
    assert set(swapped.feature_seed) == {0, 1} and swapped.minus_exact.notna().all()
    assert swapped.test_acc.nunique() > 1  # the forms were switched: 8 features give other scores per draw
    # The summary: one row per training form, m and cell of seeds, one column per feature seed; also printed.
    cells = pd.read_csv(tmp_path / "cells.csv")
    assert list(cells.cell) == ["8, m=8, seeds 0", "exact, m=8, seeds 0"]
    assert list(cells.columns[1:]) == ["feature seed 0 (points)", "feature seed 1 (points)"]
    exact_trained = swapped[swapped.trained_with == "exact"].sort_values("feature_seed").minus_exact.mul(100).round(2)
    assert cells.iloc[1, 1:].tolist() == exact_trained.tolist()
    assert "exact, m=8, seeds 0" in capsys.readouterr().out

    contranorm_swap.main(["--seeds", "0", "1", "--trained-with", "exact", *arguments])
    assert "seed 0, trained with exact: in" in capsys.readouterr().out  # not trained again
    again = pd.read_csv(tmp_path / "swap.csv", dtype={"trained_with": str, "scored_with": str})
    assert len(again) == 3 * 3 and again.iloc[:6].equals(table)


def test_seed_cells_group_three_seeds_at_a_time() -> None:
    assert contranorm_swap.seed_cells([5, 0, 1, 2, 3, 4, 4]) == dict.fromkeys([0, 1, 2], "0-2") | dict.fromkeys(
        [3, 4, 5], "3-5"
    )
    assert contranorm_swap.seed_cells([1, 4, 9, 10]) == dict.fromkeys([1, 4, 9], "1, 4, 9") | {10: "10"}


def test_a_model_without_contranorm_is_refused() -> None:
    from torch import nn

    with pytest.raises(ValueError, match="no ContraNorm"):
        contranorm_swap.use_form(nn.Linear(2, 2), 8)
