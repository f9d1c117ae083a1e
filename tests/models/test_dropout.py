"""fast_dropout: F.dropout's distribution from a third of the random draws (graphnorm.models.dropout)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from graphnorm.models.dropout import FastDropout, fast_dropout, keep_mask


def test_keep_probability_and_independence_of_neighbouring_entries() -> None:
    torch.manual_seed(0)
    n, drop_levels = 3_000_000, 6554  # p = 0.1 rounded to 2^-16
    keep = keep_mask((n,), drop_levels).double()
    q = 1 - drop_levels / 65536
    sd = math.sqrt(q * (1 - q) / n)
    assert abs(keep.mean().item() - q) < 5 * sd
    # entries 3k, 3k+1, 3k+2 share one 64-bit draw; entry 3k+3 starts the next: all pairs independent
    for offset in range(3):
        pairs = keep[offset : n - 3 : 3] * keep[offset + 1 : n - 2 : 3]
        assert abs(pairs.mean().item() - q * q) < 5 * math.sqrt(q * q * (1 - q * q) / pairs.numel())
    for p in (0.3, 0.5, 0.9):
        levels = round(p * 65536)
        frac = keep_mask((200_000,), levels).double().mean().item()
        assert abs(frac - (1 - levels / 65536)) < 5 * math.sqrt(p * (1 - p) / 200_000)


def test_same_distribution_as_f_dropout_unbiased_and_its_gradient_is_the_mask() -> None:
    torch.manual_seed(1)
    x = torch.rand(400, 500, dtype=torch.float64) + 0.5
    x.requires_grad_(True)
    y = fast_dropout(x, 0.25)
    kept = y != 0
    scale = 65536 / (65536 - 16384)  # p = 0.25 exactly representable
    torch.testing.assert_close(y[kept], x[kept] * scale)
    reference = F.dropout(x, 0.25, True)
    assert abs(kept.double().mean().item() - (reference != 0).double().mean().item()) < 0.01
    assert abs((y / x).mean().item() - 1.0) < 0.01  # E[y] = x
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.double() * scale)


def test_seeded_and_generator_draws_repeat() -> None:
    x = torch.ones(1000, 7)
    torch.manual_seed(3)
    first = fast_dropout(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(first, fast_dropout(x, 0.5))
    generated = [fast_dropout(x, 0.5, generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(*generated) and not torch.equal(generated[0], first)


def test_edge_probabilities_eval_mode_and_bad_values() -> None:
    x = torch.randn(50, 3)
    assert fast_dropout(x, 0.0) is x and fast_dropout(x, 0.7, training=False) is x
    assert torch.equal(fast_dropout(x, 1.0), torch.zeros_like(x))
    assert fast_dropout(x, 1e-7) is x  # rounds to no drop at all
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        fast_dropout(x, 1.5)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        FastDropout(-0.1)
    module = FastDropout(0.5).eval()
    assert module(x) is x and "p=0.5" in repr(module)
    assert module.train()(torch.ones(10_000)).eq(0).any()


def test_graphormer_draws_every_mask_with_fast_dropout() -> None:
    from graphnorm.models import Graphormer

    model = Graphormer(
        num_layers=2, hidden_channels=16, num_heads=2, ffn_channels=16, out_channels=1,
        atom_feature_dims=[10], bond_feature_dims=[4],
    )  # fmt: skip
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout | FastDropout)]
    assert dropouts and all(isinstance(m, FastDropout) for m in dropouts)
