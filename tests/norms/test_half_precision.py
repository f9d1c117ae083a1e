"""float16 / bfloat16 inputs give the float32 answer, for every registered norm and every collapse metric.

Tolerance. A norm computes half-precision input in float32 and rounds only its output, so on the same (already
rounded) input the half output may differ from the float32 output by the rounding of the result, u * |y| with u the
dtype's unit roundoff (eps / 2: 2^-11 = 4.9e-4 for float16, 2^-8 = 3.9e-3 for bfloat16), plus float32 noise. The
test allows ``2 u (|y| + rms(y)) + s`` per entry: twice the rounding, the ``rms`` term for entries near zero, whose
relative error means nothing, and ``s``, the spacing of the dtype's subnormals (float16: 6e-8), for values too small
to hold relative precision at all (e.g. DiffGroupNorm's weight gradients of 1e-7 for inputs of std 0.01).
Before the fix (max error / rms): 3.8 for PairNorm (all zeros), NodeNorm and DetachNorm; 1e-2 (float16) and 6e-2
(bfloat16) for GraphNorm and InstanceNorm; DiffGroupNorm raised; three norms returned float32.
"""

from __future__ import annotations

import copy
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

HALF = [torch.float16, torch.bfloat16]
SIZES = (5, 3, 6)  # three graphs per batch
# (channels, mean offset, std): large magnitudes overflow float16 sums of squares, raw (48 * 100^2 > 65504) and
# centered (48 * 40^2 > 65504); tiny ones are the other end (float16 squares of 1e-2 are subnormal).
INPUT_KINDS = [(48, 100.0, 40.0), (48, 0.0, 40.0), (8, 0.0, 0.01)]

pytestmark = pytest.mark.usefixtures("one_thread")  # many tiny ops: a second thread only adds spinning


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def graph_batch(channels: int, offset: float, std: float, dtype: torch.dtype):
    """Features (already rounded to ``dtype``), batch vector, ring edges per graph, a token row per graph."""
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(sum(SIZES), channels, generator=generator) * std + offset).to(dtype)
    batch = torch.cat([torch.full((n,), g, dtype=torch.long) for g, n in enumerate(SIZES)])
    edges, start = [], 0
    token_mask = torch.zeros(sum(SIZES), dtype=torch.bool)
    for n in SIZES:
        token_mask[start] = True
        nodes = torch.arange(start, start + n)
        ring = torch.stack([nodes, nodes.roll(1)])
        edges += [ring, ring.flip(0)]
        start += n
    return x, batch, torch.cat(edges, dim=1), token_mask


def assert_matches_float32(half: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    assert half.dtype == dtype, f"{what}: returned {half.dtype}, not the input's {dtype}"
    half64, ref64 = half.detach().double(), reference.detach().double()
    assert torch.isfinite(half64).all(), f"{what}: non-finite output"
    rms = ref64.square().mean().sqrt()
    subnormal_spacing = torch.finfo(dtype).tiny * torch.finfo(dtype).eps
    bound = 2 * unit_roundoff(dtype) * (ref64.abs() + rms) + subnormal_spacing
    excess = ((half64 - ref64).abs() / bound).max()
    assert excess <= 1, f"{what}: error {float((half64 - ref64).abs().max() / rms):.2e} x rms exceeds the bound"


def run(norm, x, batch, edge_index, token_mask):
    return norm(x, batch=batch, batch_size=len(SIZES), edge_index=edge_index, token_mask=token_mask)


@pytest.mark.parametrize("module_dtype", ["half", "float32"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", available_norms())
def test_half_input_output_and_gradients_match_float32(name, dtype, module_dtype):
    """A half module (``model.half()``) or a float32 module given half input: the float32 answer, rounded."""
    for channels, offset, std in INPUT_KINDS:
        x, batch, edge_index, token_mask = graph_batch(channels, offset, std, dtype)
        what = f"{name} {module_dtype}-module C={channels} mean={offset} std={std}"
        torch.manual_seed(1)
        reference_norm = build_norm(name, channels).train()
        norm = copy.deepcopy(reference_norm)
        if module_dtype == "half":
            norm = norm.to(dtype)
            reference_norm.load_state_dict({k: v.float() for k, v in norm.state_dict().items()})  # same values
        # train mode, with gradients of the input and the parameters
        x_half = x.clone().requires_grad_(True)
        x_float = x.float().requires_grad_(True)
        out, reference = run(norm, x_half, batch, edge_index, token_mask), run(reference_norm, x_float, *_rest(x))
        assert_matches_float32(out, reference, dtype, f"{what} train")
        upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
        (out * upstream).sum().backward()
        (reference * upstream.float()).sum().backward()
        assert_matches_float32(x_half.grad, x_float.grad, dtype, f"{what} input gradient")
        for (pname, p), (_, p_ref) in zip(norm.named_parameters(), reference_norm.named_parameters()):
            if p_ref.grad is not None and p.dtype == dtype:
                assert_matches_float32(p.grad, p_ref.grad, dtype, f"{what} gradient of {pname}")
        # eval mode, from the same state (the half module's running statistics, cast up for the reference)
        norm.eval(), reference_norm.eval()
        reference_norm.load_state_dict({k: v.to(p.dtype) for (k, v), p in _states(norm, reference_norm)})
        with torch.no_grad():
            out, reference = run(norm, x, batch, edge_index, token_mask), run(reference_norm, x.float(), *_rest(x))
        assert_matches_float32(out, reference, dtype, f"{what} eval")


def _rest(x):
    """The batch, edges and token mask of :func:`graph_batch` (they do not depend on the features)."""
    return graph_batch(1, 0.0, 1.0, torch.float32)[1:]


def _states(norm, reference_norm):
    """(key, value of norm) paired with the reference's tensor of the same key, for dtype-preserving loads."""
    reference_state = reference_norm.state_dict()
    return [((key, value), reference_state[key]) for key, value in norm.state_dict().items()]


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_contranorm_streaming_kernel_in_half_matches_float32(dtype):
    """The row-block kernel (dense_max_nodes=0) too: logits, exp and softmax sums are computed in float32."""
    x, batch, edge_index, token_mask = graph_batch(64, 100.0, 40.0, dtype)
    for exclude_neighbors in (True, False):
        norm = build_norm("contranorm", 64, dense_max_nodes=0, exclude_neighbors=exclude_neighbors, tau=0.05)
        out = run(norm, x, batch, edge_index, token_mask)
        reference = run(norm, x.float(), batch, edge_index, token_mask)
        assert_matches_float32(out, reference, dtype, f"contranorm streaming exclude_neighbors={exclude_neighbors}")


def test_half_batchnorm_stores_updated_running_statistics_in_its_own_dtype():
    x, *_ = graph_batch(16, 100.0, 40.0, torch.float16)
    norm = build_norm("batchnorm", 16).half().train()
    reference = build_norm("batchnorm", 16).train()
    norm(x), reference(x.float())
    running_mean = norm.module.module.running_mean
    assert running_mean.dtype == torch.float16
    torch.testing.assert_close(running_mean.float(), reference.module.module.running_mean, rtol=1e-3, atol=0)
    assert int(norm.module.module.num_batches_tracked) == 1


ROW_METRICS = {
    "singular_values": lambda x: singular_values(x, normalize=None),
    "effective_rank": effective_rank,
    "stable_rank": stable_rank,
    "mean_cosine_similarity": mean_cosine_similarity,
    "cone_angle": cone_angle,
    "mad": mad,
    "mad_neighbors": lambda x: mad(x, RING),
    "dirichlet_energy": lambda x: dirichlet_energy(x, RING),
    "dirichlet_energy_normalized": lambda x: dirichlet_energy(x, RING, normalized=True),
}
RING = torch.stack([torch.arange(14), torch.arange(14).roll(1)])


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize(("offset", "std"), [(100.0, 40.0), (0.0, 40.0), (0.0, 0.01)])
def test_metrics_of_half_input_equal_the_float32_answer(dtype, offset, std):
    """Metrics compute in float64, where half and float32 values are exact: the same numbers (to 1e-12)."""
    x, batch, edge_index, token_mask = graph_batch(16, offset, std, dtype)
    for name, metric in ROW_METRICS.items():
        half_value, float_value = metric(x), metric(x.float())
        if isinstance(half_value, torch.Tensor):
            torch.testing.assert_close(half_value, float_value, rtol=1e-12, atol=0, msg=name)
        else:
            assert half_value == pytest.approx(float_value, rel=1e-12, abs=1e-12), name
    for kwargs in ({}, {"edge_index": edge_index, "batch": batch, "token_mask": token_mask}):
        half_flat, float_flat = collapse_metrics(x, **kwargs), collapse_metrics(x.float(), **kwargs)
        assert half_flat.keys() == float_flat.keys()
        for key, value in half_flat.items():
            assert value == pytest.approx(float_flat[key], rel=1e-12, abs=1e-12, nan_ok=True), key
            assert not math.isinf(value), key


@pytest.mark.parametrize(
    ("input_dtype", "module_dtype"),
    [(torch.float64, torch.float32), (torch.float32, torch.float16), (torch.float32, torch.float64)],
    ids=str,
)
@pytest.mark.parametrize("name", available_norms())
def test_module_of_another_dtype_computes_in_the_input_dtype(name, input_dtype, module_dtype):
    """Parameters and running statistics are cast to the input's dtype: the output is the input-dtype module's.

    Before: BatchNorm, ContraNorm, DiffGroupNorm, LayerNorm and SepNorm raised a dtype RuntimeError for all three
    pairs; GraphNorm, LearnableScaler and RMSNorm returned float64 for float32 input to a float64 module.
    """
    x, batch, edge_index, token_mask = graph_batch(8, 1.0, 3.0, input_dtype)
    torch.manual_seed(1)
    norm = build_norm(name, 8).to(module_dtype).train()
    same_dtype = copy.deepcopy(norm).to(input_dtype)  # the module's values, held in the input's dtype
    out = run(norm, x, batch, edge_index, token_mask)
    assert out.dtype == input_dtype
    torch.testing.assert_close(out, run(same_dtype, x, batch, edge_index, token_mask), rtol=0, atol=0)
    for key, value in norm.state_dict().items():  # running statistics stay in the module's dtype, updated
        assert value.dtype == module_dtype or not value.is_floating_point(), key
        torch.testing.assert_close(value, same_dtype.state_dict()[key].to(value.dtype), rtol=0, atol=0)
