"""Inputs whose size would exhaust the machine are refused, in one line, before anything large is built.

YAML: alias bombs (lists, mappings and merge keys ``<<`` nested many levels, anywhere in a config or a sweep grid),
recursive aliases, deep nesting and oversized documents. Sizes: a CSBM graph, a ContraNorm random-feature estimator
or a model larger than the memory available. Values: an error message quoting a value never expands it in full.

Every case that would allocate without its guard runs in a child process under an address-space limit
(``RLIMIT_AS``) and a timeout, all cases of one family in one child, so that a regression fails the test instead of
eating the machine's memory. The child reports each case's error, time and growth of its peak RSS.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from graphnorm.files import parse_yaml

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
MiB = 1 << 20
SECONDS = 2.0  # each refusal takes well under a second; the margin is for a loaded machine
RSS_GROWTH_MB = 200  # a refusal allocates (almost) nothing


# --- the YAML family -------------------------------------------------------------------------------------------
def laughs(width: int, depth: int) -> list[str]:
    """Anchored flow lists ``&l0 [x, ...]``, ``&l1 [*l0, ...]``, ...: the last one expands to ``width**depth``."""
    levels = [f"&l0 [{', '.join(['x'] * width)}]"]
    for level in range(1, depth):
        levels.append(f"&l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return levels


def mapping_laughs(width: int, depth: int, merge: bool) -> str:
    """Anchored mappings, each level ``width`` references to the one below: as values, or as merge keys ``<<``."""
    lines = [f"l0: &l0 {{{', '.join(f'k{i}: x' for i in range(width))}}}"]
    for level in range(1, depth):
        below = f"*l{level - 1}"
        if merge:
            body = f"<<: [{', '.join([below] * width)}], own{level}: x"
        else:
            body = ", ".join(f"k{i}: {below}" for i in range(width))
        lines.append(f"l{level}: &l{level} {{{body}}}")
    return "\n".join(lines) + "\n"


SHAPES = {"9x9": (9, 9), "10x7": (10, 7), "2x40": (2, 40), "50x4": (50, 4), "400x3": (400, 3)}


def yaml_bombs() -> dict[str, str]:
    """Name -> YAML text of every bomb of the family."""
    bombs = {}
    for shape, (width, depth) in SHAPES.items():
        levels = laughs(width, depth)
        bombs[f"top-level keys {shape}"] = "".join(f"l{i}: {level}\n" for i, level in enumerate(levels))
        bombs[f"config value lr {shape}"] = "lr:\n" + "".join(f"  - {level}\n" for level in levels)
        bombs[f"sweep grid {shape}"] = "grid:\n  seed:\n" + "".join(f"    - {level}\n" for level in levels)
        bombs[f"nested mapping {shape}"] = "base:\n  model_kwargs:\n    x: [" + ", ".join(levels) + "]\n"
        bombs[f"mapping levels {shape}"] = mapping_laughs(width, depth, merge=False)
    for width, depth in ((9, 9), (4, 16), (30, 5)):
        bombs[f"merge keys {width}x{depth}"] = mapping_laughs(width, depth, merge=True)
    bombs["merge keys in a sweep's norm_settings"] = "norm_settings:\n" + "".join(
        "  " + line + "\n" for line in mapping_laughs(9, 9, merge=True).splitlines()
    )
    bombs["recursive list"] = "lr: &a [1, *a]\n"
    bombs["recursive mapping"] = "base: &a {dataset: cora, base: *a}\n"
    bombs["recursive via merge"] = "a: &a {b: {<<: *a}}\n"
    bombs["deep flow nesting"] = "lr: " + "[" * 5000 + "]" * 5000 + "\n"
    bombs["deep block nesting"] = "".join(" " * i + f"k{i}:\n" for i in range(600)) + " " * 600 + "x\n"
    bombs["oversized document"] = "# filler\n" * (200 * 1024) + "lr: 0.01\n"  # 2 MiB of comments
    return bombs


def yaml_case(name: str) -> None:
    """One bomb through :func:`parse_yaml` (the refusal is the expected ``ValueError``)."""
    parse_yaml(yaml_bombs()[name], "bomb.yaml")


# --- sizes -------------------------------------------------------------------------------------------------------
SIZE_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "csbm num_nodes=10**10": ("csbm", {"num_nodes": 10**10}),
    "csbm num_features=10**8": ("csbm", {"num_features": 10**8}),
    "csbm num_nodes=10**8, average_degree=10**5": ("csbm", {"num_nodes": 10**8, "average_degree": 10**5}),
    "csbm num_classes=10**6 (class means)": (
        "csbm",
        {"num_nodes": 3 * 10**6, "num_classes": 10**6, "num_features": 10**6, "average_degree": 1.0},
    ),
    "ContraNorm(64, random_features=10**9)": ("contranorm", {"channels": 64, "random_features": 10**9}),
    "ContraNorm(16, random_features=10**10)": ("contranorm", {"channels": 16, "random_features": 10**10}),
    "ContraNorm(65536, random_features=1)": ("contranorm", {"channels": 65536, "random_features": 1}),
    "use_random_features(10**9)": ("contranorm switched", {"channels": 64, "random_features": 10**9}),
    "orthogonal_gaussian_features(10**9, 64)": ("features", {"num_features": 10**9, "dim": 64}),
    "config num_layers=10000, hidden_channels=65536": ("config", {"num_layers": 10_000, "hidden_channels": 65_536}),
    "config num_layers=64, hidden_channels=65536": ("config", {"num_layers": 64, "hidden_channels": 65_536}),
    "config gat num_heads=10**7, concat false": (
        "config",
        {"model": "gat", "num_heads": 10**7, "model_kwargs": {"concat": False}, "num_layers": 4},
    ),
    "config graphormer ffn_channels=65536, hidden 65536": (
        "config",
        {
            "dataset": "zinc",
            "model": "graphormer",
            "hidden_channels": 65_536,
            "num_heads": 8,
            "model_kwargs": {"ffn_channels": 65_536},
            "optimizer": "adamw",
            "num_layers": 12,
        },
    ),
    "config contranorm random_features=10**9": (
        "config",
        {"norm": "contranorm", "norm_kwargs": {"random_features": 10**9}},
    ),
}


def size_case(name: str) -> None:
    """One oversized request, built as a user would (the refusal is the expected error)."""
    kind, options = SIZE_CASES[name]
    if kind == "csbm":
        from graphnorm.data import load_dataset

        load_dataset("csbm", **options)
    elif kind == "contranorm":
        from graphnorm.norms.contranorm import ContraNorm

        ContraNorm(options["channels"], random_features=options["random_features"])
    elif kind == "contranorm switched":
        from graphnorm.norms.contranorm import ContraNorm

        ContraNorm(options["channels"]).use_random_features(options["random_features"])
    elif kind == "features":
        from graphnorm.norms.ops.contranorm_random_features import orthogonal_gaussian_features

        orthogonal_gaussian_features(options["num_features"], options["dim"], 0)
    else:
        from graphnorm.config import RunConfig

        RunConfig.from_dict(options)


# --- values quoted in messages -----------------------------------------------------------------------------------
def shared_bomb(width: int = 9, depth: int = 10) -> list:
    """A list that is small in memory (each level is ``width`` references to the one below) but expands to
    ``width**depth`` items: what YAML aliases build."""
    value: list = ["x"] * width
    for _ in range(depth - 1):
        value = [value] * width
    return value


VALUE_CASES = {
    "shown(bomb)": None,
    "lr: bomb": {"lr": shared_bomb()},
    "model_kwargs: {x: bomb}": {"model_kwargs": {"x": shared_bomb()}},
    "norm_kwargs.token_kwargs.eps: bomb": {
        "model": "gcn",
        "dataset": "zinc",
        "virtual_node": True,
        "norm": "sepnorm",
        "norm_kwargs": {"token_kwargs": {"eps": shared_bomb()}},
    },
    "sepnorm token_kwargs: {bomb key}": {
        "model": "gcn",
        "dataset": "zinc",
        "virtual_node": True,
        "norm": "sepnorm",
        "norm_kwargs": {"token_kwargs": {"eps": 1e-5, "momentum": shared_bomb(), "affine": True}},
    },
    "dataset_kwargs.path: bomb": {"dataset": "smiles", "dataset_kwargs": {"path": shared_bomb()}},
    "overrides lr=bomb": "overrides",
}


def value_case(name: str) -> None:
    """A config holding a value that expands to billions of items; the message must quote it cut short."""
    from graphnorm.config import RunConfig, apply_overrides, shown

    values = VALUE_CASES[name]
    if values is None:
        text = shown(shared_bomb())
        raise ValueError(text)  # reported as the case's message, checked for its length
    if values == "overrides":
        bomb = "[" + ", ".join(laughs(9, 9)) + "]"
        RunConfig.from_dict(apply_overrides({}, [f"lr={bomb}"]))
    else:
        RunConfig.from_dict(values)


# --- the child process -------------------------------------------------------------------------------------------
CHILD = """
import json, resource, sys, time
sys.path.insert(0, {tests!r})
import test_bounded_inputs as cases
for module in {preload!r}:  # imports are not part of any case's time or memory
    __import__(module)
for name in {names!r}:
    print(json.dumps({{"start": name}}), flush=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        getattr(cases, {function!r})(name)
        outcome = {{"error": None, "message": ""}}
    except BaseException as e:
        outcome = {{
            "error": type(e).__name__, "value_error": isinstance(e, ValueError),
            "memory_error": isinstance(e, MemoryError), "message": str(e)[:4000],
        }}
    outcome.update(
        name=name, seconds=time.perf_counter() - start,
        rss_growth_mb=(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
    )
    print(json.dumps(outcome), flush=True)
"""
START_SECONDS = 120  # a child's imports (torch and PyG on a loaded machine)
CASE_SECONDS = 15  # a case still running after this is recorded as timed out, and its child killed


def limit_memory(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_cases(function: str, names: list[str], limit: int, preload: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """``function(name)`` for each name in a child under ``RLIMIT_AS = limit``, once the ``preload`` modules are
    imported: name -> outcome (error, message, seconds, growth of the peak RSS). A case that runs past
    :data:`CASE_SECONDS` is recorded as timed out and its child killed; the next cases go on in a new child."""
    outcomes: dict[str, dict[str, Any]] = {}
    while len(outcomes) < len(names):
        remaining = [name for name in names if name not in outcomes]
        outcomes.update(run_child(function, remaining, limit, preload))
    return {name: outcomes[name] for name in names}


def run_child(function: str, names: list[str], limit: int, preload: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The outcomes of one child, up to and including the first case that times out or ends it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    code = CHILD.format(tests=str(TESTS), names=names, function=function, preload=list(preload))
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        preexec_fn=lambda: limit_memory(limit),
    )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=forward_lines, args=(child.stdout, lines), daemon=True)
    reader.start()
    outcomes: dict[str, dict[str, Any]] = {}
    running, wait = names[0], START_SECONDS
    try:
        while len(outcomes) < len(names):
            try:
                line = lines.get(timeout=wait)
            except queue.Empty:
                return {**outcomes, running: {"name": running, "error": f"timed out after {wait} s", "message": ""}}
            if line is None:
                child.wait()
                error = f"child ended with status {child.returncode}"
                return {**outcomes, running: {"name": running, "error": error, "message": ""}}
            report = json.loads(line) if line.startswith("{") else {}
            if "start" in report:
                running, wait = report["start"], CASE_SECONDS
            elif "name" in report:
                outcomes[report["name"]] = report
        return outcomes
    finally:
        child.kill()
        child.wait()
        reader.join(timeout=10)
        child.stdout.close()


def forward_lines(stream: Any, lines: queue.Queue) -> None:
    """Each line of ``stream`` into ``lines``, then ``None``."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def refusal_problems(outcome: dict[str, Any], *, memory: bool = False) -> list[str]:
    """What is wrong with a case's outcome: it must be a quick, one-line ``ValueError`` (and a ``MemoryError`` too,
    for ``memory``) that allocated almost nothing."""
    problems = []
    if not outcome.get("value_error") or (memory and not outcome.get("memory_error")):
        problems.append(f"{outcome['error']}: {outcome['message'][:200]!r}")
    elif "\n" in outcome["message"] or len(outcome["message"]) > 600:
        problems.append(f"message of {len(outcome['message'])} characters: {outcome['message'][:200]!r}")
    if outcome.get("seconds", 0) > SECONDS:
        problems.append(f"{outcome['seconds']:.1f} s")
    if outcome.get("rss_growth_mb", 0) > RSS_GROWTH_MB:
        problems.append(f"peak RSS grew {outcome['rss_growth_mb']:.0f} MB")
    return problems


def assert_all_refused(outcomes: dict[str, dict[str, Any]], memory: Callable[[str], bool] = lambda name: False) -> None:
    """Every case refused cleanly (:func:`refusal_problems`; ``memory(name)``: as a ``MemoryError`` too), else one
    failure listing each case that was not, and why."""
    failures = {
        name: problems for name, o in outcomes.items() if (problems := refusal_problems(o, memory=memory(name)))
    }
    summary = "\n".join(f"{name}: {'; '.join(problems)}" for name, problems in failures.items())
    assert not failures, f"{len(failures)} of {len(outcomes)} cases not refused cleanly:\n{summary}"


# --- the tests ---------------------------------------------------------------------------------------------------
TORCH_MODULES = ("graphnorm.config", "graphnorm.data", "graphnorm.norms", "graphnorm.models", "graphnorm.analysis")


def test_yaml_bombs_are_refused_before_they_expand() -> None:
    names = list(yaml_bombs())
    outcomes = run_cases("yaml_case", names, limit=1024 * MiB)
    assert_all_refused(outcomes)
    for name, outcome in outcomes.items():
        assert outcome["message"].startswith("bomb.yaml"), (name, outcome["message"])


def test_aliases_merges_and_nesting_below_the_bounds_read_as_pyyaml_reads_them() -> None:
    """No false refusals: anchors, aliases and merge keys used as intended, 10**4 expanded values, 50 levels."""
    import yaml

    documents = [
        "base: &base {dataset: cora, epochs: 5}\nruns:\n  - {<<: *base, seed: 1}\n  - {<<: *base, seed: 2}\n",
        "".join(f"l{i}: {level}\n" for i, level in enumerate(laughs(10, 4))),  # 10**4 values at the last level
        mapping_laughs(10, 3, merge=True),
        "lr: " + "[" * 50 + "1" + "]" * 50 + "\n",
        "grid: {seed: [" + ", ".join(str(i) for i in range(5000)) + "]}\n",
    ]
    for text in documents:
        assert parse_yaml(text) == yaml.safe_load(text)


def test_every_config_in_the_repository_reads_within_the_bounds() -> None:
    from graphnorm.files import load_yaml_file

    files = sorted([*REPO.glob("experiments/**/*.yaml"), *REPO.glob("analysis/*.yaml")])
    assert len(files) > 10
    for path in files:
        load_yaml_file(path)


def test_an_oversized_or_endless_config_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    from graphnorm.files import load_yaml_file

    big = tmp_path / "big.yaml"
    big.write_bytes(b"# filler\n" * (300 * 1024) + b"lr: 0.01\n")
    with pytest.raises(ValueError, match=r"big\.yaml.*larger than"):
        load_yaml_file(big)
    if Path("/dev/zero").exists():  # no size to stat: the read itself must stop
        outcomes = run_cases("endless_file_case", ["/dev/zero"], limit=1024 * MiB)
        assert_all_refused(outcomes)


def endless_file_case(name: str) -> None:
    from graphnorm.files import load_yaml_file

    load_yaml_file(name)


@pytest.mark.slow
def test_error_messages_quote_a_huge_value_cut_short_without_expanding_it() -> None:
    outcomes = run_cases("value_case", list(VALUE_CASES), limit=2048 * MiB, preload=TORCH_MODULES)
    assert_all_refused(outcomes)
    assert len(outcomes["shown(bomb)"]["message"]) <= 80


@pytest.mark.slow
def test_sizes_beyond_the_memory_available_are_refused_before_allocating() -> None:
    outcomes = run_cases("size_case", list(SIZE_CASES), limit=3072 * MiB, preload=TORCH_MODULES)
    assert_all_refused(outcomes, memory=lambda name: SIZE_CASES[name][0] != "config")  # config errors: ValueError
    for name, outcome in outcomes.items():
        assert "available" in outcome["message"] and "B" in outcome["message"], (name, outcome["message"])


# --- the command line ----------------------------------------------------------------------------------------------
MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[2:], capture_output=True, text=True, preexec_fn=lambda: resource.setrlimit(
    resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1]))))
print(json.dumps({"rc": done.returncode, "stderr": done.stderr, "seconds": time.perf_counter() - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def run_cli(args: list[str], cwd: Path, limit: int = 2048 * MiB, timeout: float = 120) -> dict[str, Any]:
    """``graphnorm ARGS`` in a fresh process under ``RLIMIT_AS = limit``: rc, stderr, wall time, peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("GRAPHNORM_TRACEBACK", None)
    command = [sys.executable, "-c", MEASURE, str(limit), sys.executable, "-m", "graphnorm", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": None, "stderr": f"timed out after {timeout} s", "seconds": timeout, "peak_rss_mb": None}
    return json.loads(done.stdout)


def assert_one_line_refusal(result: dict[str, Any], command: str, *words: str) -> None:
    lines = result["stderr"].strip().splitlines()
    assert result["rc"] == 2 and len(lines) == 1, result
    assert lines[0].startswith(f"graphnorm {command}: error: "), lines
    assert all(word in lines[0] for word in words), lines


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_cli_refuses_a_yaml_bomb_in_one_line_quickly_and_small(tmp_path: Path) -> None:
    """The billion laughs (nine levels of nine) as ``lr`` of a run config and in a sweep's grid."""
    levels = [level.replace(", ", ",") for level in laughs(9, 9)]
    run = write(tmp_path / "bomb.yaml", "lr:\n" + "".join(f"- {level}\n" for level in levels))
    sweep = write(tmp_path / "sweep.yaml", "grid:\n  seed:\n" + "".join(f"  - {level}\n" for level in levels))
    assert len(run.read_bytes()) < 400
    for command, path in (("train", run), ("sweep", sweep)):
        started = time.perf_counter()
        result = run_cli([command, str(path)], tmp_path, limit=1024 * MiB)
        assert_one_line_refusal(result, command, path.name, "alias")
        assert result["seconds"] < 5 and time.perf_counter() - started < 30, result
        assert result["peak_rss_mb"] < 200, result


# One CLI process per case, each its own test: independent, so pytest-xdist can run them side by side.
BEYOND_MEMORY = {
    "csbm.yaml": "dataset: csbm\ndataset_kwargs: {num_nodes: 10000000000}\n",
    "contranorm.yaml": "norm: contranorm\nnorm_kwargs: {random_features: 1000000000}\n",
    "model.yaml": "num_layers: 10000\nhidden_channels: 65536\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", BEYOND_MEMORY)
def test_cli_refuses_a_graph_or_model_beyond_memory_in_one_line(tmp_path: Path, name: str) -> None:
    result = run_cli(["train", str(write(tmp_path / name, BEYOND_MEMORY[name]))], tmp_path, limit=3072 * MiB)
    assert_one_line_refusal(result, "train", "available")
    assert "Traceback" not in result["stderr"], result


def test_a_sweep_grid_beyond_the_bound_is_refused_before_expanding():
    from graphnorm.sweep import expand_grid

    grid = {"lr": [0.001 * i for i in range(1, 301)], "seed": list(range(300)), "dropout": [0.0, 0.1]}
    with pytest.raises(ValueError, match=r"180,000 points \(300 lr x 300 seed x 2 dropout\)"):
        expand_grid({"name": "big", "base": {"dataset": "cora"}, "grid": grid}, log=None)
