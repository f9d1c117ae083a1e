"""Every compiled kernel of the probe loaded (or compiled) ahead of the first probe: :func:`warm_kernels`."""

from __future__ import annotations

import torch

from graphnorm.analysis.collapse.measure import _measure_chunk
from graphnorm.analysis.collapse.records import collapse_records
from graphnorm.analysis.collapse.rows import _row_structure
from graphnorm.analysis.collapse.staging import PRECISIONS, _StackBuffers
from graphnorm.analysis.min_norm_point import WORKING_SIZE


def warm_kernels() -> None:
    """Compile (or load from numba's cache beside the modules) every compiled kernel the probe runs: the edge
    products and the cone solver, in each specialization the probe calls, by measuring a tiny layer of rows with
    edges, as one graph and as a batch of two (the per-graph path calls the cone solver itself). A process that will
    probe (a sweep worker) calls it when it starts, so its first probe does not wait for the kernels. Records
    nothing; cheap once the kernels are loaded."""
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(2 * WORKING_SIZE + 8, 4, generator=generator) + 0.1  # rows beyond the cone solver's working set
    edges = torch.randint(0, x.size(0), (2, 3 * x.size(0)), generator=generator)
    edges = torch.cat([edges, edges.flip(0)], dim=1)
    two_graphs = (torch.arange(x.size(0)) >= x.size(0) // 2).long()
    for precision in PRECISIONS:  # the edge kernel is compiled for float64 and for float32 rows
        collapse_records(x, edge_index=edges, precision=precision)
        collapse_records(
            x, edge_index=edges[:, two_graphs[edges[0]] == two_graphs[edges[1]]], batch=two_graphs, precision=precision
        )
        rows = _row_structure(x.size(0), edges, None, None)
        for dtype in (torch.float32, torch.float64):  # staged layers, measured as a probe's second thread does
            buffers = _StackBuffers(1, x.size(0), x.size(1), precision)
            buffers.stage(0, x.to(dtype))
            _measure_chunk(buffers, 1, rows, 1e-3)
