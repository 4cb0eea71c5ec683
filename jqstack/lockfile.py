"""What to install from ``requirements.lock``: the pins of jobq's own requirements for a set of extras.

``requirements.lock`` (``./run lock``) pins every distribution of every extra with the sha256 of each of
its files. Installs run in uv's hash-checking mode (``--require-hashes``), which wants every *direct*
requirement pinned with ``==``; the lock, given as constraints (``-c requirements.lock``), then supplies
the hashes of every distribution, the transitive ones included, and refuses anything it does not pin. This
module turns ``pyproject.toml``'s requirements (runtime plus the chosen extras) into those ``==`` pins, so
an install takes only the extras it asks for — the image no dev tools, ``./run demo`` no benchmark plots.

Standard library only: ``./run`` and the Dockerfile run it as a script (``python jqstack/lockfile.py
pins requirements.lock pyproject.toml dev,spark``) before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["LockError", "hashed", "locked_versions", "normalize", "pins"]

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)(;.*)?$")


class LockError(Exception):
    """The lock does not pin what an install asks for (run ``./run lock`` after changing requirements)."""


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(lock: str) -> dict[str, str]:
    """Each pinned distribution of a ``uv pip compile`` output (normalized name → version)."""
    return {normalize(m[1]): m[2] for line in lock.splitlines() if (m := _PIN.match(line))}


def _requirements(project: dict[str, Any], extras: Iterable[str]) -> list[str]:
    """The project's runtime requirements and those of ``extras``; an extra may name others of the project
    itself (``all = ["jobq[server,web,...]"]``): theirs are taken in its place."""
    requirements: list[str] = list(project.get("dependencies", []))
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    own = normalize(str(project.get("name", "")))
    todo, done = list(extras), set()
    while todo:
        extra = todo.pop(0)
        if extra in done:
            continue
        done.add(extra)
        if extra not in optional:
            raise LockError(f"unknown extra {extra!r}: pyproject.toml defines {', '.join(sorted(optional))}")
        for requirement in optional[extra]:
            match = _REQUIREMENT.match(requirement)
            if match is not None and normalize(match[1]) == own:
                todo += [e.strip() for e in (match[2] or "[]")[1:-1].split(",") if e.strip()]
            else:
                requirements.append(requirement)
    return requirements


def pins(pyproject: Mapping[str, object], lock: str, extras: Iterable[str]) -> list[str]:
    """``name[extras]==version`` (with its environment marker) for each runtime requirement of
    ``pyproject`` and each requirement of ``extras``, at the version the lock pins."""
    project = pyproject.get("project")
    if not isinstance(project, dict):
        raise LockError("pyproject.toml has no [project] table")
    requirements = _requirements(project, extras)
    versions = locked_versions(lock)
    out: list[str] = []
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        if match is None:
            raise LockError(f"cannot read the requirement {requirement!r} of pyproject.toml")
        name, wanted, marker = match[1], match[2] or "", match[4] or ""
        version = versions.get(normalize(name))
        if version is None:
            raise LockError(f"requirements.lock does not pin {name} ({requirement}): run ./run lock")
        line = f"{name}{wanted}=={version}{' ' + marker if marker else ''}"
        if line not in out:
            out.append(line)
    return out


def hashed(lock: str, names: Iterable[str]) -> list[str]:
    """The lock's entries for ``names``, hashes included, as pip reads them (``--require-hashes``): how
    ``./run`` installs uv itself with pip before uv installs the rest."""
    wanted = {normalize(n) for n in names}
    entries: dict[str, str] = {}
    current: str | None = None
    for line in lock.splitlines():
        if match := _PIN.match(line):
            current = normalize(match[1]) if normalize(match[1]) in wanted else None
            if current:
                entries[current] = line
        elif current and line.strip().startswith("--hash="):
            entries[current] += "\n" + line
        else:
            current = None
    missing = wanted - entries.keys()
    if missing:
        raise LockError(f"requirements.lock does not pin {', '.join(sorted(missing))}: run ./run lock")
    unhashed = sorted(n for n, e in entries.items() if "--hash=" not in e)
    if unhashed:
        raise LockError(f"requirements.lock has no hashes for {', '.join(unhashed)}: run ./run lock")
    return [entries[n].rstrip(" \\") for n in sorted(entries)]


def main(argv: list[str]) -> int:
    usage = (
        "usage: lockfile.py pins LOCK PYPROJECT [EXTRA,EXTRA...]   (jobq's requirements, pinned)\n"
        "       lockfile.py hashed LOCK NAME...                    (the lock's entries for NAMEs, hashed)"
    )
    if len(argv) < 3 or argv[0] not in ("pins", "hashed"):
        print(usage, file=sys.stderr)
        return 64
    lock = Path(argv[1]).read_text()
    try:
        if argv[0] == "pins":
            extras = [e for e in (argv[3] if len(argv) > 3 else "").split(",") if e]
            lines = pins(tomllib.loads(Path(argv[2]).read_text()), lock, extras)
        else:
            lines = hashed(lock, argv[2:])
    except LockError as exc:
        print(f"lockfile.py: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
