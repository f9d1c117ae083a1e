"""Smoke test: experiments/graphormer_early_warning.py trains a few steps of a MolHIV Graphormer variant on a small
subset, writes its signals at step 0 and every K steps, and its --table replays the prior's BCE of a CSV written
without it to the same numbers."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EVERY_MEASUREMENT = {
    "train_bce",
    "window_prior_bce",
    "prior_entropy",
    "val_bce",
    "logit_std",
    "val_rocauc",
    "ema_val_bce",
    "ema_logit_std",
    "ema_val_rocauc",
    "token_cos",
    "node_cos",
    "node_cos_pooled",
    "lr",
    "elapsed_s",
    "loadavg_1m",
}


def run_script(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "experiments.graphormer_early_warning", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def prior_bce_column(table: str) -> list[str]:
    """The "prior BCE same batches" column of a printed table."""
    return [line.split("|")[3].strip() for line in table.splitlines() if line.startswith("| ") and "step" not in line]


def test_a_short_run_writes_every_signal_and_its_table_replays_the_prior(data_root: Path, tmp_path: Path) -> None:
    tiny = ["--limit-graphs", "300", "--steps", "4", "--every", "2", "--full-val-every", "4"]
    variant = "ref_layout+post_ln"  # a registered subclass and a model_kwargs override
    small = ["num_layers=1", "num_heads=1", "hidden_channels=8", "model_kwargs.ffn_channels=8", "batch_size=16"]
    result = run_script("--variant", variant, *tiny, "--set", *small, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / f"{variant}.csv").read_text().splitlines()))
    signals: dict[int, set[str]] = {}
    for row in rows:
        signals.setdefault(int(row["step"]), set()).add(row["signal"])
    assert signals == {
        0: EVERY_MEASUREMENT | {"full_val_rocauc"},
        2: EVERY_MEASUREMENT,
        4: EVERY_MEASUREMENT | {"full_val_rocauc"},
    }
    # Without window_prior_bce (a CSV of an older run), --table replays the batches' labels: the same prior BCE.
    measured = prior_bce_column(result.stdout)  # steps 0 and 4 (the table's rows: TABLE_STEPS and the last)
    with open(tmp_path / f"{variant}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "signal", "value"])
        writer.writeheader()
        writer.writerows(row for row in rows if row["signal"] != "window_prior_bce")
    replayed = run_script("--table", variant, "--limit-graphs", "300", "--set", "batch_size=16", "--out", str(tmp_path))
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert prior_bce_column(replayed.stdout) == measured and len(measured) == 2


def test_an_unknown_variant_is_refused_with_the_known_ones() -> None:
    result = run_script("--variant", "layernorm+nope")
    assert result.returncode == 2
    assert "unknown variant 'nope'; known: batchnorm, layernorm, ref_recipe" in result.stderr
    assert "torch_init" in result.stderr and "(combine with '+')" in result.stderr
