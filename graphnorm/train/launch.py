"""One run trained data-parallel from a single call: :func:`run_in_processes` starts ``torch.distributed.run`` as a
child (``--standalone``, N processes of this module), whose rank 0 hands back the record through a file.

A sweep asks for it by its run function, without a config key (run ids stay as they are): ``run_fn:
graphnorm.train.launch:processes_2`` trains every grid point in 2 processes (any N: ``processes_<N>``). Each run then
takes N processes, which the sweep's CPU plan counts: by default at most the cores divided by N runs at once (on
GPUs, give ``--workers`` the GPUs divided by N). The child's output
(progress lines, errors) goes where the caller's ``sys.stdout`` goes: a sweep's run log.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphnorm.config import RunConfig

PROCESSES_NAME = re.compile(r"processes_([1-9][0-9]*)")


def run_in_processes(config: RunConfig, processes: int, threads: int = 1) -> dict[str, Any]:
    """The record of ``config`` trained by ``processes`` processes of ``threads`` torch threads each (under
    torchrun; :mod:`graphnorm.train.distributed`). ``RuntimeError`` with the child's last lines when it fails."""
    with tempfile.TemporaryDirectory(prefix="graphnorm-launch-") as folder:
        config_path, out = Path(folder) / "config.json", Path(folder) / "record.json"
        config_path.write_text(json.dumps(config.to_dict()))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
        command += ["-m", __name__, str(config_path), str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        tail: list[str] = []
        with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
            for line in child.stdout:  # type: ignore[union-attr]
                sys.stdout.write(line)  # (the caller's stdout: a sweep's run log)
                tail = [*tail[-19:], line]
        if child.returncode != 0 or not out.exists():
            raise RuntimeError(f"{processes} training processes failed (exit {child.returncode}): {''.join(tail)}")
        return json.loads(out.read_text())


@functools.cache  # one object per N: pickle finds the very function it saves
def processes_run(processes: int) -> Callable[[RunConfig], dict[str, Any]]:
    """The run function ``run(config) -> record`` that trains in ``processes`` processes, named ``processes_<N>`` in
    this module (so that a sweep can name it, and pickle it for its workers)."""

    def run(config: RunConfig) -> dict[str, Any]:
        import torch

        return run_in_processes(config, processes, threads=max(1, torch.get_num_threads() // processes))

    run.__name__ = run.__qualname__ = f"processes_{processes}"
    run.__module__ = __name__
    run.processes = processes  # type: ignore[attr-defined]  # a sweep's CPU plan counts them
    return run


def __getattr__(name: str) -> Any:
    match = PROCESSES_NAME.fullmatch(name)
    if match is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return processes_run(int(match.group(1)))


def _child(config_path: str, out: str) -> None:
    """One of torchrun's processes: train the config; rank 0 writes the record."""
    from graphnorm.files import atomic_write_text
    from graphnorm.train.loop import run
    from graphnorm.train.ranks import launched_ranks

    record = run(RunConfig.from_dict(json.loads(Path(config_path).read_text())))
    if launched_ranks().writes:
        atomic_write_text(Path(out), json.dumps(record), "the run's record")


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
