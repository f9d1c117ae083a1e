"""graphnorm.checks: one argument order and one error type per kind of mistake."""

from __future__ import annotations

import math

import pytest
import torch

from graphnorm.checks import check_choice, check_edge_index, check_positive


def test_a_valid_edge_index_passes() -> None:
    check_edge_index(torch.tensor([[0, 1], [1, 2]]), 3)
    check_edge_index(torch.tensor([[0, 1], [1, 2]], dtype=torch.int32), 3, batch=torch.zeros(3, dtype=torch.long))
    check_edge_index(torch.tensor([[0, 1], [1, 2]], dtype=torch.int16), 3)  # any integer dtype
    check_edge_index(torch.empty(2, 0, dtype=torch.long), 0)


@pytest.mark.parametrize(
    ("edge_index", "error", "message"),
    [
        ([[0, 1], [1, 2]], TypeError, "edge_index must be a torch.Tensor, got list"),
        (torch.tensor([[0.0, 1.0], [1.0, 2.0]]), TypeError, "edge_index must be an integer tensor, got torch.float32"),
        (torch.tensor([[True], [False]]), TypeError, "edge_index must be an integer tensor, got torch.bool"),
        (torch.tensor([0, 1, 2]), ValueError, r"edge_index must have shape \[2, num_edges\], got \(3,\)"),
        (
            torch.tensor([[0, 3], [1, 2]]),
            ValueError,
            r"edge_index holds node ids in \[0, 3\], outside \[0, 3\) for a graph of 3 nodes",
        ),
        (torch.tensor([[0, -1], [1, 2]]), ValueError, r"edge_index holds node ids in \[-1, 2\], outside \[0, 3\)"),
    ],
)
def test_a_bad_edge_index_names_the_mistake(edge_index, error, message) -> None:
    with pytest.raises(error, match=f"^where: {message}"):
        check_edge_index(edge_index, 3, where="where")


def test_a_batch_of_the_wrong_length_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^batch must have shape \[num_nodes\] = \[3\], got \(2,\)"):
        check_edge_index(torch.tensor([[0], [1]]), 3, batch=torch.zeros(2, dtype=torch.long))


def test_check_choice_returns_the_value_or_lists_the_choices() -> None:
    assert check_choice("row", ("sym", "row"), "adjacency") == "row"
    assert check_choice(None, (None, "mean"), "readout") is None
    with pytest.raises(ValueError, match=r"^gcn: adjacency must be one of 'sym', 'row'; got 'col'$"):
        check_choice("col", ("sym", "row"), "adjacency", where="gcn")


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan, True, "1"])
def test_check_positive_refuses_what_is_not_a_finite_positive_number(value) -> None:
    with pytest.raises(ValueError, match="^pairnorm: scale must be a finite number > 0"):
        check_positive(value, "scale", where="pairnorm")


def test_check_positive_returns_a_float() -> None:
    assert check_positive(2, "eps") == 2.0 and isinstance(check_positive(2, "eps"), float)
