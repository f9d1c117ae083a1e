"""The probe's fast (batched) path against a slow reference built from the one-matrix metric functions.

The reference applies the definitions of :mod:`graphnorm.analysis.metrics` / :mod:`graphnorm.analysis.cone` to
every layer, row set and graph separately (the aggregation documented in :mod:`graphnorm.analysis.collapse`) and
must give the table ``CollapseProbe(model).probe(data)`` returns: same records in the same order, same values.
Fixed seeded models: DeepGCN on Cora with three norms at 8 and 64 layers, GCNII, and graph-level DeepGCNs on a
fixed ZINC sample (per-graph statistics, pooled rows and virtual-node token rows).

Tolerances: relative 1e-6. Values at the float64 round-off floor get an absolute floor instead: normalized singular
values below ~1e-7 come from Gram eigenvalues at 1e-14 of the largest (round-off in any summation order), and
MAD / mean cosine are 1 - cos, exact only to ~1e-15 absolute. Cone angles are certified within ``cone_tol_deg``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import Tensor
from torch_geometric.utils import remove_self_loops

from graphnorm.analysis import (
    CollapseProbe,
    cone_angle,
    dirichlet_energy,
    effective_rank,
    evaluation_sample,
    mad,
    mean_cosine_similarity,
    singular_values,
    stable_rank,
)
from graphnorm.analysis.collapse import PER_GRAPH_METRICS, POOLED_METRICS, LayerStream, collapse_records_layers
from graphnorm.analysis.cone import robust_cone_angle
from graphnorm.data import load_dataset
from graphnorm.models import GCNII, DeepGCN

TOL_DEG = 1e-3
NUM_SV = 16
SET_METRICS = ("effective_rank", "stable_rank", "mean_cosine", "cone_angle", "cone_angle_q90", "mad")
EDGE_METRICS = ("mad_neighbors", "dirichlet_energy", "dirichlet_energy_normalized")


def _set_reference(x: Tensor, num_sv: int) -> dict[str, float]:
    """Edge-free metrics of one set of rows, by the one-matrix functions."""
    nonzero = x.double().norm(dim=1) > 0
    values = {
        "effective_rank": effective_rank(x),
        "stable_rank": stable_rank(x),
        "mean_cosine": mean_cosine_similarity(x),
        "cone_angle": cone_angle(x, tol_deg=TOL_DEG),
        "cone_angle_q90": robust_cone_angle(x, tol_deg=TOL_DEG) if bool(nonzero.any()) else math.nan,
    }
    values["mad"] = mad(x)
    values["zero_row_fraction"] = 1.0 - float(nonzero.double().mean())
    sigma = singular_values(x, normalize="max")
    for index in range(min(num_sv, sigma.numel())):
        values[f"sv_{index:03d}"] = float(sigma[index])
    return values


def _edge_reference(x: Tensor, edges: Tensor) -> dict[str, float]:
    return {
        "mad_neighbors": mad(x, edges),
        "dirichlet_energy": dirichlet_energy(x, edges),
        "dirichlet_energy_normalized": dirichlet_energy(x, edges, normalized=True),
    }


def _subgraph(edge_index: Tensor, keep: Tensor) -> Tensor:
    index = torch.full((keep.numel(),), -1, dtype=torch.long)
    index[keep] = torch.arange(int(keep.sum()))
    return index[edge_index[:, keep[edge_index[0]] & keep[edge_index[1]]]]


def _layer_reference(x: Tensor, context: dict) -> list[tuple[str, str, str, float]]:
    """(rows, metric, stat, value) of one layer, in the documented table order."""
    batch, token_mask, edge_index = context.get("batch"), context.get("token_mask"), context.get("edge_index")
    records = []
    node = torch.ones(x.size(0), dtype=torch.bool)
    if token_mask is not None and bool(token_mask.any()):
        node = ~token_mask
        for name, value in _set_reference(x[token_mask], NUM_SV).items():
            records.append(("token", name, "value", value))
    if batch is None:
        values = _set_reference(x[node], NUM_SV)
        values.update(_edge_reference(x[node], _subgraph(edge_index, node)))
        order = [name for name in PER_GRAPH_METRICS if name in values] + [k for k in values if k.startswith("sv_")]
        return records + [("node", name, "value", values[name]) for name in order]
    per_graph: dict[str, list[float]] = {name: [] for name in PER_GRAPH_METRICS}
    for graph in range(int(batch.max()) + 1):
        keep = node & (batch == graph)
        if not bool(keep.any()):
            continue
        values = _set_reference(x[keep], 0)
        values.update(_edge_reference(x[keep], _subgraph(edge_index, keep)))
        for name in PER_GRAPH_METRICS:
            per_graph[name].append(values[name])
    for name in PER_GRAPH_METRICS:
        finite = np.array([v for v in per_graph[name] if not math.isnan(v)])
        mean = float(finite.mean()) if finite.size else math.nan
        std = float(finite.std()) if finite.size else math.nan
        records += [("node", name, "mean", mean), ("node", name, "std", std)]
    pooled = _set_reference(x[node], NUM_SV)
    records += [
        ("node", name, "pooled", value)
        for name, value in pooled.items()
        if name in POOLED_METRICS or name.startswith("sv_")
    ]
    return records


def _absolute_floor(metric: str, stat: str) -> float:
    if metric.startswith("sv_"):
        return 1e-7
    if metric in ("mad", "mean_cosine", "mad_neighbors"):
        return 1e-12 if stat != "std" else 1e-9
    if metric.startswith("cone_angle"):
        return 1e-6
    return 1e-12 if stat != "std" else 1e-9


def _model_rows(model: torch.nn.Module, data) -> dict[str, Tensor | None]:
    """The rows of every probed layer as the model lays them out (not as the probe infers them): DeepGCN's
    ``graph_rows`` (virtual-node rows included), GCNII's node rows (graph-level models pool a one-graph batch)."""
    batch = getattr(data, "batch", None)
    if isinstance(model, DeepGCN):
        if model.readout is not None and batch is None:
            batch = data.edge_index.new_zeros(data.num_nodes)
        rows = model.graph_rows(data.edge_index, data.num_nodes, batch, data.num_graphs if batch is not None else None)
        return {"batch": rows.batch, "token_mask": rows.token_mask, "edge_index": rows.edge_index}
    assert isinstance(model, GCNII) and model.readout is None
    return {"batch": batch, "token_mask": None, "edge_index": remove_self_loops(data.edge_index)[0]}


def _same_rows(first: dict, second: dict) -> bool:
    return all(
        (first[key] is None and second[key] is None) or torch.equal(first[key], second[key])
        for key in ("batch", "token_mask", "edge_index")
    )


def _assert_table_equals_reference(model: torch.nn.Module, data) -> None:
    probe = CollapseProbe(model, num_singular_values=NUM_SV, cone_tol_deg=TOL_DEG)
    table = probe.probe(data)
    outputs = probe.capture(data)
    context = _model_rows(model, data)
    assert all(_same_rows(measured, context) for measured in probe.last_contexts)
    expected = []
    for position, ((name, _), x) in enumerate(zip(probe.layers, outputs), start=1):
        expected += [(position, name, *record) for record in _layer_reference(x, context)]
    reference = pd.DataFrame(expected, columns=["layer", "layer_name", "rows", "metric", "stat", "value"])
    keys = ["layer", "layer_name", "rows", "metric", "stat"]
    pd.testing.assert_frame_equal(table[keys].reset_index(drop=True), reference[keys])
    for got, row in zip(table.value.tolist(), reference.itertuples()):
        floor = _absolute_floor(row.metric, row.stat)
        assert got == pytest.approx(row.value, rel=1e-6, abs=floor, nan_ok=True), (row.layer, row.metric, row.stat)


@pytest.fixture(scope="module")
def cora(data_root, one_thread):
    return load_dataset("cora", root=data_root)


@pytest.fixture(scope="module")
def zinc_sample(data_root, one_thread):
    return evaluation_sample(load_dataset("zinc", root=data_root).val, num_graphs=24, seed=0)


@pytest.mark.parametrize("depth", [8, 64])
@pytest.mark.parametrize("norm", ["none", "pairnorm", "batchnorm"])
def test_probe_deep_gcn_on_cora_equals_reference(cora, norm, depth):
    torch.manual_seed(0)
    model = DeepGCN(cora.num_features, 64, cora.num_outputs, depth, norm=norm)
    _assert_table_equals_reference(model, cora.data)


def test_probe_gcnii_on_cora_equals_reference(cora):
    torch.manual_seed(0)
    _assert_table_equals_reference(GCNII(cora.num_features, 64, cora.num_outputs, 16), cora.data)


@pytest.mark.parametrize(
    ("norm", "virtual_node", "depth"), [("layernorm", True, 6), ("pairnorm", False, 4), ("none", True, 12)]
)
def test_probe_graph_level_zinc_equals_reference(zinc_sample, norm, virtual_node, depth):
    """Per-graph mean / std, pooled rows and (with a virtual node) token rows on 24 fixed ZINC graphs."""
    torch.manual_seed(0)
    model = DeepGCN(
        28, 32, 1, depth, norm=norm, readout="mean", virtual_node=virtual_node, atom_encoder="zinc", dropout=0.0
    )
    _assert_table_equals_reference(model, zinc_sample)


def test_layer_stream_equals_collapse_records_layers():
    """The probe's per-hook path gives the records of the list path: layers of two widths added out of order, a
    layer added twice (the last call counts), zero rows, a directed edge list; invalid layers rejected."""
    generator = torch.Generator().manual_seed(3)
    edge_index = torch.randint(0, 90, (2, 300), generator=generator)
    xs = [torch.randn(90, 16, generator=generator) for _ in range(4)] + [torch.randn(90, 5, generator=generator)]
    xs[1][::4] = 0.0
    xs[2] = xs[2][:, :1].repeat(1, 16) + 1e-9 * xs[2]  # collapsed: cone of a few 1e-7 degrees
    stream = LayerStream(edge_index, num_singular_values=4, cone_tol_deg=TOL_DEG)
    stream.add(3, torch.zeros(90, 16))
    for index in (4, 0, 3, 2, 1):
        stream.add(index, xs[index])
    expected = collapse_records_layers(xs, edge_index=edge_index, num_singular_values=4, cone_tol_deg=TOL_DEG)
    got = stream.records()
    assert [[(r["rows"], r["metric"], r["stat"]) for r in layer] for layer in got] == [
        [(r["rows"], r["metric"], r["stat"]) for r in layer] for layer in expected
    ]
    for layer_got, layer_expected in zip(got, expected):
        for record, reference in zip(layer_got, layer_expected):
            assert record["value"] == pytest.approx(reference["value"], rel=1e-12, abs=1e-15, nan_ok=True), record
    with pytest.raises(ValueError, match="same 90 rows"):
        stream.add(5, torch.randn(80, 16))
    bad = torch.randn(90, 16)
    bad[3, 2] = math.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        stream.add(5, bad)
