"""Malformed and extreme inputs to every norm and metric: a named error or the documented value, never a torch crash."""

from __future__ import annotations

import math

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
from graphnorm.norms import available_norms, build_norm

pytestmark = pytest.mark.usefixtures("one_thread")

CHANNELS = 4
VALID_BATCH = torch.tensor([0, 0, 0, 1, 1, 1])
TOKEN_MASK = torch.tensor([True, False, False, True, False, False])
EDGES = torch.tensor([[0, 1, 3, 4], [1, 0, 4, 3]])


def call(norm, x, batch, batch_size=None):
    return norm(x, batch=batch, batch_size=batch_size, edge_index=EDGES, token_mask=TOKEN_MASK)


@pytest.mark.parametrize(
    ("bad_batch", "batch_size", "message"),
    [
        (torch.tensor([0, 0, 0, -1, -1, -1]), None, "negative graph id"),
        (torch.tensor([0, 0, 0, 1, 1, 1]), 1, "batch_size"),
        (torch.tensor([0, 0, 0, 1, 1, 1]), -2, "batch_size"),
        (torch.tensor([0, 0, 0, 1, 1, 1]), 2.0, "batch_size"),
    ],
    ids=["negative-id", "id-beyond-batch_size", "negative-batch_size", "float-batch_size"],
)
@pytest.mark.parametrize("name", available_norms())
def test_out_of_range_graph_ids_are_a_value_error_or_ignored(name, bad_batch, batch_size, message):
    """A norm that uses the graph ids names the problem; one that ignores them gives its usual output."""
    x = torch.randn(6, CHANNELS)
    norm = build_norm(name, CHANNELS).eval()
    try:
        out = call(norm, x, bad_batch, batch_size)
    except ValueError as error:
        assert message in str(error) and name in str(error)
        return
    torch.testing.assert_close(out, call(norm, x, VALID_BATCH), rtol=0, atol=0)


@pytest.mark.parametrize("name", available_norms())
def test_batch_that_is_not_a_tensor_is_a_type_error_naming_batch(name):
    norm = build_norm(name, CHANNELS)
    with pytest.raises(TypeError, match=f"{name}: batch must be a torch.Tensor"):
        call(norm, torch.randn(6, CHANNELS), [0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("name", available_norms())
def test_unsorted_batch_gives_the_output_of_the_sorted_batch(name):
    """Graph ids need not be sorted: permuting the rows (and the graph ids with them) permutes the output."""
    x = torch.randn(6, CHANNELS)
    order = torch.tensor([3, 0, 4, 1, 5, 2])  # interleaves the two graphs
    inverse = torch.argsort(order)
    norm = build_norm(name, CHANNELS).eval()
    sorted_out = call(norm, x, VALID_BATCH)
    out = norm(x[order], batch=VALID_BATCH[order], edge_index=inverse[EDGES], token_mask=TOKEN_MASK[order])
    torch.testing.assert_close(out, sorted_out[order], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", available_norms())
def test_one_node_graph_gives_finite_output_in_train_and_eval(name):
    x = torch.randn(1, CHANNELS)
    for training in (True, False):
        norm = build_norm(name, CHANNELS).train(training)
        out = norm(x, batch=torch.zeros(1, dtype=torch.long), edge_index=EDGES[:, :0], token_mask=torch.tensor([True]))
        assert out.shape == x.shape and torch.isfinite(out).all()


METRICS = {
    "singular_values": singular_values,
    "effective_rank": effective_rank,
    "stable_rank": stable_rank,
    "mean_cosine_similarity": mean_cosine_similarity,
    "cone_angle": cone_angle,
    "mad": mad,
    "mad_neighbors": lambda x: mad(x, EDGES),
    "dirichlet_energy": lambda x: dirichlet_energy(x, EDGES),
    "dirichlet_energy_normalized": lambda x: dirichlet_energy(x, EDGES, normalized=True),
    "collapse_metrics": lambda x: collapse_metrics(x, EDGES),
    "collapse_metrics_batched": lambda x: collapse_metrics(x, EDGES, batch=VALID_BATCH),
}


@pytest.mark.parametrize("metric", METRICS.values(), ids=METRICS.keys())
def test_metrics_reject_zero_columns_like_zero_rows(metric):
    with pytest.raises(ValueError, match="no columns"):
        metric(torch.zeros(6, 0))


# Metrics whose value depends on scale (the Dirichlet energy, which collapse_metrics reports with edges): their
# value itself overflows float64 for such entries. The others are scale-invariant and rescale extreme input.
SCALE_DEPENDENT = ["dirichlet_energy", "collapse_metrics", "collapse_metrics_batched"]


@pytest.mark.parametrize("magnitude", [1e155, 1e300])
@pytest.mark.parametrize("name", SCALE_DEPENDENT)
def test_metrics_reject_float64_entries_whose_squares_overflow(name, magnitude):
    """Before: garbage (energy inf) or a Python OverflowError; now a ValueError."""
    x = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * magnitude
    with pytest.raises(ValueError, match="too large"):
        METRICS[name](x)


@pytest.mark.parametrize("magnitude", [1e155, 1e300])
@pytest.mark.parametrize("name", [name for name in METRICS if name not in SCALE_DEPENDENT])
def test_scale_invariant_metrics_of_float64_entries_whose_squares_overflow(name, magnitude):
    """Before: garbage (cone 90, mean cosine -1/3) or a ValueError; now the unscaled input's value."""
    x = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    value, reference = METRICS[name](x * magnitude), METRICS[name](x)
    if isinstance(value, torch.Tensor):
        torch.testing.assert_close(value, reference)
    else:
        assert value == pytest.approx(reference, rel=1e-9, nan_ok=True)


@pytest.mark.parametrize("metric", METRICS.values(), ids=METRICS.keys())
def test_metrics_of_large_but_safe_entries_equal_those_of_rescaled_input(metric):
    """1e100 is far from overflow: the scale-free metrics agree with the same matrix scaled to 1."""
    x = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    value = metric(x * 2.0**332)  # ~1e100, a power of two: the scaling is exact
    reference = metric(x)
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if not k.startswith("dirichlet_energy") or "normalized" in k}
        reference = {k: reference[k] for k in value}
        assert value == pytest.approx(reference, rel=1e-9, nan_ok=True)
    elif isinstance(value, torch.Tensor):
        torch.testing.assert_close(value, reference)  # normalized by the largest singular value
    elif metric is METRICS["dirichlet_energy"]:
        assert value == pytest.approx(reference * 2.0**664, rel=1e-12) and math.isfinite(value)
    else:
        assert value == pytest.approx(reference, rel=1e-9, nan_ok=True)
