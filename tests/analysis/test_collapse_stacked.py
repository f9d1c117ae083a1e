"""The stacked paths of :mod:`graphnorm.analysis.collapse` give the per-layer numbers up to round-off.

``collapse_records_layers`` measures layers of one width in stacked chunks (one batched Gram product, one edge gather
and one bincount per sum for a whole chunk) and ``LayerStream`` fills such chunks from forward hooks. Both must give,
for every layer, the records of ``collapse_records`` on that layer alone (a chunk of one) within round-off, whatever
the chunk size, on random and degenerate inputs: zero rows, identical rows, all-zero layers, one-node graphs, token
rows, batches with graphs that have no node rows, directed and undirected edge lists.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from record_tolerance import EPS, value_tolerance
from torch import Tensor

from graphnorm.analysis.collapse import LayerStream, collapse_records, collapse_records_layers, staging
from graphnorm.analysis.collapse.measure import _measure_chunk, _measure_one_graph
from graphnorm.analysis.collapse.rows import _row_structure

NUM_ROWS = 120


def _layers(generator: torch.Generator, width: int = 8, count: int = 7) -> list[Tensor]:
    """Random layers with degenerate ones among them."""
    xs = [torch.randn(NUM_ROWS, width, generator=generator) * torch.rand(width, generator=generator) for _ in range(4)]
    xs[0][:15] = 0.0  # zero rows
    xs[1][10:60] = xs[1][5]  # identical rows
    xs[2] = xs[2][:, :1].repeat(1, width) + 1e-9 * xs[2]  # collapsed to one direction
    xs.append(torch.zeros(NUM_ROWS, width))  # an all-zero layer
    xs.append(torch.randn(NUM_ROWS, width, generator=generator).abs() + 3.0)  # a narrow cone
    xs.append(torch.randn(NUM_ROWS, width, generator=generator).double())
    return xs[:count]


def _edges(generator: torch.Generator, undirected: bool) -> Tensor:
    edges = torch.randint(0, NUM_ROWS, (2, 400), generator=generator)
    return torch.cat([edges, edges.flip(0)], 1) if undirected else edges


def _layer_bytes(width: int, num_edges: int, num_rows: int = NUM_ROWS) -> int:
    """Working memory a chunk counts per layer: float64 [rows, width] six times and per-edge values eight times."""
    return 8 * (6 * width * num_rows + 8 * num_edges)


def _assert_same_records(got: list[dict], expected: list[dict]) -> None:
    assert [(r["rows"], r["metric"], r["stat"]) for r in got] == [(r["rows"], r["metric"], r["stat"]) for r in expected]
    for record, reference in zip(got, expected):
        value, wanted = record["value"], reference["value"]
        if math.isnan(wanted):
            assert math.isnan(value), (record, wanted)
            continue
        # A chunk and a layer alone run other kernels (stacked and single): round-off apart, not bit for bit.
        assert abs(value - wanted) <= value_tolerance(record["metric"], wanted), (record, wanted)


def _contexts(generator: torch.Generator) -> dict[str, dict]:
    batch = torch.sort(torch.randint(0, 6, (NUM_ROWS,), generator=generator)).values
    batch[batch == 3] = 4  # graph 3 has no rows
    tokens = torch.zeros(NUM_ROWS, dtype=torch.bool)
    tokens[::17] = True
    lonely = batch.clone()
    lonely[-1] = 6  # a one-node graph
    return {
        "undirected": dict(edge_index=_edges(generator, True)),
        "directed": dict(edge_index=_edges(generator, False)),
        "no edges": {},
        "batch": dict(edge_index=_edges(generator, True), batch=batch),
        "batch one-node graph": dict(edge_index=_edges(generator, False), batch=lonely),
        "tokens": dict(edge_index=_edges(generator, True), token_mask=tokens),
        "batch and tokens": dict(edge_index=_edges(generator, True), batch=batch, token_mask=tokens),
    }


@pytest.mark.parametrize("context_name", list(_contexts(torch.Generator().manual_seed(0))))
@pytest.mark.parametrize("chunk_layers", [1, 3, 64])
def test_stacked_layers_equal_each_layer_alone(context_name, chunk_layers, monkeypatch):
    generator = torch.Generator().manual_seed(1)
    context = _contexts(generator)[context_name]
    xs = _layers(generator)
    expected = [collapse_records(x, num_singular_values=5, **context) for x in xs]
    # _CHUNK_BYTES sets how many layers are stacked together: one, a few, or all of them.
    monkeypatch.setattr(staging, "_CHUNK_BYTES", chunk_layers * _layer_bytes(8, 800))
    got = collapse_records_layers(xs, num_singular_values=5, **context)
    assert len(got) == len(xs)
    for layer_got, layer_expected in zip(got, expected):
        _assert_same_records(layer_got, layer_expected)


def test_stacked_layers_of_two_widths_and_wide_layers():
    """Layers of several widths (tall and wide: SVD instead of the Gram matrix) in one call."""
    generator = torch.Generator().manual_seed(2)
    edge_index = _edges(generator, True)
    xs = [torch.randn(NUM_ROWS, 8, generator=generator), torch.randn(NUM_ROWS, 200, generator=generator)]
    xs += [torch.randn(NUM_ROWS, 8, generator=generator), torch.zeros(NUM_ROWS, 200)]
    got = collapse_records_layers(xs, edge_index=edge_index)
    for x, records in zip(xs, got):
        _assert_same_records(records, collapse_records(x, edge_index=edge_index))


def test_one_node_graph_layers():
    edge_index = torch.zeros(2, 0, dtype=torch.long)
    xs = [torch.randn(1, 4), torch.zeros(1, 4), torch.ones(1, 4)]
    got = collapse_records_layers(xs, edge_index=edge_index)
    for x, records in zip(xs, got):
        _assert_same_records(records, collapse_records(x, edge_index=edge_index))
    values = {r["metric"]: r["value"] for r in got[0]}
    assert math.isnan(values["mean_cosine"]) and values["cone_angle"] == 0.0


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("chunk_layers", [1, 2, 64])
def test_layer_stream_chunks_equal_each_layer_alone(chunk_layers, background, monkeypatch):
    """Layers added out of order, in two widths, some replaced while waiting in a chunk and some after their chunk
    was measured (on the second thread too); an invalid layer leaves the earlier one of its index in place."""
    generator = torch.Generator().manual_seed(3)
    edge_index = _edges(generator, True)
    monkeypatch.setattr(staging, "_CHUNK_BYTES", chunk_layers * _layer_bytes(8, 800))
    xs = _layers(generator) + [torch.randn(NUM_ROWS, 3, generator=generator)]
    expected = len(xs) if background else None  # the last layers measured one at a time
    stream = LayerStream(edge_index, num_singular_values=4, background=background, expected_layers=expected)
    stream.add(2, torch.randn(NUM_ROWS, 8, generator=generator))  # replaced below
    stream.add(7, torch.randn(NUM_ROWS, 8, generator=generator))  # other width before: replaced by width 3
    for index in (6, 0, 5, 1, 2, 7, 4, 3):
        stream.add(index, xs[index])
    stream.add(0, torch.randn(NUM_ROWS, 8, generator=generator))
    stream.add(0, xs[0])  # replaced again after its chunk may have been measured
    bad = xs[1].clone()
    bad[4, 0] = math.inf
    if not background:  # a background stream checks a layer when it measures it (next test)
        with pytest.raises(ValueError, match="NaN or Inf"):
            stream.add(1, bad)
    got = stream.records()
    assert len(got) == len(xs)
    for x, records in zip(xs, got):
        _assert_same_records(records, collapse_records(x, edge_index=edge_index, num_singular_values=4))


def test_background_stream_reports_an_invalid_layer_when_read(monkeypatch):
    """With ``background`` a layer is staged as it is and checked when its chunk is measured: the same error, from
    the add() that measures it here or from records() (which then stops the second thread; close() does otherwise)."""
    generator = torch.Generator().manual_seed(4)
    monkeypatch.setattr(staging, "_CHUNK_BYTES", 2 * _layer_bytes(8, 800))
    xs = _layers(generator)
    xs[3] = xs[3].clone()
    xs[3][7, 1] = math.nan
    stream = LayerStream(_edges(generator, True), num_singular_values=4, background=True)
    with pytest.raises(ValueError, match="NaN or Inf"):
        for index, x in enumerate(xs):
            stream.add(index, x)
        stream.records()
    stream.close()
    assert stream._executor is None


def test_chunk_memory_is_bounded():
    """A chunk holds at least one layer and otherwise stays within _CHUNK_BYTES."""
    assert staging._chunk_capacity(2708, 5278, 64) == 7  # Cora, hidden 64: 7 layers, 62 MB
    assert staging._chunk_capacity(20_000, 80_000, 64) == 1
    for rows, edges, width in [(10, 0, 2), (2708, 5278, 64), (50_000, 10**6, 256)]:
        capacity = staging._chunk_capacity(rows, edges, width)
        assert capacity == 1 or capacity * _layer_bytes(width, edges, rows) <= staging._CHUNK_BYTES


def test_staged_float32_layers_give_the_numbers_of_their_float64_copies():
    """A chunk of staged float32 layers is measured a layer at a time from one layer's scratch rows, its edge metrics
    gathering the rows as they came (half the bytes): they widen exactly, so every value (spectrum, cones, unit-row
    sums, edge metrics) is that of the same layers loaded as float64 copies, within round-off. A layer that is not of
    ordinary scale (here all zero) is loaded again by the checked path and measured from its loaded rows."""
    generator = torch.Generator().manual_seed(3)
    layers = [x.float() for x in _layers(generator, width=8, count=3)]
    layers[1] = torch.zeros(NUM_ROWS, 8)
    rows = _row_structure(NUM_ROWS, _edges(generator, undirected=True), None, None)
    staged = staging._StackBuffers(3, NUM_ROWS, 8)
    loaded = staging._StackBuffers(3, NUM_ROWS, 8)
    for slot, x in enumerate(layers):
        staged.stage(slot, x)
        loaded.load(slot, x, None)
    assert loaded.stack(3).rows_as_given is None  # the loaded chunk's edge metrics read its float64 rows
    from_staging = _measure_chunk(staged, 3, rows, 1e-3)
    from_float64 = _measure_one_graph(loaded.stack(3), rows, 1e-3)
    assert not any(staged.staged) and staged.in_staging == [True, False, True]  # the zero layer was loaded again
    for (summary, edges), (reference, reference_edges) in zip(from_staging, from_float64):
        # Two measuring routes (staged rows, loaded float64 rows): round-off apart. Singular values come from X^T X,
        # whose eigenvalues move by ~eps * s_1^2 (a small one by ~sqrt(eps) * s_1); a sum of n unit rows by n * eps
        # per term; a cone angle near 0 by ~sqrt(eps) rad; edge metrics are float64 sums (value_tolerance).
        sigma_tol = 1e-7 * float(reference.sigma.max()) + 1e-300
        assert torch.allclose(summary.sigma, reference.sigma, rtol=0.0, atol=sigma_tol)
        assert torch.allclose(summary.units_sum, reference.units_sum, rtol=0.0, atol=NUM_ROWS**2 * EPS)
        assert (summary.num_nonzero, summary.num_rows) == (reference.num_nonzero, reference.num_rows)
        cones, reference_cones = [summary.cone, summary.cone_q90], [reference.cone, reference.cone_q90]
        assert np.allclose(cones, reference_cones, rtol=0.0, atol=value_tolerance("cone_angle", 0.0), equal_nan=True)
        for name, values in reference_edges.items():
            got = np.asarray(edges[name], dtype=np.float64)
            wanted = np.asarray(values, dtype=np.float64)
            assert np.allclose(got, wanted, rtol=1e-9, atol=1e-12, equal_nan=True), name
    assert from_staging[1][0].num_nonzero == 0
