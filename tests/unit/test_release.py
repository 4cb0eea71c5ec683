"""What a release uploads passes the index's checks: the sdist and the wheel build from this checkout and
pass ``twine check --strict`` (the README renders as PyPI renders it), with the licence (SPDX, PEP 639),
classifiers and project URLs in their metadata; ``jobq --version`` says the version they carry."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobq.cli import app, version
from jqstack.testing.wheel import build_sdist, build_wheel

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("release")
    return build_sdist(work), build_wheel(work)


def _metadata(wheel: Path) -> tuple[Message, list[str]]:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        return HeaderParser().parsestr(whl.read(meta).decode()), names


def test_the_sdist_and_the_wheel_pass_twine_check(dists: tuple[Path, Path]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dists)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_metadata_carries_the_licence_classifiers_and_urls(dists: tuple[Path, Path]) -> None:
    sdist, wheel = dists
    meta, names = _metadata(wheel)
    assert meta["Name"] == "jobq"
    assert meta["Version"] == PROJECT["version"]
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    classifiers = meta.get_all("Classifier") or []
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: the expression says it
    assert "Typing :: Typed" in classifiers
    assert meta.get_all("Project-URL"), "no project URLs"
    assert meta["Description-Content-Type"] == "text/markdown"
    licence = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert len(licence) == 1, names
    with zipfile.ZipFile(wheel) as whl:
        assert whl.read(licence[0]) == (ROOT / "LICENSE").read_bytes()
    with tarfile.open(sdist) as tar:
        assert f"jobq-{PROJECT['version']}/LICENSE" in tar.getnames()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()


def test_jobq_version_prints_the_distributions_version() -> None:
    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == f"jobq {version()}"
    assert version() == PROJECT["version"]
