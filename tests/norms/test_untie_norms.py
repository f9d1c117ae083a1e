"""graphnorm's norms in other models: :func:`untie_norms` names a wrong argument and warns when its copies come after
a backward (an optimizer built before holds the old parameters only), and a norm given to PyG's models by name is
PyG's, while the documented spelling, a built module, is graphnorm's."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.nn.models import GCN
from torch_geometric.nn.norm import PairNorm as PyGPairNorm

from graphnorm.norms import UntiedAfterBackwardWarning, build_norm, pass_edge_index, untie_norms

DOCS = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "pyg-models.md"


class SharedNorm(nn.Module):
    """One LayerNorm instance at two positions."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.first = build_norm("layernorm", 4)
        self.second = self.first

    def forward(self, x: Tensor) -> Tensor:
        return self.second(self.lin(self.first(x)))


@pytest.mark.parametrize("model", [5, "model", None, [nn.Linear(2, 2)], nn.Linear])
def test_untie_norms_names_what_it_expects(model: object) -> None:
    with pytest.raises(TypeError, match=r"^untie_norms: model must be a torch\.nn\.Module \(.*\), got \w+$"):
        untie_norms(model)


def test_untie_norms_before_the_optimizer_copies_quietly() -> None:
    model = SharedNorm()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert untie_norms(model) == ["second"]
    assert model.first is not model.second
    torch.testing.assert_close(model.second.state_dict(), model.first.state_dict())


def test_untie_norms_after_a_backward_warns_that_an_earlier_optimizer_misses_the_copies() -> None:
    model = SharedNorm()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the shared instance's own warning
        model(torch.randn(3, 4)).sum().backward()
    with pytest.warns(UntiedAfterBackwardWarning, match=r"untie_norms: .*'second'.*optimizer") as record:
        assert untie_norms(model) == ["second"]
    assert len(record) == 1 and "\n" not in str(record[0].message)
    # what the warning is about: the copy's parameters are not among the optimizer's
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert not any(id(p) in held for p in model.second.parameters())
    # nothing to copy, nothing to warn about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert untie_norms(model) == []


def test_pass_edge_index_after_a_backward_warns_too() -> None:
    model = SharedNorm()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(torch.randn(3, 4)).sum().backward()
    with pytest.warns(UntiedAfterBackwardWarning):
        pass_edge_index(model)


def test_a_norm_name_in_pyg_gcn_is_pygs_and_the_documented_module_is_graphnorms() -> None:
    by_name = GCN(6, 16, num_layers=3, out_channels=2, norm="pairnorm")
    assert all(isinstance(norm, PyGPairNorm) for norm in by_name.norms[:-1])
    documented = re.search(r'norm=build_norm\("pairnorm", 64\)', DOCS.read_text())
    assert documented, "docs/how-to/pyg-models.md gives the spelling for graphnorm's PairNorm"
    graphnorm_pairnorm = type(build_norm("pairnorm", 16))
    model = GCN(6, 16, num_layers=3, out_channels=2, norm=build_norm("pairnorm", 16))
    hidden_norms = list(model.norms[:-1])  # the last position is PyG's Identity (no jumping knowledge)
    assert len(hidden_norms) == 2 and all(type(norm) is graphnorm_pairnorm for norm in hidden_norms)
    assert hidden_norms[0] is not hidden_norms[1]
    out = model(torch.randn(10, 6), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]))
    assert out.shape == (10, 2)
