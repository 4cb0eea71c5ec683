"""The ``KEYS`` lines of the scripts' headers, generated: each key's description is written once
(:data:`jqengine.keys.KEY_DOCS`, :data:`~jqengine.keys.GRAPH_KEY_DOCS`) and every script that takes the key
repeats it, in the order of its declaration (:data:`jqengine.scripts.SCRIPTS`).

``python -m jqengine.luaheaders`` rewrites the headers of this checkout's scripts (run it after adding a
script or a key, or changing a declaration or a description); ``--check`` only names the files that
differ. ``tests/state/test_lua_contract.py`` fails on a header that differs from the generated one.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from jqengine.keys import GRAPH_KEY_DOCS, KEY_DOCS
from jqengine.scripts import SCRIPT_NAMES, SCRIPTS, Script

__all__ = ["keys_header", "main", "with_keys_header"]

WIDTH = 110
"""Where a long description wraps (onto comment lines indented under its start)."""


def keys_header(script: Script) -> list[str]:
    """The header lines naming a script's ``KEYS``, from its declaration and the keys' one description
    (:data:`~jqengine.keys.KEY_DOCS`): ``-- KEYS[i] <name> <TYPE> <what>``, wrapped at :data:`WIDTH`."""
    docs = cast("Mapping[str, tuple[str, str]]", GRAPH_KEY_DOCS if script.graph else KEY_DOCS)
    lines = []
    for i, name in enumerate(script.keys, 1):
        kind, what = docs[name]
        first = f"-- KEYS[{i}] {name:<8} " + (f"{kind} " if kind else "")
        indent = "--" + " " * (len(first) - 2)
        lines += textwrap.wrap(
            what, WIDTH, initial_indent=first, subsequent_indent=indent, break_on_hyphens=False
        )
    return lines


def with_keys_header(name: str, text: str) -> str:
    """Script ``name``'s text with its ``KEYS`` lines as :func:`keys_header` makes them: they stand right
    before the header's ``-- derived:`` line (a new script's header needs only that line)."""
    lines = text.split("\n")
    derived = next((i for i, line in enumerate(lines) if line.startswith("-- derived:")), None)
    if derived is None:
        raise ValueError(f"{name}.lua: no '-- derived:' line in its header")
    start = next((i for i, line in enumerate(lines[:derived]) if line.startswith("-- KEYS[")), derived)
    return "\n".join([*lines[:start], *keys_header(SCRIPTS[name]), *lines[derived:]])


def main(argv: list[str]) -> int:
    """``python -m jqengine.luaheaders [--check]``: write each script's ``KEYS`` header lines from its
    declaration (in this checkout's ``jqengine/lua/``); ``--check`` only names the files that differ."""
    check = argv == ["--check"]
    if argv and not check:
        print("usage: python -m jqengine.luaheaders [--check]", file=sys.stderr)
        return 64
    stale = []
    for name in SCRIPT_NAMES:
        path = Path(__file__).parent / "lua" / f"{name}.lua"
        text = path.read_text(encoding="utf-8")
        wanted = with_keys_header(name, text)
        if wanted != text:
            stale.append(path.name)
            if not check:
                path.write_text(wanted, encoding="utf-8")
    verb = "differ from their declarations" if check else "rewritten"
    print(f"{len(stale)} script headers {verb}" + (f": {', '.join(stale)}" if stale else ""))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
