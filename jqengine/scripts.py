"""The Lua transitions, each declared once: its file in ``lua/`` and the ``KEYS`` it receives.

A declaration names, in :data:`jqengine.keys.KEY_NAMES` order, every key the script touches at a
fixed name (BullMQ's contract: nothing it touches is hidden from Redis). The same list, in the same order,
is the script's header (``-- KEYS[i] <name> ...``), what :meth:`jqengine.keys.QueueKeys.for_script`
passes, and the binding the loader puts before ``_lib.lua``: ``local P, READY, ... = KEYS[1], KEYS[2], ...``.
``tests/state/test_lua_contract.py`` checks the three against each other and against the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import cast

from jqcore.events import DEFAULTS
from jqengine.keys import GRAPH_KEY_NAMES, KEY_NAMES, GraphKeyName, KeyName

__all__ = ["SCRIPTS", "SCRIPT_NAMES", "Script", "local_name", "source"]


@dataclass(frozen=True, slots=True)
class Script:
    """One transition: ``lua/<name>.lua`` and the names of its ``KEYS``, in order."""

    name: str
    keys: tuple[KeyName, ...] | tuple[GraphKeyName, ...]
    graph: bool = False
    """A task-graph script: its ``KEYS`` are graph keys (:data:`~jqengine.keys.GRAPH_KEY_NAMES`) and
    ``_glib.lua`` follows ``_lib.lua``."""


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
        "prefix ready running done dead config kindrun fairring fairrun fairtime counts stats xhead wake"
        " events gdone",
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
        "prefix ready running done dead config kindrun fairring fairrun fairtime counts stats xhead wake"
        " events gdone",
    ),
    _declare(
        "tail_done",
        "prefix ready delayed done dead config kinds fairring fairrun fairtime counts stats xhead wake"
        " sched events gdone",
    ),
    _declare(
        "cancel_running",
        "prefix ready running done dead config kindrun fairring fairrun fairtime counts stats xhead wake"
        " events gdone",
    ),
    _declare(
        "snooze",
        "prefix ready delayed running config kindrun fairring fairrun fairtime counts stats wake sched"
        " events",
    ),
    _declare(
        "hand_back",
        "prefix ready delayed running done dead config kindrun fairring fairrun fairtime counts stats"
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


def _read(name: str) -> str:
    return resources.files("jqengine").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


_MARKER = "--@TRANSITION\n"
"""The line of ``_frame.lua`` the transition takes the place of."""
_DEFAULTS_MARKER = "--@EVENT_DEFAULTS\n"
"""The line of ``_frame.lua`` the event schema's defaults take the place of."""


def _event_defaults() -> str:
    """``local EVENT_DEFAULTS = {...}``: :data:`jqcore.events.DEFAULTS` as Lua (``queue`` left out: the
    frame sets the stream's), what the frame completes a single lean event with."""
    lua = {k: "''" if isinstance(v, str) else str(v) for k, v in DEFAULTS.items() if k != "queue"}
    pairs = ", ".join(f"['{k}'] = {v}" for k, v in lua.items())
    return f"local EVENT_DEFAULTS = {{{pairs}}}\n"


@cache
def source(name: str) -> str:
    """The script text sent to Redis: shebang line, then ``_frame.lua`` around the transition — the
    binding of its declared ``KEYS``, the shared helpers and the transition body, as one function whose
    lifecycle events the frame writes once it ended."""
    text = _read(name)
    shebang, _, body = text.partition("\n")
    if not shebang.startswith("#!lua"):
        raise ValueError(f"{name}.lua must start with a '#!lua' shebang line")
    script = SCRIPTS[name]
    names = ", ".join(local_name(k) for k in script.keys)
    values = ", ".join(f"KEYS[{i}]" for i in range(1, len(script.keys) + 1))
    libs = _read("_lib") + ("\n" + _read("_glib") if script.graph else "")
    frame = _read("_frame")
    for marker in (_MARKER, _DEFAULTS_MARKER):
        if frame.count(marker) != 1:
            raise ValueError(f"_frame.lua must hold the line {marker!r} once")
    frame = frame.replace(_DEFAULTS_MARKER, _event_defaults())
    return f"{shebang}\n" + frame.replace(_MARKER, f"local {names} = {values}\n{libs}\n{body}\n")
