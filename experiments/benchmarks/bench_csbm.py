"""Benchmark: generating a CSBM graph (``graphnorm.data.csbm``) at 10^4, 10^5 and 10^6 nodes, average degree 10.

Each size runs in a fresh Python process (so one size's memory does not hide another's): it imports the package,
records its resident memory, then generates the graph ``repeats`` times with seed 0 and reports the median wall time
of ``csbm_graph`` (edges, features, split) and of ``load_dataset("csbm")`` (the same plus the statistics, the
reference accuracy and the task checks), the peak resident memory above the memory after the imports
(``getrusage`` max RSS, Linux KiB), the undirected edge count, and whether all repeats gave the same ``edge_index``,
features and labels.

    python -m experiments.benchmarks.bench_csbm [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from graphnorm.sweep.tables import markdown_table

SIZES = (10_000, 100_000, 1_000_000)
DEGREE = 10.0

CHILD = r"""
import hashlib, json, resource, statistics, sys, time
from graphnorm.data import load_dataset
from graphnorm.data.csbm import csbm_graph

nodes, degree, repeats = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
graph_times, load_times, digests = [], [], set()
for _ in range(repeats):
    start = time.perf_counter()
    data = csbm_graph(num_nodes=nodes, average_degree=degree, seed=0)
    graph_times.append(time.perf_counter() - start)
    digest = hashlib.sha256()
    for tensor in (data.edge_index, data.x, data.y):
        digest.update(tensor.numpy().tobytes())
    digests.add(digest.hexdigest())
    del data
    start = time.perf_counter()
    task = load_dataset("csbm", num_nodes=nodes, average_degree=degree, seed=0)
    load_times.append(time.perf_counter() - start)
    edges = task.stats["num_edges"]
    del task
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({
    "nodes": nodes, "undirected edges": edges, "csbm_graph s": statistics.median(graph_times),
    "load_dataset s": statistics.median(load_times), "peak extra MiB": (peak - before) / 1024,
    "identical repeats": len(digests) == 1,
}))
"""


def measure(nodes: int, repeats: int) -> dict:
    """One size in a fresh process: the child's JSON line."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(nodes), str(DEGREE), str(repeats)], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^4 and 10^5 nodes only")
    parser.add_argument("--repeats", type=int, default=3, help="generations per size (median reported)")
    args = parser.parse_args(argv)
    sizes = SIZES[:2] if args.quick else SIZES
    rows = [measure(nodes, args.repeats) for nodes in sizes]
    print(markdown_table(rows), end="")
    return rows


if __name__ == "__main__":
    main()
