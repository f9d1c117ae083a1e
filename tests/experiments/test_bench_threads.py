"""bench_threads' measuring parts: the subnormal count and the neighbour process it starts and must not leave."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # experiments/ is not an installed package
    sys.path.insert(0, str(REPO))

from experiments.benchmarks import bench_threads  # noqa: E402


def test_subnormals_counts_only_values_below_the_smallest_normal():
    tiny = torch.finfo(torch.float32).tiny
    x = torch.tensor([0.0, tiny, tiny / 2, -tiny / 4, 1e-45, 1.0, -1e-30])
    assert bench_threads.subnormals(x) == 3  # tiny/2, -tiny/4, 1e-45 (the smallest subnormal)


def test_count_subnormals_sees_a_planted_subnormal_in_forward_and_backward():
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.full((1,), 1e-20))

        def forward(self, x, edge_index):
            return x * self.weight * 1e-20  # 1e-40: subnormal outputs; d/dweight = x * 1e-20

    class Data:
        x = torch.ones(4, 3)
        edge_index = None
        train_mask = torch.tensor([True, True, False, False])
        y = torch.tensor([0, 1, 2, 0])

    class Model(nn.Module):  # the hooks watch the model's modules, not the model itself
        def __init__(self) -> None:
            super().__init__()
            self.scale = Scale()

        def forward(self, x, edge_index):
            return self.scale(x, edge_index)

    counts = bench_threads.count_subnormals(Model(), Data())
    assert counts["forward values"] == 12 and counts["forward subnormal"] == 12
    assert counts["backward values"] == 12 + 1  # the output's grad and the weight's


def test_neighbour_process_runs_only_when_asked_and_is_gone_after():
    before = _children()
    with bench_threads.neighbour_process() as neighbour:
        (pid,) = _children() - before  # the neighbour, not a child some earlier test left running
        assert _reaches_state(pid, "T")  # stopped until asked to run
        neighbour(True)
        assert _reaches_state(pid, "RS")
        neighbour(False)
        assert _reaches_state(pid, "T")
    assert pid not in _children()


def _children() -> set[int]:
    path = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    return {int(pid) for pid in path.read_text().split()}


def _reaches_state(pid: int, states: str, timeout_s: float = 10.0) -> bool:
    """Whether the process enters one of ``states`` within ``timeout_s``: a signal takes effect when the process is
    next scheduled, which on loaded cores can be long after the kill() returns."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        if state in states or time.monotonic() > deadline:
            return state in states
        time.sleep(0.02)
