"""Sizes (widths, depths, heads, groups, counts) may be NumPy integers, as sizes read from arrays are; bools and
floats are refused in one line that names the argument. The models keep Python ints (a NumPy size written to a
config or a model file would not read back as an int)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from graphnorm import checks
from graphnorm.models import GCNII, GIN, DeepGAT, DeepGCN, Graphormer
from graphnorm.norms import build_norm

pytestmark = pytest.mark.usefixtures("one_thread")

N = np.int64
EDGE_INDEX = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
# name -> builder(in_channels, hidden_channels, out_channels, num_layers)
MODELS = {
    "gcn": lambda i, h, o, n: DeepGCN(i, h, o, n),
    "gcn-sparse": lambda i, h, o, n: DeepGCN(i, h, o, n, propagation="sparse"),
    "gat": lambda i, h, o, n: DeepGAT(i, h, o, n, num_heads=N(2)),
    "gcnii": lambda i, h, o, n: GCNII(i, h, o, n),
    "gin": lambda i, h, o, n: GIN(i, h, o, n),
}
SIZES = {"in_channels": 5, "hidden_channels": 8, "out_channels": 3, "num_layers": 2}


@pytest.mark.parametrize("name", MODELS)
def test_models_take_numpy_integer_sizes(name: str) -> None:
    model = MODELS[name](*(N(value) for value in SIZES.values())).eval()
    for key, value in SIZES.items():
        assert type(getattr(model, key)) is int and getattr(model, key) == value, key
    out = model(torch.randn(4, 5), EDGE_INDEX)
    assert out.shape == (4, 3)


@pytest.mark.parametrize("bad", [True, 8.0, 2.5, "8", None, np.bool_(True), np.float64(8.0)], ids=repr)
@pytest.mark.parametrize("argument", SIZES)
def test_models_refuse_bool_and_float_sizes_in_one_line(argument: str, bad: object) -> None:
    sizes = {**SIZES, argument: bad}
    with pytest.raises(
        ValueError, match=rf"^{argument}\b.* must be (a positive integer|>= 1), got {re.escape(repr(bad))}"
    ):
        DeepGCN(*sizes.values())


def test_graphormer_and_gat_take_numpy_sizes() -> None:
    model = Graphormer(N(2), N(8), N(2), ffn_channels=N(16), out_channels=N(1), atom_feature_dims=[5], max_degree=N(4))
    assert model.num_layers == 2 and type(model.hidden_channels) is int and type(model.max_degree) is int
    gat = DeepGAT(5, N(8), 3, 2, num_heads=N(4), output_heads=N(1))
    assert type(gat.heads) is int and gat.heads == 4
    with pytest.raises(ValueError, match=r"^num_heads must be a positive integer, got True"):
        DeepGAT(5, 8, 3, 2, num_heads=True)


def test_norm_options_take_numpy_integers() -> None:
    norm = build_norm("diffgroupnorm", 8, groups=N(3))
    assert norm.module.groups == 3
    contranorm = build_norm("contranorm", 8, dense_max_nodes=N(0), random_features=N(16), feature_seed=N(2))
    assert type(contranorm.dense_max_nodes) is int and type(contranorm.random_features) is int
    x = torch.randn(6, 8)
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    out = build_norm("pairnorm", 8)(x, batch=batch, batch_size=N(2))
    assert out.shape == x.shape
    with pytest.raises(ValueError, match=r"groups must be a positive integer, got True"):
        build_norm("diffgroupnorm", 8, groups=True)
    with pytest.raises(ValueError, match=r"batch_size must be .*got 2\.0"):
        build_norm("pairnorm", 8)(x, batch=batch, batch_size=2.0)


def test_check_count_takes_integers_and_names_the_rest() -> None:
    assert checks.check_count(N(3), "width") == 3 and type(checks.check_count(N(3), "width")) is int
    assert checks.check_count(np.int32(0), "seed", minimum=0) == 0
    with pytest.raises(ValueError, match=r"^gcn: width must be a positive integer, got 16\.0 \(write 16\)$"):
        checks.check_count(16.0, "width", "gcn")
    with pytest.raises(ValueError, match=r"^width must be a positive integer, got True \(true/false is not a count\)$"):
        checks.check_count(True, "width")
    with pytest.raises(ValueError, match=r"^nodes must be an integer >= 2, got 1$"):
        checks.check_count(1, "nodes", minimum=2)
    assert checks.check_positive(np.float32(0.5), "eps") == 0.5


def test_csbm_and_the_monitor_take_numpy_integer_counts(tmp_path) -> None:
    from graphnorm.data.csbm import csbm_graph
    from graphnorm.train.monitor import CollapseMonitor

    graph = csbm_graph(num_nodes=N(60), num_classes=N(2), num_features=N(4), seed=N(1))
    assert graph.num_nodes == 60 and graph.x.shape == (60, 4)
    with pytest.raises(ValueError, match=re.escape("csbm: num_nodes must be an integer >= 2, got 60.0 (write 60)")):
        csbm_graph(num_nodes=60.0)
    with pytest.raises(ValueError, match="true/false is not a count"):
        csbm_graph(num_features=True)
    monitor = CollapseMonitor(DeepGCN(4, 8, 2, 2), graph, out_dir=tmp_path / "m", every=N(5))
    assert type(monitor.every) is int and monitor.every == 5
    monitor.close()
    with pytest.raises(ValueError, match="every must be a positive integer"):
        CollapseMonitor(DeepGCN(4, 8, 2, 2), graph, every=2.0)


def test_build_norm_takes_a_numpy_integer_width() -> None:
    norm = build_norm("pairnorm", N(16))
    assert norm(torch.randn(5, 16)).shape == (5, 16)
    with pytest.raises(ValueError, match=re.escape("channels must be a positive integer, got 16.0 (write 16)")):
        build_norm("pairnorm", 16.0)
