"""This installation's version: what ``jobq --version`` prints and every process's presence record says."""

from __future__ import annotations

import functools

__all__ = ["version"]


@functools.cache
def version() -> str:
    """The distribution's metadata (``pyproject.toml``'s ``version``)."""
    import importlib.metadata  # here: `jobq --help` and whoever never asks do not import it

    try:
        return importlib.metadata.version("jobq")
    except importlib.metadata.PackageNotFoundError:  # a checkout run from PYTHONPATH without an install
        return "unknown (not installed)"
