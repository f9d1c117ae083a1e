"""Cost of the collapse probe on deep PairNorm GCNs on Cora against one forward pass; its growth with rows; its first
call in a fresh process.

    python -m experiments.benchmarks.bench_probe [--quick] [--out DIR]   # the section of the benchmark report
    python -m experiments.benchmarks.bench_probe --ratio [--repeats N]   # one line: probe / forward at 64 layers
    python -m experiments.benchmarks.bench_probe --rows 1e4 1e5 1e6      # metric families vs rows, fitted exponent
    python -m experiments.benchmarks.bench_probe --first-call            # first probe in fresh processes
    python -m experiments.benchmarks.bench_probe --deviations            # vs the same-numbers fixture's probe tables

The baseline is an eval forward of the same model under ``torch.no_grad()``, in interleaved rounds; target: the probe
at most 1.5x the forward at 64 layers. Protocol: ``docs/results/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch_geometric.data import Data

from experiments.benchmarks import _common
from experiments.benchmarks import run_all as common
from experiments.benchmarks.bench_gcn import load_cora, synthetic_graph
from graphnorm.analysis import CollapseProbe, collapse
from graphnorm.analysis.collapse.per_graph import _edge_metrics_of_stack
from graphnorm.analysis.collapse.rows import _row_structure
from graphnorm.analysis.collapse.sets import _grams, _ranks, _singular_values_from
from graphnorm.analysis.collapse.staging import _StackBuffers
from graphnorm.analysis.cone import ROBUST_CONE_LEVEL, stacked_cones
from graphnorm.models.gcn import DeepGCN
from graphnorm.sweep.tables import markdown_table
from graphnorm.threads import single_thread

HIDDEN = 64
NORM = "pairnorm"  # the model the targets are stated for: a 64-layer PairNorm DeepGCN on Cora
TARGET_RATIO = 1.5  # probing every layer of a 64-layer model at most 1.5x one forward pass
ROWS_DEGREE = 10  # --rows: average degree of the random graph
ROWS_WIDTH = 64  # --rows: columns of the random rows


def _model_and_forwards(data: Data, num_layers: int) -> tuple[DeepGCN, Callable[[], None], Callable[[], None]]:
    """The benchmark's PairNorm DeepGCN (seed 0) in eval mode, and its eval/no-grad forward pass with this process's
    torch threads and on one thread (the probe's own forward runs on one thread: graphnorm.threads.single_thread).
    The model is put in eval mode once: a probe restores the mode it found, so neither forward walks the modules to
    set it."""
    torch.manual_seed(0)
    model = DeepGCN(data.num_features, HIDDEN, int(data.y.max()) + 1, num_layers, norm=NORM, dropout=0.5).eval()

    def forward() -> None:
        with torch.no_grad():
            model(data.x, data.edge_index)

    def forward_one_thread() -> None:
        with single_thread():
            forward()

    return model, forward, forward_one_thread


def _measure(data: Data, num_layers: int, repeats: int, min_seconds: float) -> dict:
    """One depth: forward (this run's threads and one thread) and probe in interleaved rounds; the probe / forward
    ratio of every round (min and median), and the probe's own split into forward and metrics time."""
    model, forward, forward_one_thread = _model_and_forwards(data, num_layers)
    probe = CollapseProbe(model)

    split: dict[str, list[float]] = {"forward_s": [], "metrics_s": []}

    def probe_call() -> None:
        probe.probe(data)
        for key in split:
            split[key].append(probe.last_timing[key])

    fns: dict[str, Callable[[], None]] = {
        "forward": forward,
        "forward_1_thread": forward_one_thread,
        "probe": probe_call,
    }
    load_before = os.getloadavg()[0]
    samples = _common.time_interleaved_samples(fns, repeats=repeats, min_seconds=min_seconds)
    load_after = os.getloadavg()[0]
    times = {name: _common.median(values) for name, values in samples.items()}
    ratios = [p / f for p, f in zip(samples["probe"], samples["forward"])]
    ratios_one_thread = [p / f for p, f in zip(samples["probe"], samples["forward_1_thread"])]
    return {
        "model": f"DeepGCN {num_layers} layers, hidden {HIDDEN}",
        "forward (ms)": times["forward"] * 1e3,
        "forward 1 thread (ms)": times["forward_1_thread"] * 1e3,
        "probe (ms)": times["probe"] * 1e3,
        "probe / forward (min)": min(ratios),
        "probe / forward (median)": _common.median(ratios),
        "probe / forward 1 thread (min)": min(ratios_one_thread),
        "probe / forward 1 thread (median)": _common.median(ratios_one_thread),
        "probe: its forward with per-layer metrics (ms)": _common.median(split["forward_s"]) * 1e3,
        "probe: batched rest (ms)": _common.median(split["metrics_s"]) * 1e3,
        "probe peak memory (MB)": _common.megabytes(_common.peak_memory(lambda: probe.probe(data))),
        "forward peak memory (MB)": _common.megabytes(_common.peak_memory(forward_one_thread)),
        "load average (1 min, before / after)": f"{load_before:.2f} / {load_after:.2f}",
        "records": len(probe.probe(data)),
    }


def _part_timers(probe: CollapseProbe, data: Data) -> dict[str, Callable[[], None]]:
    """Each part of the probe's metrics on its captured layers of the model's hidden width (one stack of every such
    layer), as the probe runs them (graphnorm.analysis.collapse's own functions, one thread): float64 copy with row
    norms, unit rows and validation, float64 Gram matrices, edge metrics (Dirichlet energies, neighbour MAD), exact
    and robust cone angles."""
    outputs = [x for x in probe.capture(data) if x.size(1) == HIDDEN]
    rows = _row_structure(outputs[0].size(0), data.edge_index, None, None)
    buffers = _StackBuffers(len(outputs), rows.num_rows, HIDDEN)
    for slot, x in enumerate(outputs):
        buffers.load(slot, x, None)
    stack = buffers.stack(len(outputs))

    def copy() -> None:
        for slot, x in enumerate(outputs):
            buffers.load(slot, x, None)

    def cones() -> None:
        stacked_cones(stack.units.numpy(), stack.norms.numpy(), ROBUST_CONE_LEVEL, probe.cone_tol_deg)

    parts = {
        "copy": copy,
        "Gram": lambda: _grams(stack.x),
        "edges": lambda: _edge_metrics_of_stack(stack, rows),
        "cones": cones,
    }
    return {name: _on_one_thread(fn) for name, fn in parts.items()}


def _on_one_thread(fn: Callable[[], object]) -> Callable[[], None]:
    def call() -> None:
        with single_thread():
            fn()

    return call


def _breakdown(data: Data, num_layers: int, repeats: int) -> dict:
    """The probe's parts as shares of one one-thread forward, interleaved with it and with the whole probe in the same
    rounds (median of each); the probe here measures on its own thread (background=False), so "rest" is what it
    spends beyond its forward and these parts (hooks, small per-layer work, spectra, records)."""
    model, _, forward_one_thread = _model_and_forwards(data, num_layers)
    probe = CollapseProbe(model, background=False)

    fns = {"forward": forward_one_thread, "probe": lambda: probe.probe(data), **_part_timers(probe, data)}
    load_before = os.getloadavg()[0]
    samples = _common.time_interleaved_samples(fns, repeats=repeats, min_seconds=0.0)
    times = {name: _common.median(values) for name, values in samples.items()}
    shares = {name: times[name] / times["forward"] for name in fns if name != "forward"}
    parts = [name for name in shares if name != "probe"]
    row = {"model": f"DeepGCN {num_layers} layers, hidden {HIDDEN}", "forward 1 thread (ms)": times["forward"] * 1e3}
    row.update({f"{name} / forward": shares[name] for name in parts})
    row["rest / forward"] = shares["probe"] - 1.0 - sum(shares[name] for name in parts)
    row["probe / forward"] = shares["probe"]
    row["load average (1 min, before / after)"] = f"{load_before:.2f} / {os.getloadavg()[0]:.2f}"
    return row


def _memory_large_graph(num_nodes: int, num_layers: int) -> dict:
    """Time and peak memory of one probe and one one-thread forward of a DeepGCN on a random graph of ``num_nodes``
    nodes (4 random edges per node, stored both ways; 32 features)."""
    data = synthetic_graph(num_nodes=num_nodes)
    model, _, forward_one_thread = _model_and_forwards(data, num_layers)
    probe = CollapseProbe(model)

    probe.probe(data)  # warm-up
    forward_s, forward_memory = _common.time_and_peak_memory(forward_one_thread)
    probe_s, probe_memory = _common.time_and_peak_memory(lambda: probe.probe(data))
    return {
        "model": f"DeepGCN {num_layers} layers, hidden {HIDDEN}, random graph of {num_nodes} nodes",
        "forward 1 thread (ms)": forward_s * 1e3,
        "probe (ms)": probe_s * 1e3,
        "probe / forward 1 thread (one call)": probe_s / forward_s,
        "probe peak memory (MB)": _common.megabytes(probe_memory),
        "forward peak memory (MB)": _common.megabytes(forward_memory),
        "load average (1 min)": f"{os.getloadavg()[0]:.2f}",
    }


def run(quick: bool = False, out_dir: Path | None = None, repeats: int | None = None) -> common.BenchReport:
    data: Data = synthetic_graph() if quick else load_cora()
    depths = (4,) if quick else (64, 16)
    repeats, min_seconds = _common.round_settings(quick, repeats, default_repeats=(2, 7))
    rows = []
    for num_layers in depths:
        rows.append(_measure(data, num_layers, repeats, min_seconds))
        print(common.format_row(rows[-1]), flush=True)
    breakdown = []
    for num_layers in depths:
        breakdown.append(_breakdown(data, num_layers, repeats))
        print(common.format_row(breakdown[-1]), flush=True)
    large = _memory_large_graph(2_000 if quick else 20_000, 4 if quick else 64)
    print(common.format_row(large), flush=True)
    graph = "random graph" if quick else "Cora"
    setup = (
        f"{graph} ({data.num_nodes} nodes), DeepGCN with {' and '.join(map(str, depths))} layers (norm {NORM}, hidden "
        f"{HIDDEN}); probe = CollapseProbe(model).probe(data) over every layer with the default metrics (each layer "
        "copied in its forward hook and measured a chunk of layers at a time, the rest batched over layers); "
        "baseline = one eval/no-grad forward with this "
        f"run's torch threads ({torch.get_num_threads()}) and on one thread (the probe runs its own forward on one "
        "thread and, with two or more torch threads, measures layers on a second thread beside it: "
        f"CollapseProbe(background=None)); {repeats} interleaved rounds, ratio of each round, min and median. "
        f"Target: probe / forward <= {TARGET_RATIO} at 64 layers, against the one-thread forward. Peak "
        "memory: extra resident memory of one call over the memory before it (_common.peak_memory). Second table: "
        "one probe and one forward on a larger random graph, timed once each, for memory. Third table: the probe's "
        "metrics by part as shares of the one-thread forward (the whole probe without its second thread here), each "
        "part run by itself on the captured layers of width "
        f"{HIDDEN} (one stack), interleaved with the forward and the whole probe; rest = probe - forward - parts. "
        + _common.load_summary()
    )
    # The target is judged against the one-thread forward, the probe's own: a forward with more threads than free
    # cores can be many times slower (benchmark 9, bench_threads), which would make any probe look cheap.
    targets = []
    for row, num_layers in zip(rows, depths):
        ratio = row["probe / forward 1 thread (median)"]
        met = ratio <= TARGET_RATIO if num_layers == 64 else None
        required = f"<= {TARGET_RATIO}" if num_layers == 64 else "reported (no target)"
        targets.append(
            common.Target(f"probe / forward on 1 thread, median ({num_layers} layers)", required, ratio, met)
        )
        targets.append(
            common.Target(
                f"probe / forward, median ({num_layers} layers)", "reported", row["probe / forward (median)"], None
            )
        )
    return common.BenchReport(
        name="probe",
        title="5. Collapse probe vs one forward pass",
        setup=setup,
        tables=[markdown_table(rows), markdown_table([large]), markdown_table(breakdown)],
        targets=targets,
    )


def probe_ratio(num_layers: int = 64, repeats: int = 9) -> dict:
    """Probe / one-thread forward of a ``num_layers`` PairNorm DeepGCN on Cora: ``repeats`` interleaved rounds, the
    ratio of each round, and their median (the one number the target is judged on); beside it the ratio to a forward
    with this process's torch threads (what a user's own timing of ``model(x, edge_index)`` sees)."""
    data = load_cora()
    model, forward, forward_one_thread = _model_and_forwards(data, num_layers)
    probe = CollapseProbe(model)

    alone = CollapseProbe(model, background=False)  # measures in its own hooks: no second thread
    fns = {
        "forward": forward_one_thread,
        "forward, torch threads": forward,
        "probe": lambda: probe.probe(data),
        "probe, no second thread": lambda: alone.probe(data),
    }
    load_before = os.getloadavg()[0]
    samples = _common.time_interleaved_samples(fns, repeats=repeats, min_seconds=0.0)
    ratios = [p / f for p, f in zip(samples["probe"], samples["forward"])]
    ratios_threads = [p / f for p, f in zip(samples["probe"], samples["forward, torch threads"])]
    ratios_alone = [p / f for p, f in zip(samples["probe, no second thread"], samples["forward"])]
    return {
        "layers": num_layers,
        "forward 1 thread (ms, median)": _common.median(samples["forward"]) * 1e3,
        f"forward {torch.get_num_threads()} threads (ms, median)": _common.median(samples["forward, torch threads"])
        * 1e3,
        "probe (ms, median)": _common.median(samples["probe"]) * 1e3,
        "probe / forward (median)": _common.median(ratios),
        "probe / forward (min)": min(ratios),
        "probe / forward with torch threads (median)": _common.median(ratios_threads),
        "probe without second thread / forward (median)": _common.median(ratios_alone),
        "rounds": repeats,
        "load average (1 min, before / after)": f"{load_before:.2f} / {os.getloadavg()[0]:.2f}",
    }


def _random_rows(num_rows: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [num_rows, ROWS_WIDTH] (float32, a shared direction plus noise, so cones are below 90 degrees) and a
    random graph of average degree ROWS_DEGREE (num_rows * ROWS_DEGREE / 2 random pairs, stored both ways)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_rows, ROWS_WIDTH, generator=generator).abs_() + 0.1
    pairs = torch.randint(0, num_rows, (2, num_rows * ROWS_DEGREE // 2), generator=generator)
    return x, torch.cat([pairs, pairs.flip(0)], dim=1)


def _row_families(x: torch.Tensor, edge_index: torch.Tensor) -> dict[str, Callable[[], object]]:
    """Each metric family of the probe on one layer of rows, as the probe runs it (collapse's own functions, one
    thread): the float64 rows with norms and unit rows; the spectrum (Gram matrix and eigvalsh: effective rank,
    stable rank, sv_*); the exact and robust cones (with the mean cosine and all-pairs MAD from the unit-row sum);
    the edge metrics (Dirichlet energies, neighbour MAD); and the whole collapse_records call (with the edge
    structure built from edge_index)."""
    rows = _row_structure(x.size(0), edge_index, None, None)
    buffers = _StackBuffers(1, x.size(0), x.size(1))
    buffers.load(0, x, None)
    stack = buffers.stack(1)

    def spectrum() -> None:
        _ranks(_singular_values_from(_grams(stack.x), None))

    parts = {
        "rows (copy, norms, unit rows)": lambda: buffers.load(0, x, None),
        "spectrum (Gram, eigvalsh)": spectrum,
        "cones (exact, q90), mean cosine, MAD": lambda: stacked_cones(
            stack.units.numpy(), stack.norms.numpy(), ROBUST_CONE_LEVEL, 1e-3
        ),
        "edges (Dirichlet, neighbour MAD)": lambda: _edge_metrics_of_stack(stack, rows),
        "collapse_records (all, with edge setup)": lambda: collapse.collapse_records(x, edge_index),
    }
    return {name: _on_one_thread(fn) for name, fn in parts.items()}


def rows_scaling(sizes: list[int], repeats: int = 3) -> list[dict]:
    """Seconds (median of ``repeats`` interleaved rounds) and extra peak memory (one call) of every metric family at
    each row count, and the fitted exponent of time against rows (log-log least squares) per family."""
    table: list[dict] = []
    for num_rows in sizes:
        x, edge_index = _random_rows(num_rows)
        fns = _row_families(x, edge_index)
        times = _common.time_interleaved(fns, repeats=repeats, warmup=1, min_seconds=0.0)
        for name, fn in fns.items():
            peak = _common.megabytes(_common.peak_memory(fn))
            table.append({"rows": num_rows, "family": name, "seconds": times[name], "peak MB": peak})
            print(common.format_row(table[-1]), flush=True)
        del x, edge_index, fns
    for name in dict.fromkeys(row["family"] for row in table):
        mine = [row for row in table if row["family"] == name]
        exponent = _common.loglog_slope([row["rows"] for row in mine], [row["seconds"] for row in mine])
        for row in mine:
            row["exponent"] = exponent
    return table


def first_call_seconds(warm: bool, compile_kernels: bool = False) -> dict:
    """The first probe of a fresh process (a 4-layer PairNorm DeepGCN on a 300-node random graph, so the call is
    mostly the compiled kernels' loading), in a child process; ``warm``: after
    :func:`graphnorm.analysis.collapse.warm_kernels`, as the sweep's workers call it when they start (also timed);
    ``compile_kernels``: with an empty numba cache (``NUMBA_CACHE_DIR`` a fresh folder), as on a first install."""
    code = (
        "import json, time, torch\n"
        "from experiments.benchmarks.bench_gcn import synthetic_graph\n"
        "from graphnorm.analysis import CollapseProbe, collapse\n"
        "from graphnorm.models.gcn import DeepGCN\n"
        "data = synthetic_graph()\n"
        "model = DeepGCN(data.num_features, 16, 4, 4, norm='pairnorm')\n"
        "probe = CollapseProbe(model)\n"
        "start = time.perf_counter()\n"
        f"if {warm}: collapse.warm_kernels()\n"
        "warm_s = time.perf_counter() - start\n"
        "start = time.perf_counter(); probe.probe(data); first = time.perf_counter() - start\n"
        "start = time.perf_counter(); probe.probe(data); second = time.perf_counter() - start\n"
        "print(json.dumps({'warm_kernels_s': warm_s, 'first_s': first, 'second_s': second}))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as cache:
        if compile_kernels:
            env["NUMBA_CACHE_DIR"] = cache
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root)
    if done.returncode != 0:
        raise RuntimeError(f"first-call child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fixture_deviations() -> list[dict]:
    """Largest deviation per metric of today's probe from the float64 probe tables recorded in the same-numbers
    fixture (tests/fixtures/refactor_records.json: seeded tiny Cora, ZINC and MolHIV runs, recomputed in a child
    process capped at AVX2 as the fixture test does): relative for every value but the cone angles (degrees) and the
    normalized spectrum sv_* (absolute), beside the tolerance tests/test_refactor_fixtures.py allows."""
    from graphnorm.data.root import resolve_root
    from tests.test_refactor_fixtures import FIXTURE, probe_value_tolerance, records_capped_at_avx2

    expected = json.loads(FIXTURE.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        got = records_capped_at_avx2(str(resolve_root()), Path(tmp) / "records.json")
    worst: dict[str, dict] = {}
    for name, parts in got.items():
        for record, reference in zip(json.loads(parts["layers"]), json.loads(expected[name]["layers"])):
            value, wanted = record["value"], reference["value"]
            if wanted is None or value is None or wanted != wanted:
                continue
            metric = "sv_*" if record["metric"].startswith("sv_") else record["metric"]
            absolute = metric.startswith("cone_angle") or metric == "sv_*"
            size = abs(value - wanted) if absolute or wanted == 0 else abs(value - wanted) / abs(wanted)
            tolerance = probe_value_tolerance(record["metric"], wanted)
            allowed = tolerance if absolute or wanted == 0 else tolerance / abs(wanted)
            row = worst.setdefault(metric, {"metric": metric, "deviation": 0.0, "allowed": allowed, "values": 0})
            row["values"] += 1
            if size > row["deviation"]:
                row.update(deviation=size, allowed=allowed, run=name)
    return sorted(worst.values(), key=lambda row: row["metric"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--ratio", action="store_true", help="only the probe / forward ratio at 64 layers")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved rounds of --ratio / --rows")
    parser.add_argument("--rows", type=float, nargs="+", default=None, help="row counts of the scaling table")
    parser.add_argument("--first-call", action="store_true", help="first probe in fresh processes, cold and warmed")
    parser.add_argument("--deviations", action="store_true", help="deviations from the same-numbers fixture's probe")
    args = parser.parse_args(argv)
    if args.deviations:
        print(markdown_table(fixture_deviations()), end="")
    if args.ratio:
        print(common.format_row(probe_ratio(repeats=args.repeats)), flush=True)
    if args.rows:
        table = rows_scaling([int(rows) for rows in args.rows], repeats=args.repeats)
        print(markdown_table(table), end="")
    if args.first_call:
        for cache, warm in (("empty", False), ("loaded", False), ("loaded", True)):
            started = time.perf_counter()
            result = first_call_seconds(warm, compile_kernels=cache == "empty")
            row = {"numba cache": cache, "warm_kernels first": warm, **result}
            print(common.format_row({**row, "child wall s": time.perf_counter() - started}), flush=True)
    if not (args.ratio or args.rows or args.first_call or args.deviations):
        print(run(quick=args.quick, out_dir=args.out).to_markdown())


if __name__ == "__main__":
    main()
