"""What a local sweep's forkserver loads once, before it forks any worker (``set_forkserver_preload``): the collapse
probe's compiled kernels (:func:`graphnorm.analysis.collapse.warm_kernels`). Every worker is forked with them in
memory, so neither its first probe nor its start waits for them, and workers start together (a worker loading
kernels on its own would leave the runs to the one that started first)."""

from graphnorm.analysis.collapse import warm_kernels

warm_kernels()
