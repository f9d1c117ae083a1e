"""The one number format and the one Markdown table writer (graphnorm.sweep.formatting)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from graphnorm.sweep.formatting import format_mean_std, format_number, markdown_table


def test_mean_std_has_significant_digits_and_the_std_to_the_means_decimals():
    assert format_mean_std(0.805, 0.00707, 2) == "0.805 ± 0.007"
    assert format_mean_std(85.24, 1.234, 3) == "85.2 ± 1.2"
    assert format_mean_std(1234.5, 12.3, 3) == "1234 ± 12"  # a whole number keeps its digits, the std none
    assert format_mean_std(0.0412, 0.0013, 3) == "0.0412 ± 0.0013"
    assert format_mean_std(1.2e-4, 3e-5, 3) == "1.20e-04 ± 3.00e-05"  # a mean in scientific notation: the std too
    assert format_mean_std(0.805, 0.00707, 2, digits=4) == "0.8050 ± 0.0071"


def test_mean_std_of_one_seed_is_the_mean_alone():
    assert format_mean_std(0.8, float("nan"), 1) == "0.800"  # pandas' sample std of one value is NaN
    assert format_mean_std(0.8, 0.0, 1) == "0.800"  # count 1: no spread, whatever std says
    assert format_mean_std(0.8) == "0.800"


def test_mean_std_names_its_count_only_where_it_differs_from_the_usual_one():
    assert format_mean_std(0.805, 0.00707, 2, usual=2) == "0.805 ± 0.007"
    assert format_mean_std(0.8, float("nan"), 1, usual=2) == "0.800 (n=1)"
    assert format_mean_std(0.805, 0.00707, 3, usual=2) == "0.805 ± 0.007 (n=3)"


@pytest.mark.parametrize("mean", [None, float("nan"), pd.NA])
def test_mean_std_without_a_mean_is_an_empty_cell(mean):
    assert format_mean_std(mean, 0.1, 2) == ""
    assert format_mean_std(0.5, 0.1, 0) == ""  # no runs


def test_numbers_in_cells():
    assert [format_number(v) for v in (0.123456, 1234.5, 7, True, False, None, math.nan, "a")] == [
        "0.123",
        "1234",
        "7",
        "yes",
        "no",
        "-",
        "-",
        "a",
    ]
    assert format_number(None, missing="") == ""


def test_table_of_dict_rows():
    table = markdown_table([{"a": 1, "b": 0.123456}, {"a": 2, "b": None}])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.123 |", "| 2 | - |"]
    assert table.endswith("|\n")
    assert markdown_table([]) == ""


def test_table_of_a_frame_writes_its_index_first():
    frame = pd.DataFrame({2: ["0.1 ± 0.0", None], 4: ["", math.nan]}, index=pd.Index(["a", "b"], name="norm"))
    assert markdown_table(frame).splitlines() == [
        "| norm | 2 | 4 |",
        "|---|---|---|",
        "| a | 0.1 ± 0.0 |  |",  # an empty string stays empty
        "| b | - | - |",  # None and NaN: the missing mark
    ]
    assert markdown_table(frame, index=False, missing="").splitlines()[2:] == ["| 0.1 ± 0.0 |  |", "|  |  |"]
    two_keys = frame.set_index(pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["norm", "depth"]))
    assert markdown_table(two_keys).splitlines()[0] == "| norm | depth | 2 | 4 |"
    assert markdown_table(two_keys).splitlines()[3] == "| b | 2 | - | - |"


def test_table_alignment():
    rows = [{"name": "x", "value": 1.5, "ok": True}]
    assert markdown_table(rows, align="right").splitlines()[1] == "|---:|---:|---:|"
    assert markdown_table(rows, align={"value": "right", "name": "center"}).splitlines()[1] == "|:---:|---:|---|"
    assert markdown_table(rows, align="left").splitlines()[1] == "|:---|:---|:---|"
    with pytest.raises(ValueError, match="unknown alignment"):
        markdown_table(rows, align="middle")


def test_table_cells_are_escaped():
    rows = [{"name | `x`": "a | b", "html": "<script>", "code": "`x` **y**"}]
    data = markdown_table(rows).splitlines()
    assert data[0] == "| name \\| \\`x\\` | html | code |"
    assert data[2] == "| a \\| b | &lt;script> | \\`x\\` **y** |"  # data shown as written: no tag, no code span
    prose = markdown_table(rows, prose=True).splitlines()
    assert "`x` **y**" in prose[2] and "a \\| b" in prose[2]  # Markdown written by people keeps its code and bold
