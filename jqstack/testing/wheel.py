"""jobq as a user installs it: the wheel built from this checkout, and a fresh virtualenv holding it with
a chosen set of extras at the versions ``requirements.lock`` pins (``tests/unit/test_wheel.py``,
``tests/e2e/test_slim_install.py``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

from jqstack.lockfile import pins
from jqstack.paths import repo_root

__all__ = ["build_sdist", "build_wheel", "fresh_venv"]

_JUNK = (".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "results")


def build_wheel(work: Path) -> Path:
    """The wheel of a copy of this checkout (so no ``build/`` left over from an earlier build leaks in, and
    the checkout gets none), built with setuptools as installed here: offline, a few seconds."""
    return _build(work, "wheel")


def build_sdist(work: Path) -> Path:
    """The source distribution of a copy of this checkout, as :func:`build_wheel` builds the wheel."""
    return _build(work, "sdist")


def _build(work: Path, what: str) -> Path:
    src = work / "jobq"
    if not src.exists():  # the wheel and the sdist of one test: one copy
        shutil.copytree(repo_root(), src, ignore=shutil.ignore_patterns(*_JUNK))
    build = f"import sys; from setuptools import build_meta; print(build_meta.build_{what}(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", build, str(work / "dist")],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {what} did not build: {done.stderr[-3000:]}")
    return work / "dist" / done.stdout.strip().splitlines()[-1]


def _uv(*args: str | Path) -> subprocess.CompletedProcess[str]:
    uv = Path(sys.executable).parent / "uv"  # the installer ./run puts in .venv, at the lock's version
    return subprocess.run(
        [str(uv), *map(str, args)], capture_output=True, text=True, timeout=300, check=False
    )


def fresh_venv(work: Path, wheel: Path, extras: Sequence[str] = ()) -> Path:
    """A new virtualenv under ``work`` with ``wheel`` and the requirements of ``extras`` (none: a bare
    ``pip install jobq``), each at the version the lock pins and checked against its hashes; from uv's
    cache when everything is there (``./run setup`` filled it), else from the index. Returns its root."""
    root = repo_root()
    venv = work / "venv"
    python = venv / "bin" / "python"
    lock = (root / "requirements.lock").read_text()
    wanted = pins(tomllib.loads((root / "pyproject.toml").read_text()), lock, extras)
    requirements = work / "requirements.txt"
    requirements.write_text("\n".join(wanted) + "\n")
    pinned: list[str | Path] = ["--require-hashes", "-c", root / "requirements.lock", "-r", requirements]
    steps: list[list[str | Path]] = [
        ["venv", "-q", "--python", sys.executable, venv],
        ["pip", "install", "-q", "--python", python, *pinned],
        ["pip", "install", "-q", "--python", python, "--no-deps", wheel],
    ]
    for step in steps:
        done = _uv(*step, "--offline") if step[0] == "pip" else _uv(*step)
        if done.returncode != 0 and step[0] == "pip":
            done = _uv(*step)  # something is not in the cache
        if done.returncode != 0:
            raise RuntimeError(f"uv {' '.join(map(str, step))}: {done.stderr[-3000:]}")
    return venv
