"""What a valid v1 envelope is: the limits, the precise per-field checks (which alone write the errors)
and the one-pass msgspec decoder that accepts a subset of what they accept, with the same values.

:mod:`jqcore.envelope` builds, encodes and decodes envelopes with these; the two paths and why they never
disagree are described there (``tests/unit/test_envelope.py`` holds them to it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args

import msgspec
import orjson
from msgspec import Meta

from jqcore.errors import EnvelopeError, FieldError

__all__ = [
    "ID_PATTERN",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_ARGS_DEPTH",
    "MAX_ATTEMPTS_LIMIT",
    "MAX_LEASE_MS",
    "MAX_META_ENTRIES",
    "MAX_META_VALUE",
    "MAX_TS_MS",
    "META_KEY_PATTERN",
    "MIN_LEASE_MS",
    "QUEUE_PATTERN",
    "TRACEPARENT_PATTERN",
    "VERSION",
    "WIRE",
    "check_name",
    "checked",
    "checked_raw",
    "fields_pass",
    "rules_pass",
    "shallow",
]

VERSION = 1
MAX_META_ENTRIES = 16
MAX_ARGS_DEPTH = 64
MAX_ATTEMPTS_LIMIT = 1000
MIN_LEASE_MS, MAX_LEASE_MS = 100, 86_400_000
MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}"
"""Job ids, kinds, exclusivity values: printable, no spaces, no braces (they end up inside Redis keys)."""
QUEUE_PATTERN = r"[a-z0-9][a-z0-9._-]{0,63}"
META_KEY_PATTERN = r"[a-z][a-z0-9_]{0,31}"
TRACEPARENT_PATTERN = r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}"
MAX_META_VALUE = 256
_ID_RE = re.compile(ID_PATTERN)
_QUEUE_RE = re.compile(QUEUE_PATTERN)
_META_KEY_RE = re.compile(META_KEY_PATTERN)
_TRACEPARENT_RE = re.compile(TRACEPARENT_PATTERN)
_GRAPH_KEYS = frozenset({"id", "node"})
_MAX_META_VALUE = MAX_META_VALUE

_REQUIRED = ("v", "id", "queue", "kind", "args", "priority", "enqueued_at")
_OPTIONAL = ("run_at", "expires_at", "max_attempts", "lease_ms", "meta", "excl", "graph", "trace", "canary")
_KNOWN = frozenset(_REQUIRED + _OPTIONAL)


# --- validation ---------------------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_name(name: str, value: object) -> str | None:
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
        if key not in value or check_name(key, value[key]):
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
    "id": check_name,
    "queue": check_name,
    "kind": check_name,
    "args": _check_args,
    "priority": _check_int(INT64_MIN, INT64_MAX),
    "enqueued_at": _TS,
    "run_at": _TS,
    "expires_at": _TS,
    "max_attempts": _check_int(1, MAX_ATTEMPTS_LIMIT),
    "lease_ms": _check_int(MIN_LEASE_MS, MAX_LEASE_MS),
    "meta": _check_meta,
    "excl": check_name,
    "graph": _check_graph,
    "trace": _check_str(_TRACEPARENT_RE, "must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"),
    "canary": _check_bool,
}


def checked(doc: dict[str, Any]) -> dict[str, Any]:
    """An envelope's fields from its JSON object (``meta`` filled in), after every precise check;
    raises :class:`EnvelopeError` naming each problem."""
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
    return values


def checked_raw(raw: bytes) -> dict[str, Any]:
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
    return checked(doc)


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
_MetaValue = Annotated[str, Meta(min_length=1, max_length=_MAX_META_VALUE)]  # braces: rules_pass
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


WIRE: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_struct(msgspec.Raw))
_FIELDS = _struct(Any)
"""new_envelope's (:func:`fields_pass`): its args are the caller's objects, checked apart."""
assert VERSION == 1
assert set(_FIELDS.__struct_fields__) == _KNOWN
_NAMES_RE = re.compile(rf"(?:{_ID_RE.pattern})\n(?:{_QUEUE_RE.pattern})\n(?:{_ID_RE.pattern})")
"""id, queue and kind joined by newlines (which none of them may hold)."""
_META_KEYS_RE = re.compile(rf"(?:{_META_KEY_RE.pattern})(?:\n(?:{_META_KEY_RE.pattern}))*")


def rules_pass(
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


def shallow(args_json: bytes, args: Any) -> bool:
    """Whether args nest at most MAX_ARGS_DEPTH levels. A path opens a container per level but the leaf's,
    so JSON with fewer opening brackets in all cannot nest too deep (one in a string only adds to the
    count); else the precise walk decides."""
    return (
        len(args_json) < MAX_ARGS_DEPTH
        or args_json.count(b"[") + args_json.count(b"{") < MAX_ARGS_DEPTH
        or _check_args("args", args) is None
    )


def fields_pass(doc: dict[str, Any], args_json: bytes) -> bool:
    """Whether a new envelope's fields certainly pass the precise checks (False: let them decide)."""
    try:
        msgspec.convert(doc, _FIELDS)
    except Exception:
        return False
    return rules_pass(
        doc["id"], doc["queue"], doc["kind"], doc.get("meta"), doc.get("run_at"), doc.get("expires_at")
    ) and shallow(args_json, doc["args"])
