"""The Lua contract, read from the files themselves (BullMQ's rules):

* every key a script touches at a fixed name reaches it in ``KEYS``: its header lists them
  (``-- KEYS[i] <name> ...``), in the order its declaration in ``jqengine.scripts`` passes them, and
  the code (with the ``_lib.lua`` helpers it calls) touches exactly those;
* the per-job and per-index keys it builds are named on its ``-- derived:`` line;
* it returns named codes (``C_*`` of ``_lib.lua``) only, named on its ``-- returns:`` line, and those
  constants equal :class:`jqengine.codes.Code`, one meaning per number.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from jqengine import Code
from jqengine.keys import GRAPH_KEY_NAMES, KEY_NAMES, GraphKeys, QueueKeys
from jqengine.scripts import SCRIPT_NAMES, SCRIPTS, local_name, source

LUA = Path(__file__).parents[2] / "jqengine" / "lua"
FAMILIES = {
    "job": "job:<id>",
    "idx": "idx:<key>=<value>",
    "fcur": "fcur:<filter>",
    "xq": "xq:<excl>",
    "parked": "parked:<kind>",
    "inbox": "inbox:<waiter>",
    "switched": "switched:<name>",
    "fair": "fair:<value>",
    "fairtat": "fairtat:<value>",
}
LOCALS = {local_name(name): name for name in KEY_NAMES}
GRAPH_LOCALS = {local_name(name): name for name in GRAPH_KEY_NAMES}
LIBS = ("_lib", "_glib", "_frame")


def _lib(name: str = "_lib") -> str:
    return (LUA / f"{name}.lua").read_text()


def _script(name: str) -> str:
    return (LUA / f"{name}.lua").read_text()


def _header(text: str) -> str:
    """The leading comment block (after the shebang line)."""
    lines = text.splitlines()[1:]
    return "\n".join(line for line in lines[: next(i for i, x in enumerate(lines) if not x.startswith("--"))])


def _code(text: str) -> str:
    """The text without comments and string literals' contents that could look like names."""
    return re.sub(r"--[^\n]*", "", text)


def _direct(text: str, graph: bool = False) -> tuple[set[str], set[str]]:
    """(key names, derived families) a piece of code touches itself (helpers not followed)."""
    pattern = r"\bk\('(idx|fcur|xq|parked|inbox|switched|fair|fairtat):"
    families = {m.group(1) for m in re.finditer(pattern, text)}
    if re.search(r"\bjkey\(", text):
        families.add("job")
    table = GRAPH_LOCALS if graph else LOCALS
    names = {table[m] for m in re.findall(r"\b([A-Z]+)\b", text) if m in table}
    return names, families


@cache
def _helpers(lib: str = "_lib") -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """For every helper of ``_lib.lua`` (or ``_glib.lua``): the key names and derived families it
    touches, through the helpers it calls."""
    graph = lib == "_glib"
    body = _code(_lib(lib))
    blocks = {
        m.group(1): block
        for block in re.split(r"\n(?=local function )", body)
        if (m := re.match(r"local function (\w+)\(", block))
    }
    calls = {n: {o for o in blocks if o != n and re.search(rf"\b{o}\(", b)} for n, b in blocks.items()}

    def reach(name: str, seen: frozenset[str]) -> tuple[set[str], set[str]]:
        names, families = _direct(blocks[name], graph)
        for callee in calls[name] - seen:
            more_names, more_families = reach(callee, seen | {name})
            names |= more_names
            families |= more_families
        return names, families

    out = {}
    for name in blocks:
        names, families = reach(name, frozenset())
        out[name] = (frozenset(names), frozenset(families))
    return out


def touched(name: str) -> tuple[set[str], set[str]]:
    """(key names, derived families) script ``name`` touches, through the helpers it calls."""
    code = _code(_script(name))
    graph = SCRIPTS[name].graph
    names, families = _direct(code, graph)
    for helper, (helper_names, helper_families) in _helpers("_glib" if graph else "_lib").items():
        if re.search(rf"\b{helper}\(", code):
            names |= helper_names
            families |= helper_families
    if graph:
        return names, families
    if families:
        names.add("prefix")  # derived keys are built from the prefix
    return names, families


def _lua_constants() -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^local C_(\w+) = (-?\d+)", _lib(), re.M)}


def test_every_script_file_is_declared_and_every_declared_script_exists() -> None:
    files = {p.stem for p in LUA.glob("*.lua")} - set(LIBS)
    assert files == set(SCRIPT_NAMES)


def test_lua_code_constants_equal_the_python_enum() -> None:
    assert _lua_constants() == {c.name: c.value for c in Code}
    assert len(set(_lua_constants().values())) == len(_lua_constants()), "one meaning per number"


@pytest.mark.parametrize("lib", LIBS)
def test_the_lib_reads_no_keys_itself(lib: str) -> None:
    code = _code(_lib(lib))
    assert "KEYS[" not in code, "_lib.lua uses the locals the loader binds from each script's declaration"
    assert not re.findall(r"\bk\('([a-z]+)'\)", code), "fixed-name keys come in KEYS"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_header_keys_are_the_python_declaration_and_what_the_code_touches(name: str) -> None:
    text = _script(name)
    header, code = _header(text), _code(text)
    listed = re.findall(r"^-- KEYS\[(\d+)\] (\w+) ", header, re.M)
    assert [int(i) for i, _ in listed] == list(range(1, len(listed) + 1)), f"{name}: KEYS[i] not 1..n"
    declared = list(SCRIPTS[name].keys)
    assert [n for _, n in listed] == declared, f"{name}: header KEYS differ from scripts.py"
    order = GRAPH_KEY_NAMES if SCRIPTS[name].graph else KEY_NAMES
    assert declared == [n for n in order if n in declared], f"{name}: KEYS not in KEY_NAMES order"
    names, _ = touched(name)
    assert names == set(declared), (
        f"{name}: the code touches {sorted(names)}, the declaration names {sorted(declared)}"
    )
    assert "KEYS[" not in code, f"{name}: reads KEYS itself; use the locals bound from its declaration"
    fixed = re.findall(r"\bk\('([a-z]+)'\)", code)
    assert not fixed, f"{name}: builds fixed-name keys {fixed}; they are passed in KEYS"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_header_lists_the_derived_families_the_code_builds(name: str) -> None:
    header = _header(_script(name))
    line = re.search(r"^-- derived: (.+)$", header, re.M)
    assert line, f"{name}: no '-- derived:' line"
    listed = {f for f, label in FAMILIES.items() if label in line.group(1)}
    _, families = touched(name)
    assert listed == families, f"{name}: header lists {sorted(listed)}, the code builds {sorted(families)}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_scripts_return_named_codes_their_header_lists(name: str) -> None:
    code, header = _code(_script(name)), _header(_script(name))
    assert re.search(r"^-- returns: ", header, re.M), f"{name}: no '-- returns:' line"
    bare = re.findall(r"return \{(-?\d+)[,}]", code) + re.findall(r"out\[#out \+ 1\] = (-?\d+)\b", code)
    bare += re.findall(r"= \{(-?\d+)[,}]", code)
    assert not bare, f"{name}: returns bare codes {bare}; use the C_* constants of _lib.lua"
    used, named = set(re.findall(r"\bC_(\w+)", code)), set(re.findall(r"\bC_(\w+)", header))
    unknown = (used | named) - set(_lua_constants())
    assert not unknown, f"{name}: unknown codes {sorted(unknown)}"
    assert used == named, f"{name}: returns {sorted(used)}, its header names {sorted(named)}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_loaded_script_binds_the_declared_keys_in_order(name: str) -> None:
    lines = source(name).splitlines()
    binding = lines[lines.index("local function transition()") + 1]  # _frame.lua's marker line
    names, values = binding.removeprefix("local ").split(" = ")
    declared = SCRIPTS[name].keys
    assert names.split(", ") == [local_name(n) for n in declared]
    assert values.split(", ") == [f"KEYS[{i}]" for i in range(1, len(declared) + 1)]
    if SCRIPTS[name].graph:
        assert GraphKeys("g").for_script(declared) == [f"jobq:graph:{{g}}:{n}" for n in declared]  # type: ignore[arg-type]
        return
    keys = QueueKeys("q").for_script(declared)  # type: ignore[arg-type]
    assert all(k.startswith("jobq:{q}:") for k in keys), "every key keeps the queue's hash tag"
    assert keys == ["jobq:{q}:" if n == "prefix" else f"jobq:{{q}}:{n}" for n in declared], (
        "QueueKeys names each key as the header does"
    )
