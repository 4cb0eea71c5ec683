#!/usr/bin/env python3
"""Refresh the dashboard's browser-side assets from the npm registry, checked against manifest.json.

Run by hand when upgrading (the files are committed: nothing is fetched at run time, no CDN is used).
manifest.json names each npm package with its version, its tarball's ``integrity`` (npm's sha512) and the
files taken from it with their sha256; tests/unit/test_vendored_assets.py holds the committed files to
those sha256.

    python3 jqweb/static/vendor/fetch.py            re-fetch the recorded versions; fail unless each tarball
                                                    matches its recorded integrity (and each file its sha256)
    python3 jqweb/static/vendor/fetch.py --record   after editing a version in manifest.json: fetch it and
                                                    record the new integrity and sha256s

``npm pack`` downloads each tarball (npm checks it against the registry's own integrity); this script
then checks it against the integrity recorded here, so a tarball republished or swapped under the same
version is refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"


def integrity(data: bytes) -> str:
    """npm's ``integrity`` of a tarball: ``sha512-`` and the base64 of its SHA-512."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch(spec: str, tmp: str) -> Path:
    """The tarball of ``spec`` (``name@version``), downloaded by ``npm pack`` into ``tmp``."""
    out = subprocess.run(
        ["npm", "pack", "--json", "--silent", spec], cwd=tmp, check=True, capture_output=True, text=True
    )
    return Path(tmp) / str(json.loads(out.stdout)[0]["filename"])


def take(
    spec: str, tarball: Path, files: dict[str, dict[str, str]], record: bool
) -> tuple[dict[Path, bytes], list[str]]:
    """The files to write from ``tarball`` and, unless ``record``, one line per file whose sha256 differs."""
    writes: dict[Path, bytes] = {}
    problems: list[str] = []
    with tarfile.open(tarball) as tar:
        for local, entry in files.items():
            member = tar.extractfile(entry["from"])
            if member is None:
                raise SystemExit(f"{spec} has no file {entry['from']}")
            data = member.read()
            digest = hashlib.sha256(data).hexdigest()
            if record:
                entry["sha256"] = digest
            elif digest != entry["sha256"]:
                problems.append(f"{spec}: {entry['from']} sha256 {digest}, recorded {entry['sha256']}")
            writes[HERE / local] = data
    return writes, problems


def main(record: bool) -> int:
    manifest = json.loads(MANIFEST.read_text())
    problems: list[str] = []
    writes: dict[Path, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, package in manifest["packages"].items():
            spec = f"{name}@{package['version']}"
            tarball = fetch(spec, tmp)
            got = integrity(tarball.read_bytes())
            if record:
                package["integrity"] = got
            elif got != package["integrity"]:
                problems.append(f"{spec}: tarball integrity {got}, recorded {package['integrity']}")
                continue
            files, wrong = take(spec, tarball, package["files"], record)
            writes.update(files)
            problems += wrong
    if problems:
        print("refused (nothing written):\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    for path, data in writes.items():
        path.write_bytes(data)
    if record:
        MANIFEST.write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(record="--record" in sys.argv[1:]))
