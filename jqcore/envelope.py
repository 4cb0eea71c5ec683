"""Envelope v1: the one contract every producer (gateway, Spark, canary, CLI) and consumer shares.

A job travels as one JSON object, the Kafka record value. :func:`decode` validates it strictly and keeps
the bytes it was given (``Envelope.raw``); :func:`encode` returns those same bytes when they exist, so the
relay stores exactly what the producer wrote and ``args`` passes through byte for byte (Slack lost days
to JSON escaping differences between languages). The JSON Schema of the same contract is
``jqcore/schema/envelope.v1.json``; golden examples live in ``tests/fixtures/envelopes/``.

Policy on unknown fields: v1 refuses them (``unknown field``). A producer that needs a new field bumps
``v``; decoders refuse versions they do not know (``envelope_version_unsupported``) instead of guessing.

Every failure is an :class:`~jqcore.errors.EnvelopeError` whose ``fields`` name each field and problem.

One verdict, two paths. A valid envelope is parsed and checked in one pass by msgspec (``_WIRE``: types,
ranges, lengths, required and unknown fields as type constraints), then by a few checks on the typed
values (one regex for id, queue and kind, meta's keys, expires_at > run_at, args nesting); ``args`` stays
raw JSON that orjson reads as it always has. Whatever that fast path does not accept goes through the
precise per-field checks (``_decode_slow``, ``_from_doc``), which alone write the errors: the fast path
accepts a subset of what they accept, with the same values, so the two never disagree
(``tests/unit/test_envelope.py`` holds them to it).
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

import msgspec
import orjson
from msgspec import Meta

from jqcore.clock import now_ms  # re-exported: the clock envelopes are stamped with
from jqcore.errors import EnvelopeError, FieldError

__all__ = [
    "KAFKA_MAX_MESSAGE_BYTES",
    "MAX_ARGS_DEPTH",
    "MAX_ENVELOPE_BYTES",
    "MAX_META_ENTRIES",
    "VERSION",
    "Envelope",
    "decode",
    "encode",
    "encoded",
    "new_envelope",
    "new_job_id",
    "now_ms",
    "record_key",
    "validate_name",
]

VERSION = 1
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
MAX_META_ENTRIES = 16
MAX_ARGS_DEPTH = 64
MAX_ATTEMPTS_LIMIT = 1000
MIN_LEASE_MS, MAX_LEASE_MS = 100, 86_400_000
MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
"""Job ids, kinds, exclusivity values: printable, no spaces, no braces (they end up inside Redis keys)."""
_QUEUE_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_META_KEY_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
_TRACEPARENT_RE = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_GRAPH_KEYS = frozenset({"id", "node"})
_MAX_META_VALUE = 256

_REQUIRED = ("v", "id", "queue", "kind", "args", "priority", "enqueued_at")
_OPTIONAL = ("run_at", "expires_at", "max_attempts", "lease_ms", "meta", "excl", "graph", "trace", "canary")
_KNOWN = frozenset(_REQUIRED + _OPTIONAL)


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
        # Unrolled (the gateway encodes every job through here), keys in _OPTIONAL's order: a field is left
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
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ID_BITS.seed)  # a forked child must not repeat its parent's ids


def new_job_id() -> str:
    """A fresh job id: 26 chars, time-ordered prefix (ms, hex) then 56 random bits.

    The bits come from a private generator seeded from the OS (and re-seeded in a forked child): an id
    must be unique, not secret, and a system call per id (``secrets``) was 8 % of the gateway's CPU."""
    return f"{now_ms():012x}{_ID_BITS.getrandbits(56):014x}"


def validate_name(kind: str, value: object) -> str:
    """Check a queue name (``kind="queue"``) or an id-like value; raise :class:`EnvelopeError`."""
    problem = _check_name(kind, value)
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
        "run_at": run_at,
        "expires_at": expires_at,
        "max_attempts": max_attempts,
        "lease_ms": lease_ms,
        "meta": dict(meta) if meta else None,
        "excl": excl,
        "graph": dict(graph) if graph is not None else None,
        "trace": trace,
        "canary": canary or None,
    }
    doc = {k: v for k, v in doc.items() if v is not None or k == "args"}
    if not _fields_pass(doc, args_json):
        return _from_doc(doc, raw=None)  # raises, naming every problem (or accepts what msgspec cannot)
    return Envelope(**doc)


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
        wire = _WIRE.decode(raw)
        args_json = bytes(wire.args)
        args = orjson.loads(args_json)
    except Exception:  # refused by msgspec or orjson: the precise checks decide, and name the problems
        return _decode_slow(raw)
    if not (
        _rules_pass(wire.id, wire.queue, wire.kind, wire.meta, wire.run_at, wire.expires_at)
        and _shallow(args_json, args)
    ):
        return _decode_slow(raw)
    return Envelope(
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


# --- validation ---------------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_name(name: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {_type_name(value)}"
    pattern = _QUEUE_RE if name == "queue" else _ID_RE
    if pattern.fullmatch(value) is None:
        limit = 64 if name == "queue" else 128
        chars = "a-z 0-9 . _ -" if name == "queue" else "A-Z a-z 0-9 . _ : @ -"
        return f"must be 1-{limit} characters of [{chars}] starting with a letter or digit"
    return None


def _check_int(lo: int, hi: int) -> Callable[[str, object], str | None]:
    def check(_: str, value: object) -> str | None:
        if not _is_int(value):
            return f"must be an integer, got {_type_name(value)}"
        assert isinstance(value, int)
        return None if lo <= value <= hi else f"must be between {lo} and {hi}"

    return check


def _check_meta(_: str, value: object) -> str | None:
    if not isinstance(value, dict):
        return f"must be an object, got {_type_name(value)}"
    if len(value) > MAX_META_ENTRIES:
        return f"at most {MAX_META_ENTRIES} entries"
    for key, item in value.items():
        if _META_KEY_RE.fullmatch(key) is None:
            return f"key {key[:40]!r} must match [a-z][a-z0-9_]{{0,31}}"
        if not isinstance(item, str) or not 0 < len(item) <= _MAX_META_VALUE or "{" in item or "}" in item:
            return f"value of {key!r} must be a string of 1-{_MAX_META_VALUE} characters without braces"
    return None


def _check_graph(_: str, value: object) -> str | None:
    """A task graph's node (``jqcore.graphs``): the graph id and the node's name, both required."""
    if not isinstance(value, dict):
        return f"must be an object, got {_type_name(value)}"
    unknown = set(value) - _GRAPH_KEYS
    if unknown:
        return f"unknown keys {sorted(unknown)}; allowed: {sorted(_GRAPH_KEYS)}"
    for key in sorted(_GRAPH_KEYS):
        if key not in value or _check_name(key, value[key]):
            return f"{key} is required: an id-like string (graph id and node name)"
    return None


def _check_args(_: str, value: object) -> str | None:
    depth, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        depth = max(depth, level)
        if depth > MAX_ARGS_DEPTH:
            return f"nested deeper than {MAX_ARGS_DEPTH} levels"
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return None


def _check_str(pattern: re.Pattern[str], text: str) -> Callable[[str, object], str | None]:
    def check(_: str, value: object) -> str | None:
        if not isinstance(value, str):
            return f"must be a string, got {_type_name(value)}"
        return None if pattern.fullmatch(value) else text

    return check


def _check_bool(_: str, value: object) -> str | None:
    return None if isinstance(value, bool) else f"must be a boolean, got {_type_name(value)}"


_TS = _check_int(0, MAX_TS_MS)
_CHECKS: dict[str, Callable[[str, object], str | None]] = {
    "v": _check_int(VERSION, VERSION),
    "id": _check_name,
    "queue": _check_name,
    "kind": _check_name,
    "args": _check_args,
    "priority": _check_int(INT64_MIN, INT64_MAX),
    "enqueued_at": _TS,
    "run_at": _TS,
    "expires_at": _TS,
    "max_attempts": _check_int(1, MAX_ATTEMPTS_LIMIT),
    "lease_ms": _check_int(MIN_LEASE_MS, MAX_LEASE_MS),
    "meta": _check_meta,
    "excl": _check_name,
    "graph": _check_graph,
    "trace": _check_str(_TRACEPARENT_RE, "must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"),
    "canary": _check_bool,
}


def _from_doc(doc: dict[str, Any], raw: bytes | None) -> Envelope:
    problems = [FieldError(str(k)[:64], "unknown field") for k in doc if k not in _KNOWN]
    problems += [FieldError(k, "required") for k in _REQUIRED if k not in doc]
    for name, value in doc.items():
        check = _CHECKS.get(name)
        if check is not None and (problem := check(name, value)) is not None:
            problems.append(FieldError(name, problem))
    expires_at, run_at = doc.get("expires_at"), doc.get("run_at")
    if not problems and expires_at is not None and run_at is not None and expires_at <= run_at:
        problems.append(FieldError("expires_at", "must be later than run_at"))
    if problems:
        raise EnvelopeError(problems)
    values = {k: doc[k] for k in _KNOWN if k in doc}
    if "meta" not in values:
        values["meta"] = {}
    return Envelope(raw=raw, **values)


def _decode_slow(raw: bytes) -> Envelope:
    """Parse with orjson and run the precise per-field checks: every refusal's errors come from here."""
    try:
        doc = orjson.loads(raw)
    except (orjson.JSONDecodeError, RecursionError) as exc:
        raise EnvelopeError(FieldError("$", f"not JSON: {exc}"), code="envelope_not_json") from None
    if not isinstance(doc, dict):
        raise EnvelopeError(FieldError("$", f"must be a JSON object, got {_type_name(doc)}"))
    version = doc.get("v")
    if version != VERSION:
        if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
            raise EnvelopeError(
                FieldError("v", f"version {version} is newer than this decoder ({VERSION})"),
                code="envelope_version_unsupported",
            )
        raise EnvelopeError(FieldError("v", f"must be {VERSION}"))
    return _from_doc(doc, raw=raw)


# --- the one-pass decoder (msgspec) ---------------------------------------------------------------------
#
# The rules above as a msgspec struct: types, ranges, lengths, required and unknown fields, checked while
# parsing. The patterns of the three names every envelope has, and meta's, are checked after it by one
# regex each (cheaper than a regex call per string from msgspec). Accepting is all this does: whatever it
# refuses goes to the precise checks. ``args`` stays raw JSON that orjson reads, exactly as before
# (msgspec would read integers beyond 64 bits as ints, orjson reads them as floats).


def _int(lo: int, hi: int) -> Any:
    return Annotated[int, Meta(ge=lo, le=hi)]


_Ts = _int(0, MAX_TS_MS)
_IdLike = Annotated[str, Meta(pattern=rf"^(?:{_ID_RE.pattern})\Z")]  # msgspec searches: anchored
_Trace = Annotated[str, Meta(pattern=rf"^(?:{_TRACEPARENT_RE.pattern})\Z")]
_MetaValue = Annotated[str, Meta(min_length=1, max_length=_MAX_META_VALUE)]  # braces: _rules_pass
_GraphKey = Literal["id", "node"]
assert set(get_args(_GraphKey)) == _GRAPH_KEYS


def _struct(args: Any) -> Any:
    """The envelope's fields as a struct; an absent optional field reads as the Envelope's default (the
    types exclude null: an explicit null is refused, as the precise checks refuse it)."""
    return msgspec.defstruct(
        "_Wire",
        [
            ("v", Literal[1]),
            ("id", str),
            ("queue", str),
            ("kind", str),
            ("args", args),
            ("priority", _int(INT64_MIN, INT64_MAX)),
            ("enqueued_at", _Ts),
            ("run_at", _Ts, None),
            ("expires_at", _Ts, None),
            ("max_attempts", _int(1, MAX_ATTEMPTS_LIMIT), None),
            ("lease_ms", _int(MIN_LEASE_MS, MAX_LEASE_MS), None),
            ("meta", Annotated[dict[str, _MetaValue], Meta(max_length=MAX_META_ENTRIES)], {}),
            ("excl", _IdLike, None),
            ("graph", Annotated[dict[_GraphKey, _IdLike], Meta(min_length=len(_GRAPH_KEYS))], None),
            ("trace", _Trace, None),
            ("canary", bool, False),
        ],
        forbid_unknown_fields=True,
        gc=False,
    )


_WIRE: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_struct(msgspec.Raw))
_FIELDS = _struct(Any)
"""new_envelope's: its args are the caller's objects, checked apart."""
assert VERSION == 1
assert set(_FIELDS.__struct_fields__) == _KNOWN
_NAMES_RE = re.compile(rf"(?:{_ID_RE.pattern})\n(?:{_QUEUE_RE.pattern})\n(?:{_ID_RE.pattern})")
"""id, queue and kind joined by newlines (which none of them may hold)."""
_META_KEYS_RE = re.compile(rf"(?:{_META_KEY_RE.pattern})(?:\n(?:{_META_KEY_RE.pattern}))*")


def _rules_pass(
    id: str, queue: str, kind: str, meta: dict[str, str] | None, run_at: int | None, expires_at: int | None
) -> bool:
    """The rules the struct leaves out, on values it has typed: the names' and meta's patterns and
    expires_at > run_at."""
    if _NAMES_RE.fullmatch("\n".join((id, queue, kind))) is None:
        return False
    if meta:
        keys = "\n".join(meta)
        if keys.count("\n") != len(meta) - 1 or _META_KEYS_RE.fullmatch(keys) is None:
            return False
        values = "".join(meta.values())
        if "{" in values or "}" in values:
            return False
    return expires_at is None or run_at is None or expires_at > run_at


def _shallow(args_json: bytes, args: Any) -> bool:
    """Whether args nest at most MAX_ARGS_DEPTH levels. A path opens a container per level but the leaf's,
    so JSON with fewer opening brackets in all cannot nest too deep (one in a string only adds to the
    count); else the precise walk decides."""
    return (
        len(args_json) < MAX_ARGS_DEPTH
        or args_json.count(b"[") + args_json.count(b"{") < MAX_ARGS_DEPTH
        or _check_args("args", args) is None
    )


def _fields_pass(doc: dict[str, Any], args_json: bytes) -> bool:
    """Whether a new envelope's fields certainly pass the precise checks (False: let them decide)."""
    try:
        msgspec.convert(doc, _FIELDS)
    except Exception:
        return False
    return _rules_pass(
        doc["id"], doc["queue"], doc["kind"], doc.get("meta"), doc.get("run_at"), doc.get("expires_at")
    ) and _shallow(args_json, doc["args"])
