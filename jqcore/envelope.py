"""Envelope v1: the one contract every producer (gateway, Spark, canary, CLI) and consumer shares.

A job travels as one JSON object, the Kafka record value. :func:`decode` validates it strictly and keeps
the bytes it was given (``Envelope.raw``); :func:`encode` returns those same bytes when they exist, so the
relay stores exactly what the producer wrote and ``args`` passes through byte for byte (Slack lost days
to JSON escaping differences between languages). The JSON Schema of the same contract is
``jqcore/schema/envelope.v1.json``; golden examples live in ``tests/fixtures/envelopes/``.

Policy on unknown fields: v1 refuses them (``unknown field``). A producer that needs a new field bumps
``v``; decoders refuse versions they do not know (``envelope_version_unsupported``) instead of guessing.

Every failure is an :class:`~jqcore.errors.EnvelopeError` whose ``fields`` name each field and problem.

One verdict, two paths (both in :mod:`jqcore.envelope_rules`, with the limits). A valid envelope is
parsed and checked in one pass by msgspec (``WIRE``: types, ranges, lengths, required and unknown fields
as type constraints), then by a few checks on the typed values (one regex for id, queue and kind, meta's
keys, expires_at > run_at, args nesting); ``args`` stays raw JSON that orjson reads as it always has.
Whatever that fast path does not accept goes through the precise per-field checks (``checked_raw``,
``checked``), which alone write the errors: the fast path accepts a subset of what they accept, with the
same values, so the two never disagree (``tests/unit/test_envelope.py`` holds them to it).
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from jqcore import envelope_rules as rules
from jqcore.clock import now_ms  # re-exported: the clock envelopes are stamped with
from jqcore.envelope_rules import VERSION
from jqcore.errors import EnvelopeError, FieldError

__all__ = [
    "CANARY_KIND",
    "CANARY_PREFIX",
    "CONTENT_ID_PREFIX",
    "KAFKA_MAX_MESSAGE_BYTES",
    "MAX_DEDUP_KEY",
    "MAX_ENVELOPE_BYTES",
    "RESERVED_PREFIX",
    "Envelope",
    "content_id",
    "decode",
    "encode",
    "encoded",
    "new_envelope",
    "new_job_id",
    "now_ms",
    "record_key",
    "validate_name",
]

MAX_ENVELOPE_BYTES = 1_048_576
"""Largest job: the envelope's JSON bytes, which are the Kafka record value (1 MiB). The gateway refuses a
bigger job with 413 ``job_too_large`` before producing anything; :func:`decode` refuses it as
``envelope_oversize``. One of a set chosen together with :data:`KAFKA_MAX_MESSAGE_BYTES`."""
KAFKA_MAX_MESSAGE_BYTES = 2_097_152
"""The one Kafka-side size limit (2 MiB): every jobq producer's ``message.max.bytes``, the
``max.message.bytes`` of the topics jobq creates (``jobq topics create``, the relay's retry/dead topics)
and the local stack brokers' ``message.max.bytes``. Twice :data:`MAX_ENVELOPE_BYTES`, so the largest job
still fits with everything Kafka adds around its value: the key (≤ 128 bytes), the headers, record and
batch framing, and lz4's growth of incompressible data (≤ 0.4 %). librdkafka's ``batch.size`` (1,000,000)
keeps batches of smaller jobs under it too. Kafka's own defaults (1,000,000 in librdkafka, ~1 MiB on a
broker) would refuse jobs the envelope allows."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """One job, as it travels from a producer through Kafka into Redis and to a worker.

    Times are integer milliseconds since the Unix epoch. ``priority``: lower runs first (EDF); the
    default is ``enqueued_at`` so a queue is FIFO. ``raw`` holds the exact bytes a decoded envelope came
    from and is not part of equality.
    """

    id: str
    queue: str
    kind: str
    args: Any
    priority: int
    enqueued_at: int
    run_at: int | None = None
    expires_at: int | None = None
    max_attempts: int | None = None
    lease_ms: int | None = None
    meta: Mapping[str, str] = field(default_factory=dict)
    excl: str | None = None
    graph: Mapping[str, Any] | None = None
    trace: str | None = None
    canary: bool = False
    v: int = VERSION
    raw: bytes | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this envelope (optional fields left out when unset)."""
        out: dict[str, Any] = {
            "v": self.v,
            "id": self.id,
            "queue": self.queue,
            "kind": self.kind,
            "args": self.args,
            "priority": self.priority,
            "enqueued_at": self.enqueued_at,
        }
        # Unrolled (the gateway encodes every job through here), keys in the order of
        # envelope_rules' optional fields: a field is left
        # out when unset (None; meta also when empty, canary when false).
        if self.run_at is not None:
            out["run_at"] = self.run_at
        if self.expires_at is not None:
            out["expires_at"] = self.expires_at
        if self.max_attempts is not None:
            out["max_attempts"] = self.max_attempts
        if self.lease_ms is not None:
            out["lease_ms"] = self.lease_ms
        if self.meta:
            out["meta"] = dict(self.meta)
        if self.excl is not None:
            out["excl"] = self.excl
        if self.graph is not None:
            out["graph"] = dict(self.graph)
        if self.trace is not None:
            out["trace"] = self.trace
        if self.canary:
            out["canary"] = self.canary
        return out


_ID_BITS = random.Random()  # seeded from the OS; private, so an application's random.seed() cannot repeat ids
_ID_LOCK = threading.Lock()
_last_id = [0, 0]
"""The last id made by this process: (ms, low bits)."""


def _forked() -> None:
    """A forked child must not repeat its parent's ids: new seed, and its own sequence."""
    _ID_BITS.seed()
    _last_id[:] = [0, 0]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def new_job_id() -> str:
    """A fresh job id: 26 chars, time-ordered prefix (ms, hex) then 56 bits, increasing within a process.

    The first id of a millisecond takes 55 random bits; the next ones of that millisecond (or of an
    earlier one, should the clock step back) add one, so one process's ids sort in the order it made them
    — equal priorities are claimed in id order (Redis sorts equal scores by member), so the jobs of one
    batch request (one stamp) keep their order, an exclusive key's too. The bits come from a private
    generator seeded from the OS (and re-seeded in a forked child): an id must be unique, not secret, and a
    system call per id (``secrets``) was 8 % of the gateway's CPU."""
    now = now_ms()
    with _ID_LOCK:
        ms, bits = _last_id
        if now > ms:
            ms, bits = now, _ID_BITS.getrandbits(55)
        else:
            bits += 1  # room: at least 2**55 more ids before the 56 bits would carry
        _last_id[:] = [ms, bits]
    return f"{ms:012x}{bits:014x}"


CONTENT_ID_PREFIX = "c-"
MAX_DEDUP_KEY = 200
RESERVED_PREFIX = "jobq."
"""Kinds under it are jobq's own: what a producer may send of them, :mod:`jqcore.admission` says."""
CANARY_KIND = "jobq.canary"
"""The heartbeat job's kind (every worker pool runs it without registering it), sent into a queue under
:data:`CANARY_PREFIX` (:mod:`jqcore.routing`)."""
CANARY_PREFIX = "canary."


def content_id(queue: str, kind: str, args: Any, dedup_key: str | None = None) -> str:
    """A job id derived from what the job is (Slack's dedup rule): queue + kind + args in canonical JSON
    (object keys sorted) + an optional dedup key. Two enqueues of the same work get the same id, so the
    engine's dedup policy (``QueueConfig.dedup``: while queued/running, or also a window after it finished)
    keeps one. ``c-`` + 40 hex digits of SHA-256 (160 bits)."""
    doc = orjson.dumps([queue, kind, args, dedup_key], option=orjson.OPT_SORT_KEYS)
    return CONTENT_ID_PREFIX + hashlib.sha256(doc).hexdigest()[:40]


def validate_name(kind: str, value: object) -> str:
    """Check a queue name (``kind="queue"``) or an id-like value; raise :class:`EnvelopeError`."""
    problem = rules.check_name(kind, value)
    if problem:
        raise EnvelopeError(FieldError(kind, problem))
    assert isinstance(value, str)
    return value


def new_envelope(
    queue: str,
    kind: str,
    args: Any = None,
    *,
    id: str | None = None,
    priority: int | None = None,
    run_at: int | None = None,
    delay_ms: int | None = None,
    expires_at: int | None = None,
    max_attempts: int | None = None,
    lease_ms: int | None = None,
    meta: Mapping[str, str] | None = None,
    excl: str | None = None,
    graph: Mapping[str, Any] | None = None,
    trace: str | None = None,
    canary: bool = False,
    at_ms: int | None = None,
) -> Envelope:
    """Build and validate a new envelope as a producer does (id, priority and times filled in)."""
    now = now_ms() if at_ms is None else at_ms
    if delay_ms is not None:
        if run_at is not None:
            raise EnvelopeError(FieldError("delay_ms", "give run_at or delay_ms, not both"))
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
            raise EnvelopeError(FieldError("delay_ms", "must be a non-negative integer"))
        run_at = now + delay_ms
    try:
        args_json = orjson.dumps(args)
    except orjson.JSONEncodeError as exc:  # else encode() would fail later, far from the producer
        raise EnvelopeError(FieldError("args", f"not JSON-encodable: {exc}")) from None
    doc: dict[str, Any] = {
        "v": VERSION,
        "id": new_job_id() if id is None else id,
        "queue": queue,
        "kind": kind,
        "args": args,
        "priority": now if priority is None else priority,
        "enqueued_at": now,
    }
    _set_times(doc, run_at, expires_at, max_attempts, lease_ms)  # the optional fields that are set, in order
    _set_others(doc, meta, excl, graph, trace, canary)  # (built key by key: most jobs set none)
    if not rules.fields_pass(doc, args_json):
        return _from_doc(doc, raw=None)  # raises, naming every problem (or accepts what msgspec cannot)
    return _assembled(
        doc["id"],
        queue,
        kind,
        args,
        doc["priority"],
        now,
        run_at,
        expires_at,
        max_attempts,
        lease_ms,
        doc.get("meta", {}),
        excl,
        doc.get("graph"),
        trace,
        bool(canary),
        VERSION,
        None,
    )


def _set_times(
    doc: dict[str, Any],
    run_at: int | None,
    expires_at: int | None,
    max_attempts: int | None,
    lease_ms: int | None,
) -> None:
    if run_at is not None:
        doc["run_at"] = run_at
    if expires_at is not None:
        doc["expires_at"] = expires_at
    if max_attempts is not None:
        doc["max_attempts"] = max_attempts
    if lease_ms is not None:
        doc["lease_ms"] = lease_ms


def _set_others(
    doc: dict[str, Any],
    meta: Mapping[str, str] | None,
    excl: str | None,
    graph: Mapping[str, Any] | None,
    trace: str | None,
    canary: bool,
) -> None:
    # a non-object (a string, a list) is passed on for the checks to refuse by name: dict("ab") raised
    given = (dict(meta) or None) if isinstance(meta, Mapping) else meta
    if given is not None:
        doc["meta"] = given
    if excl is not None:
        doc["excl"] = excl
    if graph is not None:
        doc["graph"] = dict(graph)
    if trace is not None:
        doc["trace"] = trace
    if canary:
        doc["canary"] = canary


def encoded(env: Envelope) -> Envelope:
    """``env`` with ``raw`` filled in: the record value, encoded once (``env`` itself, not a copy).

    ``raw`` is a cache of the fields' encoding outside equality, so it is set in place, the way a frozen
    dataclass sets a derived field in ``__post_init__``: ``dataclasses.replace`` built every envelope a
    second time (13 % of the gateway's CPU). An envelope that already has its bytes keeps them."""
    if env.raw is None:
        object.__setattr__(env, "raw", orjson.dumps(env.to_dict()))
    return env


def encode(env: Envelope) -> bytes:
    """The record value: the original bytes of a decoded envelope, else its compact JSON."""
    if env.raw is not None:
        return env.raw
    return orjson.dumps(env.to_dict())


_FIELD_SETTERS = tuple(getattr(Envelope, f.name).__set__ for f in fields(Envelope))
"""Each field's slot setter, in the fields' order (:func:`_assembled`)."""


def _assembled(*values: Any) -> Envelope:
    """An envelope of ``values`` (every field, in order), set slot by slot: the frozen dataclass's
    ``__init__`` sets each through ``object.__setattr__`` by name, ~0.5 µs more per envelope decoded (the
    relay and the worker decode one per job). Nothing is checked here: :func:`decode` checked them."""
    env = object.__new__(Envelope)
    for set_field, value in zip(_FIELD_SETTERS, values, strict=True):
        set_field(env, value)
    return env


def decode(data: bytes | bytearray | memoryview | str) -> Envelope:
    """Parse and validate a record value. Raises only :class:`EnvelopeError`."""
    try:
        raw = data.encode() if isinstance(data, str) else bytes(data)
    except UnicodeEncodeError as exc:  # a str holding lone surrogates is not UTF-8, hence not JSON
        raise EnvelopeError(FieldError("$", f"not JSON: {exc}"), code="envelope_not_json") from None
    if len(raw) > MAX_ENVELOPE_BYTES:
        raise EnvelopeError(
            FieldError("$", f"{len(raw)} bytes exceeds the limit of {MAX_ENVELOPE_BYTES}"),
            code="envelope_oversize",
        )
    try:
        wire = rules.WIRE.decode(raw)
        args_json = bytes(wire.args)
        args = orjson.loads(args_json)
    except Exception:  # refused by msgspec or orjson: the precise checks decide, and name the problems
        return _decode_slow(raw)
    if not (
        rules.rules_pass(wire.id, wire.queue, wire.kind, wire.meta, wire.run_at, wire.expires_at)
        and rules.shallow(args_json, args)
    ):
        return _decode_slow(raw)
    return _assembled(
        wire.id,
        wire.queue,
        wire.kind,
        args,
        wire.priority,
        wire.enqueued_at,
        wire.run_at,
        wire.expires_at,
        wire.max_attempts,
        wire.lease_ms,
        wire.meta,
        wire.excl,
        wire.graph,
        wire.trace,
        wire.canary,
        wire.v,
        raw,
    )


def record_key(env: Envelope) -> bytes:
    """Kafka record key: the exclusivity value when set (one partition, in order), else the job id."""
    return (env.excl if env.excl is not None else env.id).encode()


def _from_doc(doc: dict[str, Any], raw: bytes | None) -> Envelope:
    return Envelope(raw=raw, **rules.checked(doc))


def _decode_slow(raw: bytes) -> Envelope:
    """The precise checks alone (what the fast path refused): every refusal's errors come from here."""
    return Envelope(raw=raw, **rules.checked_raw(raw))
