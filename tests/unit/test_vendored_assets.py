"""The dashboard's vendored browser assets are exactly the files recorded in their manifest.

``jqweb/static/vendor/manifest.json`` names each npm package (version, tarball integrity) and the sha256 of
every file taken from it; ``fetch.py`` beside it writes them (checking npm's sha512 integrity). A file
edited by hand, swapped, or added without the manifest fails here.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

VENDOR = Path(__file__).resolve().parents[2] / "jqweb" / "static" / "vendor"
TOOLING = {"manifest.json", "fetch.py"}


def manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VENDOR / "manifest.json").read_text())
    return data


def recorded() -> dict[str, str]:
    return {
        local: entry["sha256"]
        for package in manifest()["packages"].values()
        for local, entry in package["files"].items()
    }


@pytest.mark.parametrize("name", sorted(recorded()))
def test_each_vendored_file_has_its_recorded_sha256(name: str) -> None:
    digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
    assert digest == recorded()[name], f"{name} differs from manifest.json: refresh it with fetch.py"


def test_every_vendored_file_is_recorded() -> None:
    present = {p.name for p in VENDOR.iterdir() if p.is_file()} - TOOLING
    assert present == set(recorded()), "vendor/ holds files manifest.json does not record (or lacks some)"


def test_each_package_is_pinned_with_its_npm_integrity() -> None:
    for name, package in manifest()["packages"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", package["version"]), name
        assert re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", package["integrity"]), name
        assert package["license"], name
        for entry in package["files"].values():
            assert entry["from"].startswith("package/"), name
            assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), name
