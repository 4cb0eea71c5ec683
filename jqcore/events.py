"""Lifecycle events: the one definition of what a transition records (``docs/history.md``).

Every Lua script that changes a job (``jqengine/lua``) bumps the job's ``version`` and appends one
event to its queue's stream (``jobq:{q}:events``) in the same script, through ``emit``
(``jqengine/lua/lib/emit.lua``): no transition without its event, no event without its transition.
Scheduler instances ship each owned queue's stream to the events topic (value: the JSON object below, key:
the job id) and trim what Kafka acknowledged. Delivery is at least once; readers keep one event per
``(queue, id, v)``.

Every field is always present in Kafka (``""`` / ``0`` when it does not apply), so Spark and DuckDB read
one fixed schema (the stream keeps a call's several events lean: :data:`DEFAULTS`):

========== ====== ==================================================================================
``id``     str    job id
``queue``  str    queue
``kind``   str    job kind
``from``   str    state before (``""`` for a new record)
``to``     str    state after (see :data:`STATES`)
``v``      int    the job's version after this transition: 1, 2, 3 … per job, without gaps
``at``     int    when (ms since epoch, the caller's clock as every script's ``now``)
``attempt`` int   attempts spent so far (the running attempt's number from ``running`` on)
``worker`` str    the worker that claimed the job (on ``running`` and the transitions of that attempt)
``error``  str    error class of a failed attempt (``ValueError``), else ``""``
``digest`` str    12 hex digits of the error message's SHA-1 (group equal errors), else ``""``
``message`` str   the error message or the reason of the transition, at most 200 characters
``run_at`` int    when a delayed job becomes due (``to == "delayed"``), else 0
``origin`` str    the Kafka record the job came from, ``topic/partition/offset`` (enqueue events)
``accepted_at`` int when the gateway (or producer) accepted the job (enqueue events), else 0
========== ====== ==================================================================================

An event that ends a job (``to`` in :data:`ENDS`) also carries the job's payload (:data:`PAYLOAD_FIELDS`),
added by the shipper from the job's Redis record (``jqruntime.stores.archive``): not in the stream, only in
Kafka and the history.

The hop stamps of a job: ``accepted_at`` (gateway), ``origin`` (Kafka), the first event's ``at`` (the
relay's write into Redis), then the claims (``to == "running"``, with ``worker``) and the outcomes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

__all__ = [
    "DEFAULTS",
    "ENDS",
    "FIELDS",
    "PAYLOAD_FIELDS",
    "STATES",
    "TERMINAL",
    "Event",
    "Failure",
    "failure",
    "parse",
]

STATES: Final = (
    "far",
    "delayed",
    "pending",
    "waiting",
    "parked",
    "running",
    "deferred",
    "completed",
    "canceled",
    "errored",
    "expired",
    "deleted",
)
"""Every ``to`` an event may carry: the engine's job states (``deferred``: its handler handed its
completion to a job it spawned, :func:`worker.defer_to`), ``far`` (kept in the schedule topic) and
``deleted`` (removed on request: ``forget``, a dead-letter purge)."""

TERMINAL: Final = frozenset({"completed", "canceled", "errored", "expired", "deleted"})
ENDS: Final = TERMINAL - {"deleted"}
"""The ``to`` of the events that carry the job's payload (the ends a job can be replayed from)."""

FIELDS: Final[tuple[tuple[str, type], ...]] = (
    ("id", str),
    ("queue", str),
    ("kind", str),
    ("from", str),
    ("to", str),
    ("v", int),
    ("at", int),
    ("attempt", int),
    ("worker", str),
    ("error", str),
    ("digest", str),
    ("message", str),
    ("run_at", int),
    ("origin", str),
    ("accepted_at", int),
)
"""The event's fields in schema order (Spark's and DuckDB's column order)."""

DEFAULTS: Final[dict[str, Any]] = {name: "" if kind is str else 0 for name, kind in FIELDS}
"""Each field's value when it does not apply. The stream keeps an event of a script call's several without
the fields at these values (and without ``queue``: the stream's own), :func:`jqengine.reads.decode_entry`
puts them back; Kafka's records carry every field."""

PAYLOAD_FIELDS: Final[tuple[tuple[str, type], ...]] = (
    ("args", str),
    ("meta", str),
    ("result", str),
    ("envelope", str),
    ("truncated", str),
)
"""What the shipper adds to an event in :data:`ENDS` (``jqruntime.stores.archive``; ``""`` on every other
event): the job's ``args``, ``meta`` and ``result`` as JSON text (each at most
``JOBQ_EVENTS_PAYLOAD_MAX_BYTES``; a longer one is cut there and named in ``truncated``, comma-separated), and
``envelope``, the JSON object of the envelope fields a replay keeps
(``jqruntime.stores.archive.REPLAY_FIELDS``)."""


@dataclass(frozen=True, slots=True)
class Event:
    id: str
    queue: str
    kind: str
    from_state: str
    to: str
    v: int
    at: int
    attempt: int = 0
    worker: str = ""
    error: str = ""
    digest: str = ""
    message: str = ""
    run_at: int = 0
    origin: str = ""
    accepted_at: int = 0

    @classmethod
    def from_mapping(cls, d: dict[str, Any]) -> Event:
        return cls(
            id=str(d["id"]),
            queue=str(d["queue"]),
            kind=str(d.get("kind", "")),
            from_state=str(d.get("from", "")),
            to=str(d["to"]),
            v=int(d["v"]),
            at=int(d["at"]),
            attempt=int(d.get("attempt", 0)),
            worker=str(d.get("worker", "")),
            error=str(d.get("error", "")),
            digest=str(d.get("digest", "")),
            message=str(d.get("message", "")),
            run_at=int(d.get("run_at", 0) or 0),
            origin=str(d.get("origin", "")),
            accepted_at=int(d.get("accepted_at", 0) or 0),
        )


def parse(raw: bytes | str) -> Event:
    """One event from its JSON bytes (a stream entry's or a Kafka record's value)."""
    return Event.from_mapping(orjson.loads(raw))


class Failure(NamedTuple):
    """A failed attempt's error as its events carry it: ``error`` (the class), ``digest``, ``message``."""

    error: str
    digest: str
    message: str


_LUA_SPACE = " \t\n\v\f\r"
_CLASS_AND_MESSAGE = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*):[ \t\n\v\f\r]*(.*)", re.DOTALL)
_CLASS_ONLY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def failure(text: str | None) -> Failure:
    """What ``_lib.lua``'s ``failure()`` makes of a worker's error text, in Python: the last non-blank line
    (a traceback ends with ``Class: message``; ``Retry: why`` and plain text work too) split into the class
    and the message, and ``digest``, 12 hex digits of the SHA-1 of ``"<class>: <message>"`` — the
    ``digest`` of the failure's events, which ``jobq history errors`` groups by and ``jobq dead ls`` shows
    (``tests/cli/test_dead.py`` holds the two to the same value)."""
    last = ""
    for line in (text or "").split("\n"):
        if line.strip(_LUA_SPACE):
            last = line
    last = last.lstrip(_LUA_SPACE)
    m = _CLASS_AND_MESSAGE.fullmatch(last)
    if m is not None:
        cls, msg = m.group(1), m.group(2)
    elif _CLASS_ONLY.fullmatch(last):
        cls, msg = last, ""
    else:
        cls, msg = "", last
    digest = hashlib.sha1(f"{cls}: {msg}".encode(), usedforsecurity=False).hexdigest()[:12]
    return Failure(cls, digest, msg.encode()[:200].decode("utf-8", "ignore"))
