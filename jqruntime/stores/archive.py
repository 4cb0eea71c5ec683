"""The payload the history keeps of a job (Rickover's archive; ``docs/history.md`` "Payload").

The lifecycle events a transition script writes hold no payload (the Redis stream stays small). When a
scheduler ships an event that ends a job (``jqcore.events.ENDS``: completed, errored, canceled, expired),
it reads the job's record and adds :data:`jqcore.events.PAYLOAD_FIELDS` to the event's Kafka value
(:func:`payload_of_record`, :func:`with_payload`): ``args``, ``meta`` and ``result`` as JSON text, and
``envelope``, the JSON object of the envelope fields a replay keeps (:data:`REPLAY_FIELDS`). Each of
``args``, ``meta`` and ``result`` is kept up to ``cap`` bytes (``JOBQ_EVENTS_PAYLOAD_MAX_BYTES``); a longer
one is cut at that many bytes (on a UTF-8 character boundary) and named in ``truncated``, never dropped
silently. The history's ``current`` row of a finished job is that event, so ``GET`` of an archived job
shows its payload (:class:`ArchivedPayload`) and a replay can rebuild it once Redis forgot the job.

``result`` is the one of the transition being shipped: a record that moved on before its ending event was
shipped (a dead job retried) gives that event no result; its later ending carries its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from jqcore.events import PAYLOAD_FIELDS

__all__ = [
    "CUT",
    "REPLAY_FIELDS",
    "SHOWN",
    "ArchivedPayload",
    "cut",
    "payload_of_record",
    "with_payload",
]

REPLAY_FIELDS: Final = (
    "priority",
    "enqueued_at",
    "run_at",
    "expires_at",
    "max_attempts",
    "lease_ms",
    "excl",
    "canary",
)
"""The envelope fields kept beside args and meta (``envelope``): what a replay keeps of the job, and the
times it had. Small and bounded, so never cut."""
SHOWN: Final = ("priority", "expires_at", "max_attempts", "lease_ms", "excl")
"""The :data:`REPLAY_FIELDS` an archived ``GET`` shows besides the event's own (``run_at``, the times)."""
CUT: Final = ("args", "meta", "result")
"""The fields :func:`cut` to the cap (the ones whose size the producer or the handler chose)."""
_NAMES: Final = tuple(name for name, _ in PAYLOAD_FIELDS)


def cut(text: bytes, cap: int) -> tuple[str, bool]:
    """``text`` (UTF-8) as a string of at most ``cap`` bytes, and whether it was cut."""
    if len(text) <= cap:
        return text.decode("utf-8", "replace"), False
    return text[:cap].decode("utf-8", "ignore"), True


def _stored(envelope: bytes | None) -> dict[str, Any] | None:
    """The JSON object of a stored envelope (the relay stored only envelopes it validated, so it is read,
    not checked again: a tenth of the cost of :func:`jqcore.envelope.decode`); None when there is none."""
    if not envelope:
        return None
    try:
        doc = orjson.loads(envelope)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def payload_of_record(envelope: bytes | None, result: bytes | None, cap: int) -> dict[str, str]:
    """The :data:`~jqcore.events.PAYLOAD_FIELDS` of a job from its record's stored envelope and result
    (``None``: not there). Every field is present (``""`` when unknown); ``cap`` 0 keeps no payload."""
    out = dict.fromkeys(_NAMES, "")
    if cap <= 0:
        return out
    whole: dict[str, bytes] = {}
    doc = _stored(envelope)
    if doc is not None:
        whole["args"] = orjson.dumps(doc.get("args"))
        if doc.get("meta"):
            whole["meta"] = orjson.dumps(doc["meta"])
        kept = {name: doc.get(name) for name in REPLAY_FIELDS}
        out["envelope"] = orjson.dumps({k: v for k, v in kept.items() if v not in (None, False)}).decode()
    if result:
        whole["result"] = result
    truncated = []
    for name in CUT:
        if name in whole:
            out[name], was_cut = cut(whole[name], cap)
            if was_cut:
                truncated.append(name)
    out["truncated"] = ",".join(truncated)
    return out


def with_payload(value: bytes, payload: Mapping[str, str]) -> bytes:
    """An event's JSON value with the payload fields added."""
    return orjson.dumps({**orjson.loads(value), **payload})


def _json(text: str | None) -> Any:
    return orjson.loads(text) if text else None


@dataclass(frozen=True, slots=True)
class ArchivedPayload:
    """A job's payload as the history kept it (the payload columns of its ``current`` row)."""

    args: Any = None
    """The args (a JSON value); the kept prefix (a string) when ``args`` is in :attr:`truncated`."""
    meta: Any = None
    """The meta (an object, or None); the kept prefix when truncated."""
    result: str | None = None
    """The result's JSON text (as a live ``GET`` gives it); the kept prefix when truncated."""
    envelope: Mapping[str, Any] = field(default_factory=dict)
    """The :data:`REPLAY_FIELDS` the job had (the ones that were set)."""
    truncated: frozenset[str] = frozenset()
    """Which of :data:`CUT` were cut to the cap."""

    @property
    def kept(self) -> bool:
        """Whether the history has the job's envelope at all (events shipped before the payload was kept,
        or after the record was gone, have none)."""
        return bool(self.envelope)

    @classmethod
    def from_columns(
        cls,
        args: str | None,
        meta: str | None,
        result: str | None,
        envelope: str | None,
        truncated: str | None,
    ) -> ArchivedPayload:
        """From the history's columns (``""`` or NULL: not kept)."""
        cut_names = frozenset(n for n in (truncated or "").split(",") if n)
        return cls(
            args=(args or None) if "args" in cut_names else _json(args),
            meta=(meta or None) if "meta" in cut_names else _json(meta),
            result=result or None,
            envelope=_json(envelope) or {},
            truncated=cut_names,
        )

    def as_dict(self) -> dict[str, Any]:
        """The fields a ``GET`` of the archived job adds: args, meta, result, :data:`SHOWN` (None when not
        set) and ``truncated`` (a sorted list)."""
        out: dict[str, Any] = {"args": self.args, "meta": self.meta, "result": self.result}
        out.update({name: self.envelope.get(name) for name in SHOWN})
        out["truncated"] = sorted(self.truncated)
        return out
