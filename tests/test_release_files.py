"""The release files: LICENSE, CITATION.cff (valid against the Citation File Format 1.2.0 schema), CHANGELOG.md, and
the package metadata a built wheel carries (license expression and file, project URLs)."""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# The CFF 1.2.0 schema as shipped by cffconvert 2.0.0 (cffconvert/schemas/1.2.0/schema.json), a copy so that the
# test needs neither the network nor cffconvert (whose pins would clash with the dev stack).
CFF_SCHEMA = Path(__file__).parent / "fixtures" / "citation_cff_1.2.0_schema.json"


def _project() -> dict:
    """pyproject.toml's [project] table."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_license_is_mit_with_its_full_text():
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Permission is hereby granted, free of charge" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_citation_cff_is_valid_against_the_schema():
    import json

    import jsonschema

    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    schema = json.loads(CFF_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(citation), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    # The schema is what catches a broken file: a wrong key and a malformed date are rejected.
    assert list(validator.iter_errors({**citation, "licence": "MIT"}))
    assert list(validator.iter_errors({**citation, "date-released": "26 November 2026"}))


def test_citation_changelog_and_pyproject_agree():
    project = _project()
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert str(citation["version"]) == project["version"]
    assert citation["license"] == project["license"] == "MIT"
    assert citation["repository-code"] == project["urls"]["Repository"]
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(project['version'])}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M)
    assert str(citation["date-released"]) in changelog  # the release's date, in both files


def test_a_built_wheel_carries_the_license_and_urls(tmp_path):
    """Build a wheel from a copy of the files the package is made of, with the backend pyproject.toml names."""
    import setuptools

    major = int(setuptools.__version__.split(".")[0])
    assert major >= 77, f"setuptools {setuptools.__version__} predates license expressions: pip install -e '.[dev]'"
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "graphnorm", source / "graphnorm", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    build = "import setuptools.build_meta as b, sys; print(b.build_wheel(sys.argv[1]))"
    result = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path / "dist")], cwd=source, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    wheel = tmp_path / "dist" / result.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        license_path = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert archive.read(license_path) == (REPO / "LICENSE").read_bytes()
        metadata_path = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(metadata_path))
    assert metadata["License-Expression"] == "MIT" and metadata["License-File"] == "LICENSE"
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Changelog"}
    assert urls == _project()["urls"]
