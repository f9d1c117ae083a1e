"""Sparse propagation :math:`Y = \\hat A X` for full-batch message passing on large graphs, on the CPU.

:math:`\\hat A` is the matrix PyG's ``GCNConv`` applies with precomputed edge weights: row ``i`` of the product sums
the weighted source rows of the edges whose target is ``i`` (:class:`SparseAdjacency`), so any edge list gives PyG's
numbers up to the order of the sums. The matrix is stored once per graph as CSR (rows = targets), with its transpose
for the backward unless it is symmetric. The product is a numba kernel parallel over rows: each output row gathers
its neighbours' rows and is written once, so there are no scatter conflicts and no ``[E, C]`` message tensor (PyG's
gather/scatter materializes one per layer and pass). The matrix is a constant of the autograd graph: the backward is
one more product, with no gradient for the weights.

The product runs on torch's intra-op thread count of plain threads, each on a range of rows; the kernels are compiled
once and cached beside this file. :func:`auto_propagation`: where a model's ``propagation="auto"`` takes the product.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from graphnorm.edges import csr_from_edges
from graphnorm.numba_kernels import kernel
from graphnorm.threads import shared_pool

KERNEL_DTYPES = (torch.float32, torch.float64)  # others (bfloat16, float16) are multiplied in float32
SERIAL_MULTIPLY_ADDS = 1 << 18  # below this many multiply-adds a product runs on one thread
# "auto" takes the product from this many nodes (all graphs of a batch together): over ten times the largest graph
# or default batch of the registered datasets (Actor's 7,600 nodes), so their runs keep PyG's numbers bit for bit;
# the graphs where an epoch's time and memory matter are far above it (docs/results/benchmarks.md).
AUTO_SPARSE_MIN_NODES = 100_000


@kernel(nogil=True)
def _csr_matmul_rows(
    pointer: np.ndarray, columns: np.ndarray, values: np.ndarray, x: np.ndarray, out: np.ndarray, start: int, stop: int
) -> None:
    """Rows ``start:stop`` of ``out = M x`` for the CSR matrix ``M`` (``pointer`` [n + 1], ``columns`` / ``values``
    [nnz]) and ``x`` [m, C], ``out`` [n, C]. Each output row is summed in ``x``'s dtype in column order, in place in
    ``out`` (in cache). Runs without the GIL, so threads can each take a range of rows."""
    width = x.shape[1]
    for row in range(start, stop):
        target = out[row]
        target[:] = 0
        for entry in range(pointer[row], pointer[row + 1]):
            weight = values[entry]
            source = x[columns[entry]]
            for channel in range(width):
                target[channel] += weight * source[channel]


class CSRMatrix:
    """A sparse ``[num_rows, num_cols]`` matrix in CSR: ``pointer`` [num_rows + 1] int64, ``columns`` [nnz] int32
    (int64 past 2^31 columns), ``values`` [nnz] in the dtype of the weights it was built from."""

    def __init__(self, pointer: np.ndarray, columns: np.ndarray, values: np.ndarray, num_cols: int) -> None:
        self.pointer, self.columns, self.values, self.num_cols = pointer, columns, values, num_cols
        self.num_rows = pointer.size - 1

    @classmethod
    def from_coo(cls, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, shape: tuple[int, int]) -> CSRMatrix:
        """From entries ``(rows[k], cols[k], values[k])``; within a row the columns end up ascending, repeated
        entries in their given order (:func:`graphnorm.edges.csr_from_edges`), so equal matrices get equal arrays."""
        matrix = csr_from_edges(torch.from_numpy(rows), torch.from_numpy(cols), torch.from_numpy(values), shape)
        index_dtype = np.int32 if shape[1] < 2**31 else np.int64
        columns = matrix.col_indices().numpy().astype(index_dtype)
        return cls(matrix.crow_indices().numpy(), columns, matrix.values().numpy(), shape[1])

    def transpose(self) -> CSRMatrix:
        """``M^T`` in CSR (columns ascending within a row)."""
        rows = np.repeat(np.arange(self.num_rows, dtype=np.int64), np.diff(self.pointer))
        return CSRMatrix.from_coo(self.columns.astype(np.int64), rows, self.values, (self.num_cols, self.num_rows))

    def equals(self, other: CSRMatrix) -> bool:
        """The same shape, structure and values, entry by entry (exact)."""
        return (
            self.num_cols == other.num_cols
            and np.array_equal(self.pointer, other.pointer)
            and np.array_equal(self.columns, other.columns)
            and np.array_equal(self.values, other.values)
        )

    def matmul(self, x: Tensor) -> Tensor:
        """``M x`` for a contiguous CPU ``x`` ``[num_cols, C]`` float32 or float64 (not differentiated)."""
        out = torch.empty(self.num_rows, x.size(1), dtype=x.dtype)
        if out.numel():
            # torch's thread count, left set in numba: its OpenMP layer may share torch's runtime, where numba's
            # own count (and its start-up, which sets the runtime's) would change torch's; torch's is put back
            # a small product runs on one thread: waking the others would cost more than it saves
            small = self.values.size * x.size(1) < SERIAL_MULTIPLY_ADDS
            _run_in_row_ranges(self, x.numpy(), out.numpy(), 1 if small else torch.get_num_threads())
        return out


def _run_in_row_ranges(matrix: CSRMatrix, x: np.ndarray, out: np.ndarray, threads: int) -> None:
    """``out = matrix @ x`` over ``threads`` row ranges of about equal numbers of entries, one per thread.

    Plain threads running the GIL-free kernel, not an OpenMP team: a second OpenMP runtime beside torch's would
    leave its threads spinning on the cores torch's next operation needs (both teams busy-wait after a region)."""
    if threads <= 1 or matrix.num_rows < 2:
        _csr_matmul_rows(matrix.pointer, matrix.columns, matrix.values, x, out, 0, matrix.num_rows)
        return
    targets = np.linspace(0, matrix.pointer[-1], threads + 1)
    bounds = np.searchsorted(matrix.pointer, targets).clip(0, matrix.num_rows)
    bounds[0], bounds[-1] = 0, matrix.num_rows
    arguments = (matrix.pointer, matrix.columns, matrix.values, x, out)
    pool = shared_pool(threads - 1)
    futures = [
        pool.submit(_csr_matmul_rows, *arguments, int(start), int(stop))
        for start, stop in zip(bounds[1:-1], bounds[2:])
    ]
    _csr_matmul_rows(*arguments, int(bounds[0]), int(bounds[1]))  # the first range in this thread
    for future in futures:
        future.result()


class SparseAdjacency:
    """:math:`\\hat A` of an edge list with weights, built once per graph: row ``i`` of :math:`Y = \\hat A X` sums
    :math:`w_e \\, x_{s(e)}` over the edges ``e`` whose target is ``i`` (``index[1] == i``; duplicate edges add up),

    .. math::
        y_i = \\sum_{e:\\, t(e) = i} w_e \\, x_{s(e)}, \\qquad \\frac{\\partial L}{\\partial X} = \\hat A^\\top G,

    so any edge list, directed or not, with any weights, gives PyG's numbers up to the order of the sums. Stored as
    CSR (rows = targets, columns sorted within a row) and, unless :math:`\\hat A` is symmetric (an undirected graph
    under the symmetric normalization :math:`D^{-1/2}(A+I)D^{-1/2}`), its transpose as a second CSR for the backward.

    Args:
        index: ``[2, E]`` (source, target) rows, each in ``[0, num_rows)``.
        weight: ``[E]`` float entries of :math:`\\hat A` (``weight[e]`` at row ``index[1, e]``, column
            ``index[0, e]``).
        num_rows: number of rows (nodes) of the graph.

    ``symmetric``: whether :math:`\\hat A = \\hat A^\\top` exactly; then the backward multiplies by :math:`\\hat A`
    itself and no transpose is stored.
    """

    def __init__(self, index: Tensor, weight: Tensor, num_rows: int) -> None:
        if index.dim() != 2 or index.size(0) != 2 or weight.shape != (index.size(1),):
            raise ValueError(f"index must be [2, E] and weight [E], got {tuple(index.shape)} and {tuple(weight.shape)}")
        if not weight.is_floating_point():
            raise ValueError(f"weight must be floating point, got {weight.dtype}")
        source = index[0].detach().cpu().to(torch.int64).numpy()
        target = index[1].detach().cpu().to(torch.int64).numpy()
        if source.size and (min(source.min(), target.min()) < 0 or max(source.max(), target.max()) >= num_rows):
            raise ValueError(f"index has a node outside [0, {num_rows})")
        # float32 / float64 weights as given (PyG's message multiplies them so); others in float32 (no numba type)
        values = weight.detach().cpu()
        values = (values if values.dtype in KERNEL_DTYPES else values.float()).numpy()
        self.num_rows = num_rows
        self.matrix = CSRMatrix.from_coo(target, source, values, (num_rows, num_rows))
        transposed = self.matrix.transpose()
        self.symmetric = transposed.equals(self.matrix)
        self.transposed = self.matrix if self.symmetric else transposed

    def matmul(self, x: Tensor, transpose: bool = False) -> Tensor:
        """``A x`` (or ``A^T x``) for ``x`` ``[num_rows, C]``, not differentiated; rows in a dtype other than
        float32 / float64 are multiplied in float32 and the result cast back."""
        if x.dim() != 2 or x.size(0) != self.num_rows:
            raise ValueError(f"x must be [{self.num_rows}, C], got {tuple(x.shape)}")
        if x.device.type != "cpu":
            raise ValueError(f"sparse propagation runs on the CPU; x is on {x.device} (use the 'pyg' propagation)")
        matrix = self.transposed if transpose else self.matrix
        if x.dtype in KERNEL_DTYPES:
            return matrix.matmul(x.detach().contiguous())
        return matrix.matmul(x.detach().float().contiguous()).to(x.dtype)

    def __call__(self, x: Tensor) -> Tensor:
        """``A x``, differentiable in ``x`` (the backward is ``A^T`` times the gradient)."""
        return _Propagate.apply(x, self)


class _Propagate(torch.autograd.Function):
    """``Y = A X`` with ``A`` a constant :class:`SparseAdjacency`; saves nothing but the matrix."""

    @staticmethod
    def forward(ctx, x, adjacency):  # noqa: ANN001, ANN205 (autograd.Function signature)
        ctx.adjacency = adjacency
        return adjacency.matmul(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        if not ctx.needs_input_grad[0]:
            return None, None
        return ctx.adjacency.matmul(grad_out, transpose=True), None


def auto_propagation(x: Tensor, dtype: torch.dtype) -> str:
    """The path ``propagation="auto"`` takes for node features ``x`` (one row per node) and a model of ``dtype``:
    ``"sparse"`` where the product gives PyG's outputs and gradients up to the order of the float sums, else
    ``"pyg"``. The product needs at least :data:`AUTO_SPARSE_MIN_NODES` nodes (below, PyG's numbers are kept bit for
    bit), CPU tensors, a float32 / float64 model (a half model's products would round otherwise than PyG's: in
    float32, cast once), no autocast (PyG's messages then mix precisions the product does not), and eager mode
    (no tracing or compiling through the numba kernel)."""
    if x.size(0) < AUTO_SPARSE_MIN_NODES or x.device.type != "cpu" or dtype not in KERNEL_DTYPES:
        return "pyg"
    if torch.is_autocast_enabled("cpu") or torch.jit.is_tracing() or torch.jit.is_scripting():
        return "pyg"
    return "pyg" if torch.compiler.is_compiling() else "sparse"
