"""A staged layer is measured at its own scale: buffers that held a rescaled layer before (a pooled chunk of an
earlier probe, or of the same stream) do not carry that layer's power-of-two shift over to the next one staged in
the same slot."""

from __future__ import annotations

import pytest
import torch

from graphnorm.analysis.collapse import LayerStream, collapse_records


def _energy(records: list[dict]) -> float:
    return next(r["value"] for r in records if r["metric"] == "dirichlet_energy")


@pytest.mark.parametrize("scale", [1e120, 1e-200])
def test_staged_layer_after_a_rescaled_one_keeps_its_energy(scale: float):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(50, 4, generator=generator, dtype=torch.float64)
    edges = torch.randint(0, 50, (2, 100), generator=generator)
    pool: dict = {}
    for layer, expected in ((x * scale, x * scale), (x, x)):  # the second stream reuses the first one's buffers
        stream = LayerStream(edges, background=True, buffer_pool=pool)
        stream.add(0, layer)
        (records,) = stream.records()
        assert _energy(records) == pytest.approx(_energy(collapse_records(expected, edges)), rel=1e-9)
