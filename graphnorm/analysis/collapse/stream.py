"""The collapse records of a model's layers handed over one at a time, as a probe's forward hooks see them
(:class:`LayerStream`): each layer copied into a chunk while it is in cache, a full chunk measured at once or on a
second thread, and only a small summary per layer kept until the records are asked for."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torch import Tensor

from graphnorm.analysis.collapse.measure import _LayerPart, _measure_chunk
from graphnorm.analysis.collapse.records import _records_of_parts
from graphnorm.analysis.collapse.rows import _check_layer, _row_structure, _RowStructure
from graphnorm.analysis.collapse.staging import PRECISIONS, _chunk_capacity, _StackBuffers
from graphnorm.checks import check_choice, same_values
from graphnorm.threads import single_thread

# Chunks a background stream lets wait for its second thread before the caller measures one itself.
_QUEUED_CHUNKS = 2
_ROWS_KEY = ("rows",)  # a LayerStream's pool also keeps the edge structure of its last rows under this key


class LayerStream:
    """:func:`collapse_records_layers` fed one layer at a time, for rows that form one graph (no ``batch``, no token
    rows): the probe hands each layer's output over in its forward hook, while the output is still in cache, and the
    stream copies it (float64) into a chunk of a few layers, validates it at once, and measures the chunk when it is
    full (:func:`_measure_layers`: Gram matrix, cones and edge sums, a layer at a time, then the spectra of the chunk)
    keeping only a small summary per layer. Memory: one chunk of float64 rows per width (within _CHUNK_BYTES, at least
    one layer), up to three with ``background``, not every layer's output. :meth:`records` measures what is left and
    batches the rest over layers.

    ``background``: the hook only copies the layer as it is into a staging buffer; a full chunk is measured on a
    second thread (up to _QUEUED_CHUNKS chunks wait for it; beyond that the caller measures the chunk at once), each
    staged layer loaded (float64 rows, norms, unit rows, validation) into one layer's scratch rows just before it is
    measured, so the second thread's memory traffic stays in cache and the caller (the probe's forward pass) and the
    second thread share the work on two cores. The first layers go to the second thread one at a time (it starts at
    once), and so do the last ones when ``expected_layers`` says how many will come (little is left for
    :meth:`records`). Every chunk is measured by the same functions either way, on one thread each; the records are
    the same.

    Gives the records of :func:`collapse_records_layers` on the same layers (with the same ``precision``).
    """

    def __init__(
        self,
        edge_index: Tensor | None = None,
        num_singular_values: int = 16,
        cone_tol_deg: float = 1e-3,
        precision: str = "float64",
        background: bool = False,
        buffer_pool: dict[tuple, Any] | None = None,
        expected_layers: int | None = None,
    ):
        self.precision = check_choice(precision, PRECISIONS, "precision", "collapse_metrics")
        self.edge_index = edge_index
        self.num_singular_values = num_singular_values
        self.cone_tol_deg = cone_tol_deg
        self._rows: _RowStructure | None = None
        self._chunks: dict[int, tuple[_StackBuffers, list[int]]] = {}  # width -> (filling buffers, index per slot)
        self._free: dict[int, list[_StackBuffers]] = {}  # width -> buffers of measured chunks (background only)
        self._measuring: list[tuple[Future, int, list[int], _StackBuffers]] = []  # (parts, width, indices, buffers)
        self._parts: dict[int, tuple[int, _LayerPart]] = {}  # index -> (width, its summary)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="graphnorm-probe") if background else None
        # Buffers from earlier streams over rows of the same size, and for later ones (MB-sized fresh tensors cost
        # their page faults again each time); also the edge structure of the last rows (_row_structure_of).
        self._pool = {} if buffer_pool is None else buffer_pool
        self._expected_layers = expected_layers
        self._added = 0

    def add(self, index: int, x: Tensor) -> None:
        """Measure layer ``index`` (0-based position) with output ``x`` [n, d]; a later call for the same index
        replaces it. ``ValueError`` / ``TypeError`` as :func:`collapse_records` for invalid ``x`` (a shape error at
        once; with ``background``, NaN / Inf and extreme values when the layer's chunk is measured: from a later
        ``add`` that measures a chunk itself, or from :meth:`records`)."""
        _check_layer(x, None if self._rows is None else self._rows.num_rows, index + 1)
        with single_thread():
            if self._rows is None:
                self._rows = self._row_structure_of(x.size(0))
            width = x.size(1)
            if width not in self._chunks:
                self._chunks[width] = (self._new_buffers(width), [])
            buffers, indices = self._chunks[width]
            if self._executor is None:
                buffers.load(len(indices), x, None)  # validates x before an earlier call's layer is replaced
            else:
                buffers.stage(len(indices), x)  # loaded (and validated) on the thread that measures the chunk
            self._discard(index, width)
            indices.append(index)
            self._added += 1
            # With the second thread, the first and the last layers go to it one at a time: it starts at once, and
            # little is left for it when the records are asked for.
            near_start = self._added < buffers.capacity
            near_end = self._expected_layers is not None and self._added > self._expected_layers - buffers.capacity
            if len(indices) == buffers.capacity or ((near_start or near_end) and self._executor is not None):
                self._measure(width)

    def _row_structure_of(self, n: int) -> _RowStructure:
        """The :class:`_RowStructure` of ``n`` rows and this stream's edges: the pool's when the last stream with this
        pool had the same edges (equal values: a model may pass a new tensor each forward) over as many rows, as when
        a probe measures the same graph again (no edge checks and sorting per call); else built and left in the pool
        with a copy of the edges."""
        edges = self.edge_index
        cached = self._pool.get(_ROWS_KEY)
        if cached is not None and cached[1].num_rows == n and same_values(cached[0], edges):
            return cached[1]
        rows = _row_structure(n, edges, None, None)
        self._pool[_ROWS_KEY] = (None if edges is None else edges.clone(), rows)
        return rows

    def _new_buffers(self, width: int) -> _StackBuffers:
        """Buffers for a chunk of layers of ``width`` (from the pool when it has such buffers)."""
        capacity = _chunk_capacity(self._rows.num_rows, self._rows.num_edges, width)
        pooled = self._pool.get((capacity, self._rows.num_rows, width, self.precision))
        return pooled.pop() if pooled else _StackBuffers(capacity, self._rows.num_rows, width, self.precision)

    def _discard(self, index: int, loading_width: int) -> None:
        """Forget layer ``index`` (measured, or waiting in a chunk: the chunk's later layers, and the layer being
        loaded in the first free slot of the chunk of ``loading_width``, move up a slot)."""
        if any(index in indices for _, _, indices, _ in self._measuring):
            self._collect()
        self._parts.pop(index, None)
        for width, (buffers, indices) in self._chunks.items():
            if index in indices:
                buffers.move_up(indices.index(index), len(indices) + (width == loading_width))
                indices.remove(index)

    def _measure(self, width: int, here: bool = False) -> None:
        """Measure the layers waiting in the chunk of ``width``: on the second thread unless ``here`` or too many
        chunks wait for it already (the chunk's buffers are then swapped for free ones), else here."""
        buffers, indices = self._chunks[width]
        if not indices:
            return
        for entry in [entry for entry in self._measuring if entry[0].done()]:
            self._take(entry)
        if here or self._executor is None or len(self._measuring) >= _QUEUED_CHUNKS:
            parts = _measure_chunk(buffers, len(indices), self._rows, self.cone_tol_deg)
            self._parts.update((index, (width, part)) for index, part in zip(indices, parts))
            indices.clear()
            return
        future = self._executor.submit(_measure_chunk, buffers, len(indices), self._rows, self.cone_tol_deg)
        self._measuring.append((future, width, list(indices), buffers))
        free = self._free.setdefault(width, [])
        self._chunks[width] = (free.pop() if free else self._new_buffers(width), [])

    def _take(self, entry: tuple[Future, int, list[int], _StackBuffers]) -> None:
        """Wait for one chunk being measured, keep its summaries and free its buffers."""
        self._measuring.remove(entry)
        future, width, indices, buffers = entry
        self._free.setdefault(width, []).append(buffers)
        self._parts.update((index, (width, part)) for index, part in zip(indices, future.result()))

    def _collect(self) -> None:
        """Wait for every chunk being measured."""
        while self._measuring:
            self._take(self._measuring[0])

    def records(self) -> list[list[dict]]:
        """Records of every added layer, in index order (the per-layer values of each width batched over layers)."""
        try:
            with single_thread():
                for width in self._chunks:  # the last chunks here, beside the second thread's
                    self._measure(width, here=True)
                self._collect()
        finally:
            self.close()
        for buffers in [buffers for buffers, _ in self._chunks.values()] + sum(self._free.values(), []):
            self._pool.setdefault(buffers.key, []).append(buffers)
        self._chunks.clear()
        self._free.clear()
        widths: dict[int, list[int]] = {}
        for index in sorted(self._parts):
            widths.setdefault(self._parts[index][0], []).append(index)
        results: dict[int, list[dict]] = {}
        with single_thread():
            for group in widths.values():
                group_records = _records_of_parts([self._parts[i][1] for i in group], self.num_singular_values)
                results.update(zip(group, group_records))
        return [results[index] for index in sorted(results)]

    def close(self) -> None:
        """Stop the second thread (after the chunk it is measuring); the stream measures no more layers on it."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
