"""Which exact ContraNorm kernel computes a graph's ``P x``: the rule as pure functions of the graph sizes, the device
type and its free memory (:func:`choose_contranorm_kernel`, :func:`dense_node_limit`), and the one read of the device
they need (:func:`free_device_memory`).

The dense kernel computes ``n x n`` blocks in a handful of large batched ops; the tiled and streaming kernels never
hold ``n x n`` but loop in Python over 512-row tiles or row blocks. On a CPU the loop costs little beside the products
and the dense blocks' memory traffic costs much, so a fixed node count decides. On a GPU every small product leaves
most of the device idle and costs a launch, so the dense kernel wins wherever its blocks fit: there free device
memory decides, and the streaming kernel (fewer, larger products, no Python threads) takes graphs beyond.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable

import torch

KERNELS = ("dense", "tiled", "streaming")
# Off CUDA, graphs with at most this many nodes go through padded dense blocks [graphs, max_nodes, max_nodes] (a
# handful of batched ops for a whole mini-batch of molecules); larger ones through the tiled or streaming kernels,
# whose per-graph Python loop would dominate for many small graphs. All are exact; the cut only moves time.
DENSE_MAX_NODES = 256
# On CUDA the dense blocks of one call may take this fraction of the free device memory; the rest is left for the
# blocks earlier layers keep for backward, backward's own temporaries and the rest of the model.
DENSE_MEMORY_FRACTION = 0.25
# Forward's peak per similarity entry of the dense kernel: four [n, n] tensors in the compute dtype (logits, masked
# logits, shifted logits, weights) and two boolean masks; per node, a few padded [n, channels] copies.
DENSE_FLOAT_BLOCKS, DENSE_MASK_BYTES, DENSE_FEATURE_COPIES = 4, 2, 4


def dense_bytes(num_nodes: int, channels: int, dtype: torch.dtype) -> int:
    """Peak bytes of the dense kernel's forward for one graph of ``num_nodes`` nodes (half precision in float32)."""
    element = max(dtype.itemsize, 4)
    per_entry = DENSE_FLOAT_BLOCKS * element + DENSE_MASK_BYTES
    return num_nodes * num_nodes * per_entry + num_nodes * channels * element * DENSE_FEATURE_COPIES


def dense_node_limit(
    graph_sizes: Iterable[int],
    channels: int,
    device_type: str,
    free_memory_bytes: int | None,
    dtype: torch.dtype,
    *,
    dense_max_nodes: int | None = None,
    fixed_limit: int = DENSE_MAX_NODES,
) -> int:
    """The largest graph of one call (graphs of ``graph_sizes`` nodes) that takes the dense kernel.

    ``dense_max_nodes`` (the user's) on any device. Else off CUDA, or without a memory reading, ``fixed_limit``. On
    CUDA: ``fixed_limit`` at least (such blocks are smaller than one streaming block), and beyond it the graphs in
    increasing size while their dense forwards (:func:`dense_bytes`) add up to at most ``DENSE_MEMORY_FRACTION`` of
    ``free_memory_bytes``: graphs of one call are computed one after the other, and each keeps its weights for
    backward, so the sum (not the largest) must fit.
    """
    if dense_max_nodes is not None:
        return dense_max_nodes
    if device_type != "cuda" or free_memory_bytes is None:
        return fixed_limit
    budget = DENSE_MEMORY_FRACTION * free_memory_bytes
    limit, used = fixed_limit, 0
    for size, count in sorted(Counter(size for size in graph_sizes if size > fixed_limit).items()):
        used += count * dense_bytes(size, channels, dtype)  # the limit is a node count: all graphs of a size or none
        if used > budget:
            break
        limit = size
    return limit


def large_graph_kernel(device_type: str, tiles_apply: bool | Callable[[], bool]) -> str:
    """The kernel of a graph above the dense limit: ``"streaming"`` on CUDA (a 512-row tile is too small a product
    for a GPU); elsewhere ``"tiled"`` when ``tiles_apply`` (the exclusion mask is symmetric and no weight can
    underflow: :mod:`~graphnorm.norms.ops.contranorm_symmetric_tiles`; a callable is asked only here), else
    ``"streaming"``."""
    if device_type == "cuda":
        return "streaming"
    return "tiled" if (tiles_apply() if callable(tiles_apply) else tiles_apply) else "streaming"


def choose_contranorm_kernel(
    num_nodes: int,
    channels: int,
    device_type: str,
    free_memory_bytes: int | None,
    dtype: torch.dtype,
    *,
    dense_max_nodes: int | None = None,
    fixed_limit: int = DENSE_MAX_NODES,
    tiles_apply: bool | Callable[[], bool] = True,
) -> str:
    """One of :data:`KERNELS` for one graph of ``num_nodes`` nodes: ``"dense"`` up to :func:`dense_node_limit`, else
    :func:`large_graph_kernel`. ``device_type`` as ``torch.device.type``; ``free_memory_bytes`` as
    :func:`free_device_memory` reads it (``None`` off CUDA)."""
    limit = dense_node_limit(
        [num_nodes], channels, device_type, free_memory_bytes, dtype, dense_max_nodes=dense_max_nodes,
        fixed_limit=fixed_limit,
    )  # fmt: skip
    return "dense" if num_nodes <= limit else large_graph_kernel(device_type, tiles_apply)


def free_device_memory(device: torch.device) -> int | None:
    """Bytes a CUDA ``device`` can still give: the driver's free memory and what torch's caching allocator holds
    unused; ``None`` off CUDA."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free) + max(0, int(cached))


def largest_dense_graph(channels: int, free_memory_bytes: int, dtype: torch.dtype) -> int:
    """The most nodes one graph may have to take the dense kernel on CUDA with ``free_memory_bytes`` free (for logs
    and the device check; :func:`dense_node_limit` is the rule)."""
    budget = DENSE_MEMORY_FRACTION * free_memory_bytes
    low, high = 0, max(1, math.isqrt(int(budget)))
    while low < high:  # the largest n with dense_bytes(n) <= budget; dense_bytes grows with n
        middle = (low + high + 1) // 2
        low, high = (middle, high) if dense_bytes(middle, channels, dtype) <= budget else (low, middle - 1)
    return low
