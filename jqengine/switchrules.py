"""Kill switches, the pure part: what a switch is, which queues and jobs it matches, and the JSON list a
queue's configuration carries for its claim script (``lua/lib/switched.lua``).

A switch stops matching jobs **at claim time**: ``park`` keeps them (state ``parked``, no attempt spent)
until the switch is lifted, ``dead`` moves them to the dead letters with the reason ``kill switch <name>``.
It matches by queue (a glob; ``*`` = every queue), kind (exact; empty = every kind) and meta pairs (every
pair equal, as strings). The switch list lives in each queue's own configuration (the same Cluster slot as
its jobs), so a claim never depends on another store: a claim always runs, with the switches its queue
holds (see :mod:`jqengine.admin` for how the list reaches every queue).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from jqengine.codes import SwitchInvalid

__all__ = [
    "ACTIONS",
    "MAX_META_PAIRS",
    "RESTORED_FIELD",
    "Switch",
    "SwitchAction",
    "queue_list",
    "switch_from_json",
    "switches_of",
]

SwitchAction = Literal["park", "dead"]
ACTIONS: tuple[SwitchAction, ...] = ("park", "dead")
MAX_META_PAIRS = 8
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KIND_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_QUEUE_GLOB_RE = re.compile(r"[a-z0-9*?\[\]][a-z0-9._\-*?\[\]]{0,63}")
_META_KEY_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
RESTORED_FIELD = "."
"""A field of the switches' hash that is no switch (a name starts alphanumeric): present once the kept
switches (Consul's copy) were put back in this Redis, so gone with the switches when Redis loses its
data — what tells a Redis that lost them from one where they were lifted
(:meth:`jqengine.admin.Admin.restore_switches`)."""


@dataclass(frozen=True, slots=True)
class Switch:
    """One kill switch (see the module doc)."""

    name: str
    action: SwitchAction = "park"
    queue: str = "*"
    """A glob over queue names."""
    kind: str = ""
    """A job kind, exactly; empty: every kind."""
    meta: Mapping[str, str] = field(default_factory=dict)
    set_at_ms: int = 0
    by: str = ""
    """Who flipped it (a token's name, an operator)."""

    def __post_init__(self) -> None:
        problems = []
        if not self.valid_name(self.name):
            problems.append(f"name {self.name!r} must be 1-64 of A-Z a-z 0-9 _ . - (starting alphanumeric)")
        if self.action not in ACTIONS:
            problems.append(f"action must be one of {', '.join(ACTIONS)}, not {self.action!r}")
        if not _QUEUE_GLOB_RE.fullmatch(self.queue):
            problems.append(f"queue {self.queue!r} is not a queue name or glob")
        if self.kind and not _KIND_RE.fullmatch(self.kind):
            problems.append(f"kind {self.kind!r} is not a job kind")
        if len(self.meta) > MAX_META_PAIRS:
            problems.append(f"at most {MAX_META_PAIRS} meta pairs")
        for key, value in self.meta.items():
            if not _META_KEY_RE.fullmatch(key) or not isinstance(value, str) or len(value) > 256:
                problems.append(f"meta {key!r}: keys are meta keys, values strings of at most 256 characters")
        if not problems and self.queue.strip("*") == "" and not self.kind and not self.meta:
            problems.append("it would stop every job of every queue: name a kind, meta pairs or queues")
        if problems:
            raise SwitchInvalid("kill switch: " + "; ".join(problems))

    @staticmethod
    def valid_name(name: str) -> bool:
        """Whether ``name`` can name a switch (what a lookup by a name checks first)."""
        return _NAME_RE.fullmatch(name) is not None

    def applies_to(self, queue: str) -> bool:
        return fnmatch.fnmatchcase(queue, self.queue)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action": self.action,
            "queue": self.queue,
            "kind": self.kind,
            "meta": dict(self.meta),
            "set_at_ms": self.set_at_ms,
            "by": self.by,
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.as_dict())


def switch_from_json(raw: bytes | str) -> Switch:
    data = orjson.loads(raw)
    return Switch(
        name=data["name"],
        action=data["action"],
        queue=data.get("queue", "*"),
        kind=data.get("kind", ""),
        meta=data.get("meta") or {},
        set_at_ms=int(data.get("set_at_ms", 0)),
        by=data.get("by", ""),
    )


def switches_of(raw: Mapping[Any, Any]) -> list[Switch]:
    """The switches of the hash's fields (``HGETALL``), the :data:`RESTORED_FIELD` mark left out."""
    return [switch_from_json(v) for k, v in raw.items() if k not in (RESTORED_FIELD, RESTORED_FIELD.encode())]


def queue_list(queue: str, switches: Iterable[Switch]) -> str:
    """The switch list ``queue``'s configuration carries (``''`` when none applies): the switches whose
    glob matches it, by name, as the claim script reads them (name, action, kind, meta)."""
    mine = sorted((s for s in switches if s.applies_to(queue)), key=lambda s: s.name)
    if not mine:
        return ""
    # a Lua table from an empty JSON object is empty: meta {} reads as "no pairs"
    rows = [{"name": s.name, "action": s.action, "kind": s.kind, "meta": dict(s.meta)} for s in mine]
    return orjson.dumps(rows).decode()
