"""The Lua contract, read from the files themselves (BullMQ's rules):

* every key a script touches at a fixed name reaches it in ``KEYS``: its header lists them
  (``-- KEYS[i] <name> <TYPE> <what>``, generated from its declaration in ``jqengine.scripts`` and the keys'
  one description in ``jqengine.keys``), and the code (with the library functions it uses) touches
  exactly those;
* the per-job and per-index keys it builds are named on its ``-- derived:`` line;
* it returns named codes (``C_*`` of ``_base.lua``) only, named on its ``-- returns:`` line, and those
  constants equal :class:`jqengine.codes.Code`, one meaning per number;
* the library (``lua/lib/``, one function a file) and the scripts name what they call on their
  ``-- uses:`` lines; the Redis Functions library defines each library function once, each before the
  functions that call it, and each call starts afresh the per-call state of the functions it uses.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from jqengine import STEP_HORIZON_MS, Code
from jqengine.keys import GRAPH_KEY_DOCS, GRAPH_KEY_NAMES, KEY_DOCS, KEY_NAMES, GraphKeys, QueueKeys
from jqengine.luaheaders import keys_header, with_keys_header
from jqengine.scripts import (
    SCRIPT_NAMES,
    SCRIPTS,
    LibFunction,
    call_state,
    flags,
    function_library,
    library,
    link,
    local_name,
    uses_of,
)

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
PARTS = ("_frame", "_base")
"""What the loader puts around and before every script, beside the library."""
UNITS = sorted(p.stem for p in (LUA / "lib").glob("*.lua"))
"""The library: one function (or, twice, a table) a file of ``lua/lib/``."""


def _read(name: str) -> str:
    return (LUA / f"{name}.lua").read_text()


def _unit(name: str) -> str:
    return (LUA / "lib" / f"{name}.lua").read_text()


def _header(text: str) -> str:
    """The leading comment block (after the shebang line)."""
    lines = text.splitlines()[1:]
    return "\n".join(line for line in lines[: next(i for i, x in enumerate(lines) if not x.startswith("--"))])


def _code(text: str) -> str:
    """The text without comments (string literals kept: derived keys are built from them)."""
    return re.sub(r"--[^\n]*", "", text)


def _bare(text: str) -> str:
    """The text without comments and with every string literal emptied: only the code's own names left."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif text[i] in "'\"":
            end = i + 1
            while text[end] != text[i]:
                end += 2 if text[end] == "\\" else 1
            out.append("''")
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _calls(text: str, itself: str = "") -> set[str]:
    """The library functions a piece of Lua names (a field such as ``fc.key`` is not a name)."""
    names = set(re.findall(r"(?<![.:\w])([A-Za-z_]\w*)", _bare(text)))
    return (names & set(UNITS)) - {itself}


@cache
def _needs(unit: str) -> frozenset[str]:
    """The library functions ``unit`` calls, transitively, read from the code (not its ``uses`` line)."""
    seen: set[str] = set()
    todo = [unit]
    while todo:
        for callee in _calls(_unit(todo.pop()), "") - seen:
            seen.add(callee)
            todo.append(callee)
    return frozenset(seen - {unit})


def _direct(text: str, graph: bool = False) -> tuple[set[str], set[str]]:
    """(key names, derived families) a piece of code touches itself (library functions not followed)."""
    pattern = r"\bk\('(idx|fcur|xq|parked|inbox|switched|fair|fairtat):"
    families = {m.group(1) for m in re.finditer(pattern, text)}
    if re.search(r"\bjkey\(", text):
        families.add("job")
    table = GRAPH_LOCALS if graph else LOCALS
    names = {table[m] for m in re.findall(r"\b([A-Z]+)\b", text) if m in table}
    return names, families


def touched(name: str) -> tuple[set[str], set[str]]:
    """(key names, derived families) script ``name`` touches, through the library functions it calls."""
    text = _read(name)
    graph = SCRIPTS[name].graph
    names, families = _direct(_code(text), graph)
    for unit in _calls(text) | {n for u in _calls(text) for n in _needs(u)}:
        unit_names, unit_families = _direct(_code(_unit(unit)), graph)
        names |= unit_names
        families |= unit_families
    if graph:
        return names, families
    if families:
        names.add("prefix")  # derived keys are built from the prefix
    return names, families


def _lua_constants() -> dict[str, int]:
    return {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^local C_(\w+) = (-?\d+)", _read("_base"), re.M)
    }


def test_every_script_file_is_declared_and_every_declared_script_exists() -> None:
    files = {p.stem for p in LUA.glob("*.lua")} - set(PARTS)
    assert files == set(SCRIPT_NAMES)


def test_lua_code_constants_equal_the_python_enum() -> None:
    assert _lua_constants() == {c.name: c.value for c in Code}
    assert len(set(_lua_constants().values())) == len(_lua_constants()), "one meaning per number"
    horizon = re.search(r"^local STEP_HORIZON = (\d+)$", _read("_base"), re.M)
    assert horizon, "_base.lua names the scheduler's step horizon"
    assert int(horizon.group(1)) == STEP_HORIZON_MS


@pytest.mark.parametrize("part", [*PARTS, *(f"lib/{u}" for u in UNITS)])
def test_the_library_reads_no_keys_itself(part: str) -> None:
    code = _code(_read(part))
    assert "KEYS[" not in code, f"{part}: use the locals the loader binds from each script's declaration"
    assert not re.findall(r"\bk\('([a-z]+)'\)", code), "fixed-name keys come in KEYS"


@pytest.mark.parametrize("unit", UNITS)
def test_a_library_file_is_the_one_function_it_is_named_after(unit: str) -> None:
    code = _code(_unit(unit))
    functions = re.findall(r"^local function (\w+)\(", code, re.M)
    assert functions in ([unit], []), f"lib/{unit}.lua defines the functions {functions}"
    if not functions:  # a table the graph scripts' answer is built from
        assert re.search(rf"^local {unit} = ", code, re.M), f"lib/{unit}.lua defines no local {unit}"
    assert library()[unit].text == _unit(unit)


@pytest.mark.parametrize("name", [*SCRIPT_NAMES, *(f"lib/{u}" for u in UNITS)])
def test_the_uses_line_names_the_library_functions_the_code_calls(name: str) -> None:
    text = _read(name)
    declared = uses_of(text, name)
    assert list(declared) == sorted(set(declared)), f"{name}: '-- uses:' names each once, sorted"
    called = _calls(text, name.removeprefix("lib/"))
    assert set(declared) == called, (
        f"{name}: '-- uses: {', '.join(declared)}', the code calls {sorted(called)}"
    )


def _defined(text: str) -> list[str]:
    """The library functions (and tables) a text defines, in the order it defines them."""
    defined = re.findall(r"^(?:local function (\w+)\(|function (\w+)\(|local (\w+) = )", text, re.M)
    return [n for groups in defined for n in groups if n in UNITS]


def _callback(name: str) -> str:
    """Transition ``name``'s callback in the library, up to where it runs the transition."""
    lib = function_library()
    registered = f"register_function{{function_name = '{lib.function(name)}', flags = {{"
    assert lib.text.count(registered) == 1, f"{name}: registered once"
    return lib.text.split(registered)[1].split("},", 1)[1].split("return run(transition)")[0]


def test_the_library_defines_every_library_function_once_each_after_what_it_calls() -> None:
    text = function_library().text
    defined = _defined(text)
    assert sorted(defined) == UNITS, f"defined twice or missing: {sorted(set(UNITS) ^ set(defined))}"
    assert len(defined) == len(set(defined))
    forward = {n for line in re.findall(r"^local (\w+(?:, \w+)+)$", text, re.M) for n in line.split(", ")}
    for i, unit in enumerate(defined):
        late = _calls(_unit(unit), unit) - set(defined[:i]) - forward
        assert not late, f"{unit} is defined before {sorted(late)}, which it calls"
    for name in SCRIPT_NAMES:
        assert text.count(_read(name).partition("\n")[2]) == 1, f"{name}: its body, once"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_a_call_starts_afresh_the_state_of_every_library_function_it_uses(name: str) -> None:
    """A lib/ file's lower-case locals that are not functions live as long as the library: each call
    assigns those of the functions it uses (transitively) before its body runs, so no call sees a
    memo or list of another's (another queue's kind limits, switches, retention...)."""
    needed = _calls(_read(name)) | {n for u in _calls(_read(name)) for n in _needs(u)}
    state = {
        n
        for u in needed
        for line in re.findall(r"^local ([a-z_][\w, ]*) = ", _unit(u), re.M)
        for n in line.split(", ")
    }
    assigned = {n for names, _ in call_state(name) for n in names.split(", ")}
    assert assigned == state
    callback = _callback(name)
    assert all(f"  {names} = {value}\n" in callback for names, value in call_state(name))


def test_functions_that_call_each_other_are_declared_before_either_is_defined() -> None:
    lib = {
        "even": LibFunction.parse(
            "even", "-- uses: odd\nlocal function even(n) if n == 0 then return 1 end return odd(n - 1) end\n"
        ),
        "odd": LibFunction.parse(
            "odd", "-- uses: even\nlocal function odd(n) if n == 0 then return 0 end return even(n - 1) end\n"
        ),
        "parity": LibFunction.parse("parity", "-- uses: even\nlocal function parity(n) return even(n) end\n"),
        "unused": LibFunction.parse("unused", "-- uses: none\nlocal function unused() end\n"),
    }
    order, text = link(["parity"], lib)
    assert order == ("even", "odd", "parity")
    assert text.startswith("local even, odd\n")
    assert "\nfunction even(" in text
    assert "\nfunction odd(" in text
    assert "local function parity(" in text
    assert "unused" not in text
    with pytest.raises(ValueError, match="no library function 'gone'"):
        link(["gone"], lib)


async def test_mutually_recursive_functions_run_in_redis(redis: aioredis.Redis) -> None:
    lib = {
        "even": LibFunction.parse(
            "even", "-- uses: odd\nlocal function even(n) if n == 0 then return 1 end return odd(n - 1) end\n"
        ),
        "odd": LibFunction.parse(
            "odd", "-- uses: even\nlocal function odd(n) if n == 0 then return 0 end return even(n - 1) end\n"
        ),
    }
    _, text = link(["even"], lib)
    assert await redis.eval(f"{text}return {{even(6), even(7)}}", 0) == [1, 0]


async def test_the_library_loads_in_redis_with_every_transition_and_its_flags(redis: aioredis.Redis) -> None:
    lib = function_library()
    assert await redis.function_load(lib.text, replace=True) == lib.name.encode()
    (listed,) = await redis.function_list(library=lib.name)
    found = dict(zip(listed[::2], listed[1::2], strict=True))
    functions = {f[1].decode(): sorted(x.decode() for x in f[5]) for f in found[b"functions"]}
    assert functions == {lib.function(n): sorted(flags(n)) for n in SCRIPT_NAMES}


def test_every_key_is_described_once() -> None:
    assert list(KEY_DOCS) == list(KEY_NAMES)
    assert list(GRAPH_KEY_DOCS) == list(GRAPH_KEY_NAMES)
    assert all(doc.what and (doc.type or name == "prefix") for name, doc in KEY_DOCS.items())


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_header_keys_are_the_generated_ones(name: str) -> None:
    text = _read(name)
    assert with_keys_header(name, text) == text, (
        f"{name}.lua: its KEYS lines differ from its declaration and jqengine.keys.KEY_DOCS; "
        "run `python -m jqengine.luaheaders` to write them"
    )
    lines = keys_header(SCRIPTS[name])
    assert all(len(line) <= 110 for line in lines)


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_header_keys_are_the_python_declaration_and_what_the_code_touches(name: str) -> None:
    text = _read(name)
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
    header = _header(_read(name))
    line = re.search(r"^-- derived: (.+)$", header, re.M)
    assert line, f"{name}: no '-- derived:' line"
    listed = {f for f, label in FAMILIES.items() if label in line.group(1)}
    _, families = touched(name)
    assert listed == families, f"{name}: header lists {sorted(listed)}, the code builds {sorted(families)}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_scripts_return_named_codes_their_header_lists(name: str) -> None:
    code, header = _code(_read(name)), _header(_read(name))
    assert re.search(r"^-- returns: ", header, re.M), f"{name}: no '-- returns:' line"
    bare = re.findall(r"return \{(-?\d+)[,}]", code) + re.findall(r"out\[#out \+ 1\] = (-?\d+)\b", code)
    bare += re.findall(r"= \{(-?\d+)[,}]", code)
    assert not bare, f"{name}: returns bare codes {bare}; use the C_* constants of _base.lua"
    used, named = set(re.findall(r"\bC_(\w+)", code)), set(re.findall(r"\bC_(\w+)", header))
    unknown = (used | named) - set(_lua_constants())
    assert not unknown, f"{name}: unknown codes {sorted(unknown)}"
    assert used == named, f"{name}: returns {sorted(used)}, its header names {sorted(named)}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_loaded_function_binds_the_declared_keys_in_order(name: str) -> None:
    callback = _callback(name)
    assert callback.startswith("\n  callback = function(keys, args)\n")
    assert callback.splitlines()[2] == "  bind_globals()"
    binding = callback.splitlines()[3]
    names, values = binding.strip().split(" = ")
    declared = SCRIPTS[name].keys
    assert names.split(", ") == [local_name(n) for n in declared]
    assert values.split(", ") == [f"keys[{i}]" for i in range(1, len(declared) + 1)]
    if SCRIPTS[name].graph:
        assert GraphKeys("g").for_script(declared) == [f"jobq:graph:{{g}}:{n}" for n in declared]  # type: ignore[arg-type]
        return
    keys = QueueKeys("q").for_script(declared)  # type: ignore[arg-type]
    assert all(k.startswith("jobq:{q}:") for k in keys), "every key keeps the queue's hash tag"
    assert keys == ["jobq:{q}:" if n == "prefix" else f"jobq:{{q}}:{n}" for n in declared], (
        "QueueKeys names each key as the header does"
    )
