"""What a local sweep's forkserver loads once, before it forks any worker (``set_forkserver_preload``): the collapse
probe's compiled kernels (:func:`graphnorm.analysis.collapse.warm_kernels`). Every worker is forked with them in
memory, so neither its first probe nor its start waits for them, and workers start together (a worker loading
kernels on its own would leave the runs to the one that started first).

The forkserver runs on one torch thread. GNU OpenMP is not fork-safe: once a process has run a parallel region on
two or more threads, a child forked from it waits forever at its own first parallel region (its team's threads were
not copied). On one thread OpenMP starts no team, and each worker sets its run's thread count after the fork. The
run function's module, imported here after this one, inherits the single thread too."""

import torch

torch.set_num_threads(1)

from graphnorm.analysis.collapse import warm_kernels  # noqa: E402 (after the thread count: the import may run ops)

warm_kernels()
