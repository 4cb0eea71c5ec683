"""Turning an enqueue request into envelopes and Kafka records, and answering only after Kafka has them.

A request is one job (a JSON object), a batch (``{"jobs": [...]}``) or NDJSON (one job per line). Each
job's client fields are checked by :func:`jqcore.envelope.new_envelope`; a problem anywhere refuses the
whole request (400, every offending field named as ``jobs[i].field``) before anything is written, so a
client never has to guess which half of a batch went in.

``Idempotency-Key``: jobs without a client id get ids derived from the key (``ik-<hash>-<index>``), so a
retried request produces the same ids and the engine's dedup absorbs it even when the first attempt did
reach Kafka. The key's body hash is kept in Redis for the TTL; the same key with a different body is a
409. That check is best effort: with Redis unreachable the gateway still accepts (enqueues must not
depend on Redis), and the deterministic ids still prevent a double run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from jqcore.envelope import Envelope, encode, new_envelope, record_key
from jqcore.errors import EnvelopeError, FieldError
from jqcore.kafka import Record
from jqcore.routing import RoutingSettings
from kafkagate.http import ApiError

__all__ = ["CLIENT_FIELDS", "Parsed", "build_records", "parse_jobs"]

CLIENT_FIELDS = frozenset(
    {
        "id",
        "kind",
        "args",
        "priority",
        "run_at",
        "delay_ms",
        "expires_at",
        "max_attempts",
        "lease_ms",
        "meta",
        "excl",
        "trace",
        "partition",
        "canary",
    }
)


@dataclass(frozen=True, slots=True)
class Parsed:
    envelopes: list[Envelope]
    partitions: list[int | None]


def _documents(body: bytes, content_type: str) -> list[Any]:
    if not body.strip():
        raise ApiError(400, "body_empty", "the request has no body")
    if content_type == "application/x-ndjson":
        docs = []
        for n, line in enumerate(body.splitlines()):
            if line.strip():
                try:
                    docs.append(orjson.loads(line))
                except orjson.JSONDecodeError as exc:
                    raise ApiError(400, "body_not_json", f"line {n + 1} is not JSON: {exc}") from None
        return docs
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "body_not_json", f"the body is not JSON: {exc}") from None
    if isinstance(doc, dict) and "jobs" in doc and "kind" not in doc:
        if not isinstance(doc["jobs"], list):
            raise ApiError(400, "body_invalid", "jobs must be an array", [FieldError("jobs", "not an array")])
        return list(doc["jobs"])
    return [doc]


def parse_jobs(
    queue: str, body: bytes, content_type: str, *, max_batch: int, idempotency: str | None, now: int
) -> Parsed:
    """Validate every job of the request; raises ApiError / EnvelopeError naming each bad field."""
    docs = _documents(body, content_type)
    if len(docs) > max_batch:
        raise ApiError(413, "batch_too_large", f"{len(docs)} jobs in one request; the limit is {max_batch}")
    if not docs:
        raise ApiError(400, "body_empty", "the batch holds no job")
    single = len(docs) == 1 and content_type != "application/x-ndjson"
    envelopes: list[Envelope] = []
    partitions: list[int | None] = []
    problems: list[FieldError] = []
    for i, doc in enumerate(docs):
        where = "" if single else f"jobs[{i}]."
        try:
            env, partition = _one(queue, doc, i, idempotency, now)
        except EnvelopeError as exc:
            problems += [FieldError(where + f.field, f.problem) for f in exc.fields]
            continue
        envelopes.append(env)
        partitions.append(partition)
    if problems:
        raise EnvelopeError(problems)
    return Parsed(envelopes, partitions)


def _one(queue: str, doc: Any, index: int, idempotency: str | None, now: int) -> tuple[Envelope, int | None]:
    if not isinstance(doc, dict):
        raise EnvelopeError(FieldError("$", "a job must be a JSON object"))
    unknown = sorted(set(doc) - CLIENT_FIELDS)
    if unknown:
        raise EnvelopeError([FieldError(k, "unknown field") for k in unknown])
    if "kind" not in doc:
        raise EnvelopeError(FieldError("kind", "required"))
    partition = doc.get("partition")
    if partition is not None and (
        not isinstance(partition, int) or isinstance(partition, bool) or partition < 0
    ):
        raise EnvelopeError(FieldError("partition", "must be a non-negative integer"))
    job_id = doc.get("id")
    if job_id is None and idempotency is not None:
        job_id = f"ik-{idempotency[:32]}-{index}"
    try:
        env = new_envelope(
            queue,
            doc["kind"],
            doc.get("args"),
            id=job_id,
            meta=doc.get("meta"),
            excl=doc.get("excl"),
            trace=doc.get("trace"),
            canary=doc.get("canary") is True,
            at_ms=now,
            **_present(doc),
        )
    except TypeError as exc:  # a wrongly typed scalar the envelope builder could not even look at
        raise EnvelopeError(FieldError("$", str(exc))) from None
    return env, partition


def _present(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: doc[k]
        for k in ("priority", "run_at", "delay_ms", "expires_at", "max_attempts", "lease_ms")
        if doc.get(k) is not None
    }


def idempotency_digest(key: str, queue: str, body: bytes) -> tuple[str, str]:
    """(digest naming the key within this queue, hash of the body it was first used with)."""
    return (
        hashlib.sha256(f"{queue}\0{key}".encode()).hexdigest()[:32],
        hashlib.sha256(body).hexdigest(),
    )


def build_records(
    parsed: Parsed, routing: RoutingSettings, queue: str
) -> tuple[list[Record], Literal["all", "leader"]]:
    """Kafka records for the envelopes (record key = excl or id; value = the envelope bytes)."""
    topic, acks = routing.route(queue)
    headers = [("jobq-queue", queue.encode())]
    records = [
        Record(topic, encode(env), record_key(env), [*headers, ("jobq-kind", env.kind.encode())], partition)
        for env, partition in zip(parsed.envelopes, parsed.partitions, strict=True)
    ]
    return records, acks


def accepted_body(envs: Sequence[Envelope], delivered: Sequence[Any]) -> dict[str, Any]:
    return {
        "ids": [e.id for e in envs],
        "jobs": [
            {"id": e.id, "topic": d.topic, "partition": d.partition, "offset": d.offset}
            for e, d in zip(envs, delivered, strict=True)
        ],
    }
