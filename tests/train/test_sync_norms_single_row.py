"""Synced norms when one process holds a single row: every rank still joins the all-reduce (no hang), and the two
processes normalize their rows as one process normalizes all of them. Two gloo processes on the CPU."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp

from graphnorm.norms import build_norm
from graphnorm.train.sync_norms import synchronize_norms

ROWS = (1, 3)  # rank 0 holds one row, rank 1 three
CHANNELS = 4
TIMEOUT_S = 120  # a hang would wait here for ever


def norms_under_test() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {name: build_norm(name, CHANNELS) for name in ("diffgroupnorm", "batchnorm")}


def rows() -> torch.Tensor:
    return torch.randn(sum(ROWS), CHANNELS, generator=torch.Generator().manual_seed(1))


def _rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(ROWS))
    try:
        start = sum(ROWS[:rank])
        x = rows()[start : start + ROWS[rank]].requires_grad_()
        results = {}
        for name, norm in norms_under_test().items():
            synchronize_norms(norm).train()
            y = norm(x)
            y.square().sum().backward()  # the backward all-reduces too
            results[name] = (y.detach(), x.grad.clone())
            x.grad = None
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_with_one_row_joins_the_others_and_matches_one_process(tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    context = mp.start_processes(_rank, args=(free_port(), str(tmp_path)), nprocs=len(ROWS), join=False,
                                 start_method="spawn")  # fmt: skip
    try:
        for process in context.processes:
            process.join(TIMEOUT_S)
        hung = [p.pid for p in context.processes if p.is_alive()]
        assert not hung, f"ranks still running after {TIMEOUT_S} s (waiting in an all-reduce): {hung}"
        assert all(p.exitcode == 0 for p in context.processes), [p.exitcode for p in context.processes]
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    x = rows().requires_grad_()
    for name, norm in norms_under_test().items():
        y = norm.train()(x)
        y.square().sum().backward()
        start = 0
        for rank, count in enumerate(ROWS):
            got, grad = torch.load(tmp_path / f"rank{rank}.pt")[name]
            torch.testing.assert_close(got, y.detach()[start : start + count], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(grad, x.grad[start : start + count], rtol=1e-4, atol=1e-5)
            start += count
        x.grad = None
