"""The Lua transitions, each declared once: its file in ``lua/`` and the ``KEYS`` it receives; and the
loader that builds what Redis is sent: one Redis Functions library (:func:`function_library`).

A declaration names, in :data:`jqengine.keys.KEY_NAMES` order, every key the script touches at a
fixed name (BullMQ's contract: nothing it touches is hidden from Redis). The same list, in the same order,
is the script's header (``-- KEYS[i] <name> <TYPE> <what>``, generated from the declaration and
:data:`jqengine.keys.KEY_DOCS` by :mod:`jqengine.luaheaders`; ``python -m jqengine.luaheaders`` rewrites
the files), what :meth:`jqengine.keys.QueueKeys.for_script` passes, and the binding each call of the
transition's function makes first: ``P, READY, ... = keys[1], keys[2], ...``.

The shared Lua lives in ``lua/lib/``, one local function a file named after it (two files define a table
instead: ``released``, ``to_cancel``, the graph scripts' answer lists). A script's header and each library
file name the library functions they call on a ``-- uses:`` line (:func:`pulled`: what a transition
reaches, transitively); the library defines each once, each after the ones it uses (:func:`link`), and a
call starts afresh the per-call state of those its transition reaches (:func:`call_state`).
``tests/state/test_lua_contract.py`` checks the declarations against each other and against the code.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import cast

from jqengine.keys import GRAPH_KEY_NAMES, KEY_NAMES, GraphKeyName, KeyName

__all__ = [
    "SCRIPTS",
    "SCRIPT_NAMES",
    "FunctionLibrary",
    "LibFunction",
    "Script",
    "call_state",
    "flags",
    "function_library",
    "library",
    "link",
    "local_name",
    "pulled",
    "uses_of",
]


@dataclass(frozen=True, slots=True)
class Script:
    """One transition: ``lua/<name>.lua`` and the names of its ``KEYS``, in order."""

    name: str
    keys: tuple[KeyName, ...] | tuple[GraphKeyName, ...]
    graph: bool = False
    """A task-graph script: its ``KEYS`` are graph keys (:data:`~jqengine.keys.GRAPH_KEY_NAMES`)."""


def _declare(name: str, keys: str) -> Script:
    """``keys``: the names, space-separated (each one of :data:`~jqengine.keys.KEY_NAMES`)."""
    names = tuple(keys.split())
    unknown = [n for n in names if n not in KEY_NAMES]
    if unknown:
        raise ValueError(f"{name}: unknown key names {unknown}")
    return Script(name, cast("tuple[KeyName, ...]", names))


def _declare_graph(name: str, keys: str) -> Script:
    names = tuple(keys.split())
    unknown = [n for n in names if n not in GRAPH_KEY_NAMES]
    if unknown:
        raise ValueError(f"{name}: unknown graph key names {unknown}")
    return Script(name, cast("tuple[GraphKeyName, ...]", names), graph=True)


_ALL_GRAPH_KEYS = " ".join(GRAPH_KEY_NAMES)


_TRANSITIONS = (
    _declare(
        "enqueue_batch",
        "prefix ready delayed far running done dead config kinds kindrun fairring fairrun fairtime"
        " counts stats xhead fences wake waiters sched events gdone",
    ),
    _declare(
        "claim",
        "prefix ready running done dead config kinds kindrun fairring fairrun fairtime counts stats"
        " xhead wake waiters sched events gdone",
    ),
    _declare("unwait", "prefix waiters"),
    _declare(
        "extend",
        "prefix ready running done dead config kinds kindrun fairring fairrun fairtime counts stats xhead"
        " wake events gdone",
    ),
    _declare(
        "complete",
        "prefix ready running done dead config kinds kindrun fairring fairrun fairtime counts stats xhead"
        " wake events gdone",
    ),
    _declare(
        "fail",
        "prefix ready delayed running done dead config kinds kindrun fairring fairrun fairtime counts"
        " stats xhead wake sched events gdone",
    ),
    _declare(
        "settle",
        "prefix ready delayed running done dead config kinds kindrun fairring fairrun fairtime counts"
        " stats xhead wake sched events gdone",
    ),
    _declare(
        "settle_claim",
        "prefix ready delayed running done dead config kinds kindrun fairring fairrun fairtime counts"
        " stats xhead wake sched events gdone",
    ),
    _declare(
        "defer",
        "prefix ready running done dead config kinds kindrun fairring fairrun fairtime counts stats xhead"
        " wake events gdone",
    ),
    _declare(
        "tail_done",
        "prefix ready delayed done dead config kinds fairring fairrun fairtime counts stats xhead wake"
        " sched events gdone",
    ),
    _declare(
        "cancel_running",
        "prefix ready running done dead config kinds kindrun fairring fairrun fairtime counts stats xhead"
        " wake events gdone",
    ),
    _declare(
        "snooze",
        "prefix ready delayed running config kinds kindrun fairring fairrun fairtime counts stats wake sched"
        " events",
    ),
    _declare(
        "hand_back",
        "prefix ready delayed running done dead config kinds kindrun fairring fairrun fairtime counts stats"
        " xhead wake sched events gdone",
    ),
    _declare(
        "release",
        "prefix ready running done dead config kinds kindrun fairring fairrun fairtime counts stats"
        " xhead wake events gdone",
    ),
    _declare(
        "cancel",
        "prefix ready delayed far done dead config fairring fairrun fairtime counts stats xhead wake"
        " events gdone",
    ),
    _declare("schedule_far", "prefix far config stats events"),
    _declare("drop_far", "far"),
    _declare(
        "promote_due",
        "prefix ready delayed running done dead config kinds kindrun fairring fairrun fairtime counts"
        " stats xhead wake waiters sched events gdone",
    ),
    _declare(
        "reap_expired",
        "prefix ready running done dead config kinds kindrun fairring fairrun fairtime counts stats"
        " xhead wake events gdone",
    ),
    _declare("gc", "prefix done dead"),
    _declare(
        "dead_retry",
        "prefix ready done dead config fairring fairrun fairtime counts stats xhead wake events",
    ),
    _declare("dead_purge", "prefix done dead config stats events"),
    _declare("forget", "prefix done dead config stats events"),
    _declare("configure_queue", "ready config wake"),
    _declare(
        "configure_kind",
        "prefix ready config kinds kindrun fairring fairrun fairtime counts stats wake events",
    ),
    _declare("switch_lift", "prefix ready config fairring fairrun fairtime counts stats wake events"),
    _declare("fair_index", "prefix ready config fairring fairrun fairtime"),
    _declare("events_read", "events"),
    _declare("events_trim", "stats events"),
    _declare("job_fields", "prefix"),
    _declare_graph("graph_create", "graph nodes kids parents nstate pending times rel gevents"),
    _declare_graph("graph_report", _ALL_GRAPH_KEYS),
    _declare_graph("graph_cancel", _ALL_GRAPH_KEYS),
    _declare_graph("graph_retry", _ALL_GRAPH_KEYS),
)

SCRIPTS = MappingProxyType({s.name: s for s in _TRANSITIONS})
SCRIPT_NAMES = tuple(SCRIPTS)


def local_name(key: KeyName | GraphKeyName) -> str:
    """The Lua local a key is bound to: ``P`` for the prefix, else the name in upper case."""
    return "P" if key == "prefix" else key.upper()


@cache
def _read(name: str) -> str:
    return resources.files("jqengine").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


_USES = re.compile(r"^-- uses:((?:[^\n]*,\n--[ ]+)*[^\n]*)$", re.M)
"""A ``-- uses:`` line; one that ends with a comma goes on in the next comment line."""


def uses_of(text: str, where: str) -> tuple[str, ...]:
    """The library functions a script or library file names on its ``-- uses:`` line (``none``: no
    function), in the order named."""
    lines = _USES.findall(text)
    if len(lines) != 1:
        raise ValueError(f"{where} must have one '-- uses:' line (names, or 'none'), not {len(lines)}")
    names = tuple(n for n in re.split(r"[\s,-]+", lines[0]) if n)
    return () if names == ("none",) else names


_DEFINES = re.compile(r"^local (?:function (\w+)\(|(\w+) =)", re.M)
"""A top-level ``local function <name>(`` or ``local <name> =`` (one pattern for every file: compiling
one a name cost a process ~10 ms at its first call)."""


@dataclass(frozen=True, slots=True)
class LibFunction:
    """One file of ``lua/lib/``: the local it defines (its file's name), its text, what it uses."""

    name: str
    text: str
    uses: tuple[str, ...]

    @property
    def function(self) -> bool:
        """It defines a function (``local function <name>(``), not a value (``local <name> =``)."""
        return f"\nlocal function {self.name}(" in f"\n{self.text}"

    @classmethod
    def parse(cls, name: str, text: str) -> LibFunction:
        defines = [a or b for a, b in _DEFINES.findall(text) if name in (a, b)]
        if len(defines) != 1:
            raise ValueError(f"lua/lib/{name}.lua must define the local {name} once")
        return cls(name, text, uses_of(text, f"lua/lib/{name}.lua"))


@cache
def library() -> Mapping[str, LibFunction]:
    """Every file of ``lua/lib/``, by name."""
    files = resources.files("jqengine").joinpath("lua", "lib").iterdir()
    lib = {
        f.name.removesuffix(".lua"): LibFunction.parse(
            f.name.removesuffix(".lua"), f.read_text(encoding="utf-8")
        )
        for f in files
        if f.name.endswith(".lua")
    }
    unknown = {f"{n} uses {u}" for n, f in lib.items() for u in f.uses if u not in lib}
    if unknown:
        raise ValueError(f"lua/lib: unknown library functions: {sorted(unknown)}")
    return MappingProxyType(lib)


def _groups(roots: Iterable[str], lib: Mapping[str, LibFunction]) -> list[list[str]]:
    """What ``roots`` use, transitively, as the strongly connected groups of the uses graph (Tarjan),
    every group after the groups it uses; a group of more than one is mutual recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(name: str) -> None:
        if name not in lib:
            raise ValueError(f"no library function {name!r} in lua/lib/")
        index[name] = low[name] = len(index)
        stack.append(name)
        for used in sorted(lib[name].uses):
            if used not in index:
                visit(used)
                low[name] = min(low[name], low[used])
            elif used in stack:
                low[name] = min(low[name], index[used])
        if low[name] == index[name]:
            cut = stack.index(name)
            groups.append(sorted(stack[cut:]))
            del stack[cut:]

    for root in sorted(set(roots)):
        if root not in index:
            visit(root)
    return groups


def link(roots: Iterable[str], lib: Mapping[str, LibFunction]) -> tuple[tuple[str, ...], str]:
    """The library functions ``roots`` use, transitively, each once, and their text in an order where each
    is defined before the functions that call it. Functions that call each other (mutual recursion) are
    declared first (``local a, b``) and then assigned (``function a(``), so each sees the others."""
    order: list[str] = []
    parts: list[str] = []
    for group in _groups(roots, lib):
        order += group
        if len(group) == 1:
            parts.append(lib[group[0]].text)
            continue
        values = [n for n in group if not lib[n].function]
        if values:
            raise ValueError(f"lua/lib: {values} in a cycle of uses {group}: only functions may recurse")
        parts.append(f"local {', '.join(group)}\n")
        parts += [lib[n].text.replace(f"local function {n}(", f"function {n}(", 1) for n in group]
    return tuple(order), "".join(parts)


@cache
def _reaches(name: str) -> frozenset[str]:
    """Library function ``name`` and every one it uses, transitively."""
    lib, seen, todo = library(), {name}, [name]
    while todo:
        for used in lib[todo.pop()].uses:
            if used not in seen:
                seen.add(used)
                todo.append(used)
    return frozenset(seen)


@cache
def _order() -> tuple[str, ...]:
    """Every library function, each after those it uses (the library's order)."""
    return link(library(), library())[0]


@cache
def pulled(name: str) -> tuple[str, ...]:
    """The library functions script ``name`` uses, transitively, in the library's order."""
    lib = library()
    reached = set().union(*(_reaches(u) for u in uses_of(_read(name), f"{name}.lua") if u in lib))
    unknown = set(uses_of(_read(name), f"{name}.lua")) - set(lib)
    if unknown:
        raise ValueError(f"{name}.lua uses {sorted(unknown)}: no such function in lua/lib/")
    return tuple(n for n in _order() if n in reached)


_STATE = re.compile(r"local ([a-z_][a-z0-9_]*(?:, [a-z_][a-z0-9_]*)*) = (.+)$")
"""A ``lua/lib/`` file's per-call state: a lower-case local that is not a function, on one line (a memo, a
list kept for one call). Upper-case locals are constants."""


@cache
def _state_of(name: str) -> tuple[tuple[str, str], ...]:
    lines = (x for x in library()[name].text.splitlines() if x.startswith("local ") and x[6:7].islower())
    return tuple((m[1], m[2]) for m in map(_STATE.match, lines) if m)


@cache
def call_state(name: str) -> tuple[tuple[str, str], ...]:
    """The per-call state of the library functions transition ``name`` uses: ``(names, value)`` pairs,
    each assigned afresh at the start of each of its calls."""
    return tuple(s for u in pulled(name) for s in _state_of(u))


_MARKERS = ("--@LIBRARY\n", "--@UNBIND\n", "--@TRANSITIONS\n")
"""The lines of ``_frame.lua`` the loader fills: ``lua/lib/``, the line that unbinds the key locals once a
call ended, the transitions."""
_NAME = "<jobq library>"
"""Where the library's name stands in its text until the text's hash names it."""


def _flags(name: str, shebang: str) -> tuple[str, ...]:
    """The flags on a script's ``#!lua flags=a,b`` line (Redis's script flags, the same for functions)."""
    if not shebang.startswith("#!lua"):
        raise ValueError(f"{name}.lua must start with a '#!lua' shebang line")
    _, _, flags = shebang.partition("flags=")
    return tuple(f for f in flags.strip().split(",") if f)


@cache
def flags(name: str) -> tuple[str, ...]:
    """Transition ``name``'s flags (``no-writes``: called by ``FCALL_RO``; ``allow-oom``)."""
    return _flags(name, _read(name).partition("\n")[0])


def _transition(name: str) -> str:
    """Transition ``name`` in the library: its body as the function ``transition`` and its registration,
    whose callback binds the call's ``KEYS``, ``ARGV`` and ``NOW`` and starts its per-call state afresh."""
    shebang, _, body = _read(name).partition("\n")
    script = SCRIPTS[name]
    names = ", ".join(local_name(k) for k in script.keys)
    values = ", ".join(f"keys[{i}]" for i in range(1, len(script.keys) + 1))
    state = "".join(f"  {names} = {value}\n" for names, value in call_state(name))
    lua_flags = ", ".join(f"'{f}'" for f in _flags(name, shebang))
    lib = library()
    shared = [local_name(k) for k in script.keys] + ["ARGV", "NOW"]
    shared += [n for n in pulled(name) if lib[n].function]
    hot = ", ".join(n for n in shared if n in body)  # a substring will do: a copy too many costs a move
    bind = f"local {hot} = {hot}\n" if hot else ""
    return (
        f"do\nlocal function transition()\n{bind}{body}\nend\n"
        f"register_function{{function_name = '{_NAME}_{name}', flags = {{{lua_flags}}},\n"
        f"  callback = function(keys, args)\n  bind_globals()\n  {names} = {values}\n"
        f"  ARGV, NOW = args, tonumber(args[1])\n"
        f"{state}  return run(transition)\nend}}\nend\n"
    )


@dataclass(frozen=True, slots=True)
class FunctionLibrary:
    """The engine's Lua as one Redis Functions library: its name (``jobq_`` and a hash of its text, so
    two versions of jobq loaded in one Redis never replace each other's) and the text ``FUNCTION LOAD``
    is sent."""

    name: str
    text: str

    def function(self, script: str) -> str:
        """The name transition ``script`` is registered under (function names are one namespace in a
        Redis, across libraries: each carries its library's)."""
        return f"{self.name}_{script}"


_LUA_GLOBALS = (
    "redis, cjson, cmsgpack, string, table, math, tonumber, tostring, type, pairs, ipairs, next, unpack,"
    " pcall, error"
)
_GLOBALS = (
    "local register_function = redis.register_function\n"
    f"local function runtime_globals() return {_LUA_GLOBALS} end\n"
    f"local {_LUA_GLOBALS}\n"
    f"local function bind_globals() if not redis then {_LUA_GLOBALS} = runtime_globals() end end\n"
)
"""The library's first lines: the globals its code reads, as locals of the library (upvalues of its
functions), set at its first call. A function's global is looked up in Redis's globals table, found
missing there and then in the table its ``__index`` names (Redis 7.0 swaps that table between a library's
load, which sees ``redis.register_function`` and no ``cjson``, and its calls): two lookups and a
metamethod for each ``tonumber``, ``redis.call``..."""


def _key_locals() -> list[str]:
    return list(dict.fromkeys(local_name(k) for k in (*KEY_NAMES, *GRAPH_KEY_NAMES)))


@cache
def function_library() -> FunctionLibrary:
    """The library: the shebang (``#!lua name=...``), the key locals and ``ARGV``, ``_base.lua`` (``NOW``,
    the codes), then ``_frame.lua`` with every function of ``lua/lib/`` (:func:`link`: each once, each
    after the ones it uses) and every transition (:func:`_transition`) in place of its marker lines."""
    frame = _read("_frame")
    for marker in _MARKERS:
        if frame.count(marker) != 1:
            raise ValueError(f"_frame.lua must hold the line {marker!r} once")
    keys = _key_locals()
    _, libs = link(library(), library())
    fill = {
        _MARKERS[0]: libs,
        _MARKERS[1]: f"  {', '.join(keys)}, ARGV = nil\n",
        _MARKERS[2]: "".join(_transition(n) for n in SCRIPT_NAMES),
    }
    for marker, text in fill.items():
        frame = frame.replace(marker, text)
    text = f"#!lua name={_NAME}\n{_GLOBALS}local {', '.join(keys)}\nlocal ARGV\n{_read('_base')}\n{frame}"
    name = f"jobq_{hashlib.sha1(text.encode()).hexdigest()[:16]}"
    return FunctionLibrary(name, text.replace(_NAME, name))
