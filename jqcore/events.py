"""Lifecycle events: the one definition of what a transition records (``docs/history.md``).

Every Lua script that changes a job (``jqengine/lua``) bumps the job's ``version`` and appends one
event to its queue's stream (``jobq:{q}:events``) in the same script, through ``emit``
(``jqengine/lua/lib/emit.lua``): no transition without its event, no event without its transition.
Scheduler instances ship each owned queue's stream to the events topic and trim what Kafka acknowledged.
A record's value is a JSON array of events (the objects below): a shipping round's events that belong on
one partition, in the order they happened (:func:`pack`; a job's events go to the partition of its id,
:func:`partition_of`, so they stay in order). Records shipped before events were batched hold one event
object each; every reader decodes a record with :func:`decode_record`, which takes both. Delivery is at
least once (a record shipped again repeats each of its events); readers keep one event per
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
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import orjson

__all__ = [
    "DEFAULTS",
    "ENDS",
    "FIELDS",
    "PAYLOAD_FIELDS",
    "RECORD_MAX_BYTES",
    "STATES",
    "TERMINAL",
    "Event",
    "Failure",
    "decode_record",
    "failure",
    "pack",
    "parse",
    "parse_record",
    "partition_of",
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
"""Each field's value when it does not apply. A queue's stream keeps a script call's events without the
fields at these values (and without ``queue``: the stream's own), :func:`jqengine.reads.decode_entry`
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
    """One event from its JSON bytes (a stream entry's; a Kafka record's: :func:`parse_record`)."""
    return Event.from_mapping(orjson.loads(raw))


# ---- the events topic's records ----------------------------------------------------------------------
RECORD_MAX_BYTES: Final = 1_000_000
"""An events record's value at most (:func:`pack`): below Kafka's default ``max.message.bytes`` (1 MiB), so
a topic made outside jobq takes it too. A larger round splits; an event larger alone is a record alone."""


def partition_of(job_id: str, partitions: int) -> int:
    """The events topic's partition of a job's events: the CRC-32 of its id modulo the partitions, where
    librdkafka's default partitioner (``consistent_random``) put a record keyed by the id before events
    were batched, so a job's events stay on one partition across the upgrade."""
    return zlib.crc32(job_id.encode()) % partitions


def pack(
    events: Iterable[tuple[str, bytes]], partitions: int, max_bytes: int = RECORD_MAX_BYTES
) -> list[tuple[int, bytes]]:
    """The events topic's records of a shipping round: ``events`` (job id, the event's JSON) in the order
    they happened, grouped by :func:`partition_of` into JSON arrays, each at most ``max_bytes`` (a larger
    group splits, in order). Returns ``(partition, value)``, each partition's records in order."""
    groups: dict[int, list[list[bytes]]] = {}
    sizes: dict[int, int] = {}
    for job_id, value in events:
        p = partition_of(job_id, partitions)
        chunks = groups.setdefault(p, [[]])
        size = sizes.get(p, 1)  # "[", then each event with the "," or "]" after it
        if chunks[-1] and size + len(value) + 1 > max_bytes:
            chunks.append([])
            size = 1
        chunks[-1].append(value)
        sizes[p] = size + len(value) + 1
    return [(p, b"[" + b",".join(chunk) + b"]") for p, chunks in groups.items() for chunk in chunks]


def decode_record(raw: bytes | str) -> list[dict[str, Any]]:
    """The events of one record of the events topic: a JSON array of events, or one event object (a record
    shipped before events were batched). Raises ValueError when it is neither."""
    data = orjson.loads(raw)
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list) and all(isinstance(e, dict) for e in data):
        return data
    raise ValueError("not an events record: neither an event object nor an array of them")


def parse_record(raw: bytes | str) -> list[Event]:
    """The :class:`Event` s of one record of the events topic (:func:`decode_record`); raises ValueError,
    KeyError or TypeError when the record or one of its events is not one."""
    return [Event.from_mapping(d) for d in decode_record(raw)]


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
