"""The results page cannot lie: a study whose runs.csv is empty, lacks its metric, holds a run twice, has a bad
cell, or cannot be read is an error of one line naming the file (and the cell), never a page; and a fuzz test over
seeded mutations of a small valid study's runs.csv: each mutant builds a page whose numbers equal a direct
computation from the mutant, or fails with one line naming the file."""

from __future__ import annotations

import csv
import importlib.util
import io
import itertools
import json
import math
import random
import re
import shutil
import statistics
from pathlib import Path

import pytest
from test_results_page import BUILD, tiny_sweep_folder

METRIC = "test_acc_last"


def _load_build():
    spec = importlib.util.spec_from_file_location("analysis_build", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def study_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny sweep (2 norms x depths 2, 8 x 2 seeds) collected as study 'tiny', without layer metrics (no
    collapse figure: each build takes a fraction of a second)."""
    root = tmp_path_factory.mktemp("template")
    sweep = tiny_sweep_folder(root / "runs" / "tiny")
    (sweep / "layers.csv").write_text("")
    assert _load_build().main(["--collect", str(sweep), "--study", "tiny", "--data", str(root / "data"),
                               "--out", str(root / "out")]) == 0  # fmt: skip
    return root / "data"


@pytest.fixture
def study(study_template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the valid study's data folder; returns the study's folder."""
    shutil.copytree(study_template, tmp_path / "data")
    return tmp_path / "data" / "tiny"


def _build(study: Path, capsys) -> tuple[int, str, str | None]:
    """Build the page of ``study``'s data folder into a fresh folder: exit code, stderr, the page (None if none)."""
    out = study.parent.parent / "out"
    shutil.rmtree(out, ignore_errors=True)
    capsys.readouterr()
    code = _load_build().main(["--data", str(study.parent), "--out", str(out)])
    page = out / "README.md"
    return code, capsys.readouterr().err, page.read_text() if page.exists() else None


def _assert_one_line_error(result: tuple[int, str, str | None], path: Path, *words: str) -> None:
    code, err, page = result
    assert code == 2 and page is None, (code, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and str(path) in err, err
    for word in words:
        assert word in err, (word, err)


def _rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text())))


def _write_rows(path: Path, rows: list[list[str]]) -> None:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    path.write_text(buffer.getvalue())


def test_header_only_runs_csv_is_an_error(study, capsys):
    runs = study / "runs.csv"
    runs.write_text(runs.read_text().splitlines()[0] + "\n")
    _assert_one_line_error(_build(study, capsys), runs, "no runs", "8 finished")


def test_runs_csv_without_its_metric_column_is_an_error(study, capsys):
    rows = _rows(study / "runs.csv")
    drop = rows[0].index(METRIC)
    _write_rows(study / "runs.csv", [row[:drop] + row[drop + 1 :] for row in rows])
    _assert_one_line_error(_build(study, capsys), study / "runs.csv", METRIC)


@pytest.mark.parametrize("new_id", [False, True], ids=["same-row", "same-settings-new-run-id"])
def test_a_run_twice_is_an_error(study, capsys, new_id):
    rows = _rows(study / "runs.csv")
    copy = list(rows[1])
    if new_id:
        copy[rows[0].index("run_id")] = "none-L2-s0-again"
    _write_rows(study / "runs.csv", [*rows, copy])
    _assert_one_line_error(_build(study, capsys), study / "runs.csv", "twice", "lines 2 and 10")


@pytest.mark.parametrize("value", ["abc", "", "inf", "nan"])
def test_a_bad_metric_cell_names_file_row_and_column(study, capsys, value):
    rows = _rows(study / "runs.csv")
    rows[3][rows[0].index(METRIC)] = value
    _write_rows(study / "runs.csv", rows)
    _assert_one_line_error(_build(study, capsys), study / "runs.csv", "row 3 (line 4)", f"column {METRIC}")


def test_rows_dropped_after_collecting_are_an_error(study, capsys):
    """The page would say "8 of 8 runs finished" over a table of 7."""
    rows = _rows(study / "runs.csv")
    _write_rows(study / "runs.csv", rows[:-1])
    _assert_one_line_error(_build(study, capsys), study / "runs.csv", "holds 7 runs", "8 finished")


def test_a_delimiter_at_the_end_of_every_row_does_not_shift_the_columns(study, capsys):
    """pandas would take the first column as an index and shift every value one column to the left."""
    lines = (study / "runs.csv").read_text().splitlines()
    (study / "runs.csv").write_text("\n".join([lines[0], *(line + ",x" for line in lines[1:])]) + "\n")
    _assert_one_line_error(_build(study, capsys), study / "runs.csv", "well-formed")


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("runs.csv", b"", ["empty"]),
        ("runs.csv", "run_id,norm,dataset\nx,none,cor\xe9\n".encode("latin-1"), ["UTF-8"]),
        ("provenance.json", b"{not json", ["JSON"]),
        ("provenance.json", b"[]", ["JSON object"]),
        ("provenance.json", b'{"command": "x"}', ["runs_ok"]),
        ("layers.csv", "run_id,layer\nx,caf\xe9\n".encode("latin-1"), ["UTF-8"]),
    ],
    ids=["empty-runs", "latin1-runs", "broken-json", "json-list", "provenance-keys", "latin1-layers"],
)
def test_a_file_that_cannot_be_read_is_named(study, capsys, name, content, words):
    (study / name).write_bytes(content)
    _assert_one_line_error(_build(study, capsys), study / name, *words)


def test_a_failed_build_leaves_the_last_page_and_figures(study, capsys):
    out = study.parent.parent / "out"
    assert _load_build().main(["--data", str(study.parent), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in [out / "README.md", *(out / "figures").glob("*.png")]}
    assert len(before) == 2
    (study / "runs.csv").write_text("")
    assert _load_build().main(["--data", str(study.parent), "--out", str(out)]) == 2
    assert {p.name: p.read_bytes() for p in [out / "README.md", *(out / "figures").glob("*.png")]} == before


def test_a_bad_recorded_value_names_the_file_and_line(study, capsys):
    """recorded/measurements.csv: a seeded row's value is averaged over seeds, so it must be a number."""
    recorded = study.parent / "recorded"
    shutil.copytree(BUILD.parent / "data" / "recorded", recorded)
    rows = _rows(recorded / "measurements.csv")
    row = next(i for i, row in enumerate(rows) if i and row[rows[0].index("seed")].isdigit())
    rows[row][rows[0].index("value")] = "n/a"
    _write_rows(recorded / "measurements.csv", rows)
    _assert_one_line_error(_build(study, capsys), recorded / "measurements.csv", f"line {row + 1}", "'n/a'")


def test_collect_refuses_a_sweep_that_would_give_a_false_page(tmp_path, capsys):
    sweep = tiny_sweep_folder(tmp_path / "runs" / "tiny")
    rows = _rows(sweep / "runs.csv")
    _write_rows(sweep / "runs.csv", [rows[0], *(row for row in rows[1:] if "failed" in row)])
    data = tmp_path / "data"
    assert _load_build().main(["--collect", str(sweep), "--study", "tiny", "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert str(sweep / "runs.csv") in err and "no finished" in err and not (data / "tiny").exists()
    _write_rows(sweep / "runs.csv", [row[: rows[0].index(METRIC)] + row[rows[0].index(METRIC) + 1 :] for row in rows])
    assert _load_build().main(["--collect", str(sweep), "--study", "tiny", "--data", str(data)]) == 2
    assert METRIC in capsys.readouterr().err and not (data / "tiny").exists()
    failed_first = [rows[0], rows[-1], *rows[1:-1]]  # the error names the sweep's own line, failed runs counted
    failed_first[4][rows[0].index(METRIC)] = "abc"
    _write_rows(sweep / "runs.csv", failed_first)
    assert _load_build().main(["--collect", str(sweep), "--study", "tiny", "--data", str(data)]) == 2
    assert f"{sweep / 'runs.csv'} row 4 (line 5), column {METRIC}: 'abc'" in capsys.readouterr().err


# --- fuzz: seeded mutations of runs.csv ---------------------------------------------------------------------------

REQUIRED = ("run_id", "norm", "num_layers", "seed", METRIC)
CELL_VALUES = {
    METRIC: ["", "abc", "inf", "-inf", "nan", "NA", "1e999", "0,5", "0.5.1", "8e-1", " 0.5 ", "+0.25", "0.123456"],
    "num_layers": ["", "two", "2.5", "0", "-1", "8.0"],
    "seed": ["", "x", "1.5", "7"],
    "norm": [""],
    "run_id": [""],
    "majority_acc": ["", "x", "inf", "0.3"],
}


def _cell(rng, table):
    column = rng.choice(sorted(CELL_VALUES))
    if column not in table[0] or len(table) < 2:
        return table
    table[rng.randrange(1, len(table))][table[0].index(column)] = rng.choice(CELL_VALUES[column])
    return table


def _metric_value(rng, table):
    if METRIC in table[0] and len(table) > 1:
        table[rng.randrange(1, len(table))][table[0].index(METRIC)] = f"{rng.uniform(0, 1):.6g}"
    return table


def _drop_rows(rng, table):
    for _ in range(rng.randint(1, 3)):
        if len(table) > 1:
            table.pop(rng.randrange(1, len(table)))
    return table


def _drop_column(rng, table):
    index = rng.randrange(len(table[0]))
    return [row[:index] + row[index + 1 :] for row in table]


def _duplicate_row(rng, table, new_id=False):
    if len(table) > 1:
        copy = list(table[rng.randrange(1, len(table))])
        if new_id and "run_id" in table[0]:
            copy[table[0].index("run_id")] += "-again"
        table.insert(rng.randrange(1, len(table) + 1), copy)
    return table


def _duplicate_column(rng, table):
    index = rng.randrange(len(table[0]))
    return [[*row, row[index]] for row in table]


def _shuffle_rows(rng, table):
    body = table[1:]
    rng.shuffle(body)
    return [table[0], *body]


def _shuffle_columns(rng, table):
    order = list(range(len(table[0])))
    rng.shuffle(order)
    return [[row[i] for i in order] for row in table]


def _ragged_row(rng, table):
    if len(table) > 1:
        row = table[rng.randrange(1, len(table))]
        row[:] = row[:-1] if rng.random() < 0.5 else [*row, "extra"]
    return table


TABLE_MUTATIONS = {
    "cell": _cell,
    "metric-value": _metric_value,
    "drop-rows": _drop_rows,
    "drop-column": _drop_column,
    "duplicate-row": _duplicate_row,
    "duplicate-row-new-id": lambda rng, table: _duplicate_row(rng, table, new_id=True),
    "duplicate-column": _duplicate_column,
    "shuffle-rows": _shuffle_rows,
    "shuffle-columns": _shuffle_columns,
    "ragged-row": _ragged_row,
    "header-only": lambda rng, table: table[:1],
}
BYTE_MUTATIONS = {
    "none": lambda rng, data: data,
    "empty": lambda rng, data: b"",
    "newline-only": lambda rng, data: b"\n",
    "latin1-cell": lambda rng, data: data.replace(b"cora", b"cor\xe9", 1),
    "utf16": lambda rng, data: data.decode().encode("utf-16"),
    "bom": lambda rng, data: b"\xef\xbb\xbf" + data,
    "crlf": lambda rng, data: data.replace(b"\n", b"\r\n"),
    "blank-lines": lambda rng, data: data + b"\n\n",
    "truncate": lambda rng, data: data[: rng.randrange(len(data) + 1)],
    "trailing-delimiter": lambda rng, data: b"\n".join(
        line + b"," if i and line else line for i, line in enumerate(data.split(b"\n"))
    ),
}


def mutants(valid: bytes, seed: int = 35, random_cases: int = 60) -> list[tuple[str, bytes]]:
    """Every mutation once, then ``random_cases`` seeded combinations of one or two table mutations and a byte
    mutation: (name, the mutant's bytes)."""
    rng = random.Random(seed)
    table = list(csv.reader(io.StringIO(valid.decode())))

    def serialize(rows):
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        return buffer.getvalue().encode()

    cases = [(name, serialize(m(rng, [list(r) for r in table]))) for name, m in TABLE_MUTATIONS.items()]
    cases += [(name, m(rng, valid)) for name, m in BYTE_MUTATIONS.items()]
    for _ in range(random_cases):
        names = rng.sample(sorted(TABLE_MUTATIONS), rng.randint(1, 2))
        rows = [list(r) for r in table]
        for name in names:
            rows = TABLE_MUTATIONS[name](rng, rows)
        byte = rng.choice(sorted(BYTE_MUTATIONS))
        cases.append(("+".join([*names, byte]), BYTE_MUTATIONS[byte](rng, serialize(rows))))
    return cases


def _number(cell: str, blank_ok: bool = False) -> float | None:
    """A finite number, None for a blank cell when ``blank_ok``; ValueError otherwise."""
    if not cell.strip() and blank_ok:
        return None
    number = float(cell)
    if not math.isfinite(number):
        raise ValueError(cell)
    return number


def expected_page(data: bytes, runs_ok: int) -> dict | None:
    """What a true page shows for this runs.csv, computed without pandas: the finished count, the metric's
    mean ± std (n) per (dataset, norm, depth) and the majority line; None when the table cannot give a true page
    (unreadable, a required column missing or named twice, a cell beyond the header's columns, a bad cell, a run
    twice, or not ``runs_ok`` rows)."""
    try:
        rows = [row for row in csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")) if row]
    except (UnicodeDecodeError, csv.Error):
        return None
    if not rows or len(set(rows[0])) < len(rows[0]) or not set(REQUIRED) <= set(rows[0]):
        return None
    header, body = rows[0], rows[1:]
    if any(any(cell for cell in row[len(header) :]) for row in body) or len(body) != runs_ok:
        return None  # empty cells after the last column: a delimiter at the end of a row, no data
    runs = [dict(zip(header, row + [""] * (len(header) - len(row)))) for row in body]
    try:
        for run in runs:
            if not run["run_id"].strip() or not run["norm"].strip() or not run.get("dataset", "x").strip():
                return None
            depth, seed = _number(run["num_layers"]), _number(run["seed"])
            if depth != int(depth) or depth < 1 or seed != int(seed):
                return None
            run["depth"], run["seed"], run["value"] = int(depth), int(seed), _number(run[METRIC])
            run["majority"] = _number(run.get("majority_acc", ""), blank_ok=True)
    except ValueError:
        return None
    settings = [c for c in header if c in ("dataset", "model", "readout", "norm", "split", "seed", "num_layers")]
    if len({run["run_id"] for run in runs}) < len(runs) or len(
        {tuple(str(run[c]) for c in settings) for run in runs}
    ) < len(runs):
        return None
    cells: dict[tuple[str, str, str], list[float]] = {}
    majority: dict[str, list[float]] = {}
    for run in runs:
        cells.setdefault((run.get("dataset", "data"), run["norm"], str(run["depth"])), []).append(run["value"])
        if run["majority"] is not None:
            majority.setdefault(run.get("dataset", "data"), []).append(run["majority"])
    counts: dict[str, list[int]] = {}
    for (dataset, _, _), values in cells.items():
        counts.setdefault(dataset, []).append(len(values))
    usual = {dataset: max(n for n in found if found.count(n) == max(map(found.count, found))) for dataset, found in
             counts.items()}  # fmt: skip
    return {
        "finished": f"{len(runs)} of {runs_ok} runs finished",
        "cells": {key: _mean_std(values, usual[key[0]]) for key, values in cells.items()},
        "majority": {dataset: f"{statistics.fmean(values):.3f}" for dataset, values in majority.items()},
        "counts": {dataset: str(n) for dataset, n in usual.items()},
    }


def _mean_std(values: list[float], usual: int) -> str:
    """The page's cell: the mean with three significant digits, the std with as many decimals, the count only
    where it differs from the table's usual count (computed here without the page's formatting helpers)."""
    mean = statistics.fmean(values)
    places = max(0, 2 - math.floor(math.log10(float(f"{abs(mean):.3g}")))) if mean else 2
    text = f"{mean:.{places}f}" + (f" ± {statistics.stdev(values):.{places}f}" if len(values) > 1 else "")
    return text + ("" if len(values) == usual else f" (n={len(values)})")


def page_numbers(page: str) -> dict:
    """The same numbers as the page shows them (depths as their column headers)."""
    cells, majority, counts, lines = {}, {}, {}, page.splitlines()
    for start, line in enumerate(lines):
        # A summary table's heading, then its seed count on the line under it (the page's short titles).
        title = re.fullmatch(rf"#### (\S+): {METRIC}", line)
        caption = lines[start + 2] if title and start + 2 < len(lines) else ""
        seeds = re.fullmatch(r"\((?:mean ± std over (\d+) seeds|(1) seed)\)", caption)
        if not (title and seeds):
            continue
        counts[title.group(1)] = seeds.group(1) or seeds.group(2)
        heading = title
        table = list(itertools.takewhile(lambda row: row.startswith("|"), lines[start + 4 :]))
        depths = [c.strip() for c in table[0].strip("|").split("|")[1:]]
        for row in table[2:]:
            norm, *values = (c.strip() for c in row.strip("|").split("|"))
            for depth, value in zip(depths, values):
                if value:
                    cells[(heading.group(1), norm, depth)] = value.removesuffix(" ≤maj")
        after = [*lines[start + 5 + len(table) :], ""]  # the majority note follows the table and a blank line
        note = re.match(r"majority class \(always the most frequent training class\): (\S+);", after[0])
        if note:
            majority[heading.group(1)] = note.group(1)
    finished = re.search(r"(\d+ of \d+ runs finished)", page)
    return {"finished": finished.group(1) if finished else None, "cells": cells, "majority": majority,
            "counts": counts}  # fmt: skip


@pytest.fixture
def two_dataset_study(tmp_path: Path) -> Path:
    """The tiny sweep with its 8-layer runs on a second dataset, collected: two metric tables, one depth each (no
    figure: each valid mutant builds in a fraction of a second)."""
    sweep = tiny_sweep_folder(tmp_path / "runs" / "tiny")
    (sweep / "layers.csv").write_text("")
    rows = _rows(sweep / "runs.csv")
    dataset, depth = rows[0].index("dataset"), rows[0].index("num_layers")
    for row in rows[1:]:
        row[dataset] = "citeseer" if row[depth] == "8" else row[dataset]
    _write_rows(sweep / "runs.csv", rows)
    data = tmp_path / "data"
    assert (
        _load_build().main(
            ["--collect", str(sweep), "--study", "tiny", "--data", str(data), "--out", str(tmp_path / "out")]
        )
        == 0
    )
    return data / "tiny"


def test_mutated_runs_csv_gives_a_true_page_or_a_one_line_error(two_dataset_study, capsys):
    """81 seeded mutants (each of the 21 mutations alone, then 60 random combinations); a page counts as true when
    its finished count, every metric cell and the majority line equal :func:`expected_page` of the mutant, and at
    least 10 mutants (the harmless ones: rows or columns reordered, a BOM, CRLF, another valid number) build one."""
    study = two_dataset_study
    runs = study / "runs.csv"
    valid, runs_ok = runs.read_bytes(), json.loads((study / "provenance.json").read_text())["runs_ok"]
    cases, failures, pages = mutants(valid), [], 0
    for name, data in cases:
        runs.write_bytes(data)
        expected = expected_page(data, runs_ok)
        try:
            code, err, page = _build(study, capsys)
        except Exception as error:  # a traceback for the user
            failures.append(f"{name}: {type(error).__name__}: {error}")
            continue
        if page is not None:
            pages += 1
            try:
                shown = page_numbers(page)
            except (ValueError, IndexError) as error:  # tables this test cannot even read
                shown = f"an unreadable page ({error})"
            if code != 0 or expected is None or shown != expected:
                failures.append(f"{name}: a page that disagrees with the table ({expected} vs {shown})")
        elif code == 0 or err.count("\n") != 1 or str(runs) not in err:
            failures.append(f"{name}: not a one-line error naming {runs}: {err!r}")
    assert len(cases) == 81 and pages >= 10, (len(cases), pages)  # the valid mutants do build
    assert not failures, f"{len(failures)} of {len(cases)} mutants:\n" + "\n".join(failures)
