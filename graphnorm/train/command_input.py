"""What the ``graphnorm`` commands share about their input: :class:`CommandError`, the one-line report of bad input,
the hint that a YAML file belongs to the other command (a run config given to ``sweep``, a sweep config given to
``train``), and the check that an output file named on the command line is none of the datasets' files.

It imports only the standard library and graphnorm's light modules, so that the command line's parser can import it
without torch.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from graphnorm.files import load_yaml_file

SWEEP_SECTIONS = ("base", "grid", "norm_settings")  # keys that only a sweep config has


class CommandError(Exception):
    """Bad input or a sweep that cannot go on: reported as one line, without a traceback."""


def command_hint(command: str, path: Path) -> str:
    """The command line that runs ``path`` with ``graphnorm <command>`` (the path shell-quoted)."""
    return f"graphnorm {command} {shlex.quote(str(path))}"


def check_is_sweep_file(path: Path) -> None:
    """``CommandError`` pointing to ``graphnorm train`` when ``path`` holds a single-run config: a mapping with
    RunConfig keys at the top and none of the sweep sections (base, grid, norm_settings)."""
    from graphnorm.config import RunConfig

    values = load_yaml_file(path, "sweep config")
    if not isinstance(values, dict) or any(key in values for key in SWEEP_SECTIONS):
        return  # load_sweep_config reports anything else wrong with it
    run_keys = [key for key in values if key in RunConfig.field_names()]  # in the file's order
    if run_keys:
        raise CommandError(
            f"{path} is a single-run config (RunConfig keys such as {', '.join(run_keys[:3])}; no base, grid or "
            f"norm_settings), not a sweep; run it with: {command_hint('train', path)}"
        )


def check_is_run_values(path: Path, values: dict[str, Any]) -> None:
    """``CommandError`` pointing to ``graphnorm sweep`` when the mapping read from ``path`` is a sweep config."""
    sections = [key for key in SWEEP_SECTIONS if key in values]
    if sections:
        raise CommandError(
            f"{path} is a sweep config (it has {', '.join(sections)}), not a single run; run it with: "
            f"{command_hint('sweep', path)}"
        )


def check_outside_data_root(out: Path, root: str | None, what: str) -> None:
    """``ValueError`` when ``out`` is an existing file under the data root (``root``, else ``$GRAPHNORM_DATA``, else
    the user cache): the datasets' files there are read by every run."""
    from graphnorm.data.root import ENV_ROOT, default_root

    folder = Path(root if root is not None else os.environ.get(ENV_ROOT) or default_root()).expanduser().resolve()
    target = out.expanduser().resolve()
    if target.exists() and target.is_relative_to(folder):
        raise ValueError(f"{what} is a file under the data root {folder}, which runs read; give a path outside it")
