"""The command line starts without torch: ``--help`` and ``--version`` import neither torch, PyG nor pandas, and
``import graphnorm`` keeps its public names (loaded on first use)."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

import pytest

import graphnorm
from graphnorm import cli

HEAVY = ("torch", "torch_geometric", "pandas", "numpy", "matplotlib")
# Runs the command line in a fresh interpreter, then prints which heavy modules it imported.
PROBE = f"""
import sys
from graphnorm.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("HEAVY", sorted(m for m in {HEAVY!r} if m in sys.modules))
"""


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["sweep", "--help"], ["train", "--help"], ["predict", "--help"], ["norms", "--help"]],
    ids=" ".join,
)
def test_help_and_version_import_no_heavy_module(argv: list[str]) -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "HEAVY []"
    assert "usage: graphnorm" in result.stdout or result.stdout.startswith("graphnorm ")


def test_import_graphnorm_is_light_and_its_public_names_load_on_use() -> None:
    code = (
        "import sys, graphnorm\n"
        "assert 'torch' not in sys.modules, 'import graphnorm imported torch'\n"
        "from graphnorm import available_norms, build_norm, norms\n"
        "assert 'torch' in sys.modules and norms.build_norm is build_norm\n"
        "print(available_norms()[:2])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['adanorm', 'batchnorm']"


def test_public_api_all_dir_and_unknown_names() -> None:
    assert set(graphnorm.__all__) == {"norms", "available_norms", "build_norm", "pass_edge_index", "__version__"}
    assert graphnorm.pass_edge_index.__module__ == "graphnorm.norms.other_models"
    assert set(graphnorm.__all__) <= set(dir(graphnorm))
    assert graphnorm.build_norm("pairnorm", 4).__class__.__name__ == "PairNorm"
    with pytest.raises(AttributeError, match="has no attribute 'nosuch'"):
        _ = graphnorm.nosuch
    from graphnorm import sweep  # a subpackage that is not a lazy name still imports normally

    assert sweep.run_sweep.__module__ == "graphnorm.sweep.runner"


def test_version_option_prints_the_installed_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"graphnorm {importlib.metadata.version('graphnorm')}\n"
    result = subprocess.run([sys.executable, "-m", "graphnorm", "--version"], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, f"graphnorm {graphnorm.__version__}\n")


def test_version_without_package_metadata_is_marked_unknown(monkeypatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert graphnorm._installed_version() == graphnorm.UNKNOWN_VERSION == "0+unknown"


def test_parser_constants_equal_the_sweep_modules() -> None:
    from graphnorm.config import RunConfig
    from graphnorm.sweep import grid, runner

    assert cli.EXECUTORS == runner.EXECUTORS
    assert set(cli.SWEEP_SECTIONS) <= set(grid.SWEEP_KEYS)
    assert not set(grid.SWEEP_KEYS) & set(RunConfig.field_names())  # a sweep key never reads as a run key


def test_every_command_has_a_description_and_examples() -> None:
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == {"sweep", "train", "predict", "norms"}
    for name, command in commands.items():
        assert command.description and len(command.description) > 40, name
        if name != "norms":
            assert f"  graphnorm {name} " in command.format_help(), f"{name} --help shows no example"
    for name in ("sweep", "train"):
        assert f"graphnorm {name} experiments/" in parser.format_help()


def test_command_bodies_load_only_when_their_command_runs() -> None:
    code = (
        "import sys\n"
        "from graphnorm.cli import build_parser\n"
        "build_parser().format_help()\n"
        "print(sorted(m for m in sys.modules if m.startswith('graphnorm') and m.endswith('.command')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_shared_command_names_stay_importable_from_the_cli() -> None:
    from graphnorm.train.command_input import SWEEP_SECTIONS, CommandError

    assert cli.CommandError is CommandError and cli.SWEEP_SECTIONS is SWEEP_SECTIONS
    assert set(cli.COMMANDS) == {"sweep", "train", "predict", "norms"}
