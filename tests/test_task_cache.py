"""The per-process dataset cache of graphnorm.data.loaders (``cached_task``): a sweep worker loads a dataset once,
runs get the same numbers as with a fresh load, and a run cannot corrupt what the next run sees."""

from __future__ import annotations

import pytest
import torch

from graphnorm.config import RunConfig
from graphnorm.data import loaders
from graphnorm.data.loaders import cached_task, clear_task_cache
from graphnorm.train import run

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
