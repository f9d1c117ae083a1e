"""Meta-device tensors (shapes without values) get one clear line from ContraNorm, GRANOLA and the collapse
metrics, not a torch ``.item()`` error from deep inside; GRANOLA on a meta ``x`` alone infers the output's shape."""

from __future__ import annotations

import pytest
import torch

from graphnorm.analysis import (
    collapse_metrics,
    cone_angle,
    dirichlet_energy,
    effective_rank,
    mad,
    mean_cosine_similarity,
    singular_values,
    stable_rank,
)
from graphnorm.analysis.cone import robust_cone_angle
from graphnorm.norms import build_norm

META_X = torch.empty(6, 4, device="meta")
EDGES = torch.tensor([[0, 1, 3, 4], [1, 0, 4, 3]])
METRICS = {
    "collapse_metrics": collapse_metrics,
    "cone_angle": cone_angle,
    "robust_cone_angle": robust_cone_angle,
    "effective_rank": effective_rank,
    "mean_cosine_similarity": mean_cosine_similarity,
    "singular_values": singular_values,
    "stable_rank": stable_rank,
    "mad": mad,
    "dirichlet_energy": lambda x: dirichlet_energy(x, EDGES),
}


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metrics_name_the_meta_device(name) -> None:
    with pytest.raises(ValueError, match="x is on the meta device"):
        METRICS[name](META_X)


@pytest.mark.parametrize("which", ["x", "batch", "edge_index"])
def test_contranorm_names_the_meta_device(which) -> None:
    inputs = {
        "x": torch.randn(6, 4),
        "batch": torch.tensor([0, 0, 0, 1, 1, 1]),
        "edge_index": EDGES,
    }
    inputs[which] = inputs[which].to("meta")
    norm = build_norm("contranorm", 4)
    if which == "x":
        norm = norm.to("meta")
    with pytest.raises(ValueError, match=f"contranorm: {which} is on the meta device"):
        norm(inputs["x"], batch=inputs["batch"], edge_index=inputs["edge_index"])


@pytest.mark.parametrize("name", ["graphnorm", "instancenorm", "meansubtraction", "pairnorm", "sepnorm"])
def test_per_graph_norms_name_a_meta_batch(name) -> None:
    """Norms that check graph ids name a meta ``batch`` (SepNorm also a meta ``token_mask``) in one line."""
    batch = torch.tensor([0, 0, 0, 1, 1, 1], device="meta")
    token_mask = torch.tensor([True, False, False, True, False, False])
    norm = build_norm(name, 4).to("meta")
    with pytest.raises(ValueError, match=f"{name}: batch is on the meta device"):
        norm(META_X, batch=batch, batch_size=2, edge_index=EDGES, token_mask=token_mask)
    if name == "sepnorm":
        with pytest.raises(ValueError, match="sepnorm: token_mask is on the meta device"):
            norm(META_X, token_mask=token_mask.to("meta"))


def test_granola_infers_shapes_on_meta_and_names_meta_edges() -> None:
    with torch.device("meta"):
        norm = build_norm("granola", 4)
    with pytest.warns(UserWarning, match="without edge_index"):
        out = norm(META_X)
    assert out.shape == (6, 4) and out.device.type == "meta"
    with pytest.raises(ValueError, match="granola: edge_index is on the meta device"):
        norm(META_X, edge_index=EDGES.to("meta"))
