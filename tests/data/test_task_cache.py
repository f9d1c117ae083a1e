"""The per-process dataset cache of graphnorm.train.loaders (``cached_task``): a sweep worker loads a dataset once,
runs get the same numbers as with a fresh load, and a run cannot corrupt what the next run sees."""

from __future__ import annotations

import os

import pytest
import torch

from graphnorm.config import RunConfig
from graphnorm.train import loaders, run
from graphnorm.train.loaders import cached_task, clear_task_cache

TIMINGS = ("wall_time_s", "probe_time_s")


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Names of the datasets read from disk (the real loader, counted), with an empty cache before and after."""
    calls: list[str] = []
    real = loaders.load_dataset

    def counting(name, root=None, **options):
        calls.append(name)
        return real(name, root, **options)

    clear_task_cache()
    monkeypatch.setattr(loaders, "load_dataset", counting)
    yield calls
    clear_task_cache()


def _without_timings(record: dict) -> dict:
    return {key: value for key, value in record.items() if key not in TIMINGS}


def test_runs_load_once_and_match_fresh_loads(loads, data_root):
    torch.set_num_threads(1)
    configs = [
        RunConfig(dataset="cora", num_layers=2, hidden_channels=8, epochs=2, seed=seed, data_root=str(data_root))
        for seed in (0, 1)
    ]
    cached = [run(config) for config in configs]
    assert loads == ["cora"]
    fresh = []
    for config in configs:
        clear_task_cache()
        fresh.append(run(config))
    assert loads == ["cora"] * 3
    assert [_without_timings(r) for r in cached] == [_without_timings(r) for r in fresh]


def test_reassigned_fields_do_not_reach_the_cache(loads, data_root):
    first = cached_task("cora", str(data_root), {"split": None})
    x = first.data.x.clone()
    first.data.x = torch.zeros(3)  # as data.to(device) or a feature transform would
    first.data = None
    first.stats["note"] = 1
    second = cached_task("cora", str(data_root), {"split": None})
    assert loads == ["cora"]
    assert torch.equal(second.data.x, x) and "note" not in second.stats


def test_in_place_change_of_a_shared_tensor_reloads(loads, data_root):
    first = cached_task("cora", str(data_root), {"split": None})
    x = first.data.x.clone()
    first.data.x.mul_(2.0)  # corrupts the cached tensor itself
    second = cached_task("cora", str(data_root), {"split": None})
    assert loads == ["cora", "cora"]
    assert torch.equal(second.data.x, x)


def test_in_place_change_of_a_graph_level_split_reloads(loads, data_root):
    options = {"split": None}
    task = cached_task("zinc", str(data_root), options)
    graph = task.train[0]
    graph.x.add_(1)  # a view of the split's collated storage
    cached_task("zinc", str(data_root), options)
    assert loads == ["zinc", "zinc"]
    cached_task("zinc", str(data_root), options)
    assert loads == ["zinc", "zinc"]  # unchanged since: served from the cache


def test_other_options_are_other_entries_and_the_least_recent_goes(loads, data_root, monkeypatch):
    monkeypatch.setattr(loaders, "TASK_CACHE_SIZE", 2)
    cached_task("cora", str(data_root), {"split": None})
    cached_task("cora", str(data_root), {"split": None})
    cached_task("texas", str(data_root), {"split": 1})
    cached_task("texas", str(data_root), {"split": 2})
    assert loads == ["cora", "texas", "texas"]
    cached_task("texas", str(data_root), {"split": 2})
    assert loads == ["cora", "texas", "texas"]
    cached_task("cora", str(data_root), {"split": None})  # the least recently used, dropped for texas split 2
    assert loads == ["cora", "texas", "texas", "cora"]


def test_a_csv_edited_between_runs_is_loaded_afresh(tmp_path, data_root):
    """The cache key holds the dataset's declared identity (a SMILES CSV's sha256), not only its options: a worker
    that already loaded a CSV must not hand the next run the old molecules after the file was edited."""
    path = tmp_path / "molecules.csv"
    molecules = ["CCO", "CCN", "c1ccccc1", "CC(=O)O", "CCCC", "CCCl", "CCBr", "CC=O", "OCCO", "CCOC", "CC#N", "NCCN"]
    path.write_text("smiles,y\n" + "".join(f"{s},{i % 2}\n" for i, s in enumerate(molecules[:10])))
    options = {"path": str(path), "target_columns": ["y"], "split": "random"}
    clear_task_cache()
    try:
        before = cached_task("smiles", str(data_root), options)
        path.write_text("smiles,y\n" + "".join(f"{s},{i % 2}\n" for i, s in enumerate(molecules)))
        os.utime(path, (0, 0))  # an old timestamp: the sha256 memo must not hide the edit either
        after = cached_task("smiles", str(data_root), options)
    finally:
        clear_task_cache()
    count = lambda task: sum(len(part) for part in (task.train, task.val, task.test))  # noqa: E731
    assert (count(before), count(after)) == (10, 12)
