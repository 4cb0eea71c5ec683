"""Turning an enqueue request into envelopes and Kafka records, and answering only after Kafka has them.

A request is one job (a JSON object), a batch (``{"jobs": [...]}``) or NDJSON (one job per line). Each
job's client fields are checked by :func:`jqcore.envelope.new_envelope`; a problem anywhere refuses the
whole request (400, every offending field named as ``jobs[i].field``) before anything is written, so a
client never has to guess which half of a batch went in. The same holds for a job whose Kafka record would
exceed ``MAX_ENVELOPE_BYTES`` (413 ``job_too_large``), an explicit partition the topic does not have (400
``partition_invalid``) and a job for an exclusive queue without an exclusivity value (400 ``excl_missing``).

Content ids (``?id_from=content``, a job's ``dedup_key``, or the queue's ``id_from: content`` policy): jobs
without a client id get :func:`jqcore.envelope.content_id` — queue + kind + canonical args (+ the dedup
key) — so the same work enqueued twice is one job while the queue's dedup policy says so (Slack's rule).

``Idempotency-Key``: jobs without a client id (and no content id) get ids derived from the key
(``ik-<hash>-<index>``), so a retried request produces the same ids and the engine's dedup absorbs it even
when the first attempt did reach Kafka. The key's body hash is kept in Redis for the TTL; the same key
with a different body is a 409. That check is best effort: with Redis unreachable the gateway still
accepts (enqueues must not depend on Redis), and the deterministic ids still prevent a double run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from jqcore import metrics
from jqcore.admission import reserved_problem
from jqcore.envelope import MAX_DEDUP_KEY, MAX_ENVELOPE_BYTES, Envelope, content_id, encoded, new_envelope
from jqcore.errors import EnvelopeError, FieldError, JobqError
from jqcore.log import get_logger
from jqcore.routing import Acks, RoutingSettings
from jqengine import QueueConfig
from jqruntime.http import HttpError
from jqruntime.kafka import Delivered, PartitionInvalid, Record, RecordTooLarge, job_record
from kafkagate.state import Gate

__all__ = [
    "CLIENT_FIELDS",
    "Parsed",
    "build_records",
    "check_blocked",
    "check_exclusive",
    "check_partitions",
    "documents",
    "needs_exclusivity",
    "parse_jobs",
    "produce",
    "too_large",
]

log = get_logger("kafkagate.enqueue")

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
        "dedup_key",
    }
)


@dataclass(frozen=True, slots=True)
class Parsed:
    envelopes: list[Envelope]
    partitions: list[int | None]
    single: bool = False
    """One job sent as a bare object: its problems name fields without a ``jobs[i].`` prefix."""

    def where(self, index: int) -> str:
        """How errors name job ``index`` (``jobs[3]``, or ``$`` for a single job)."""
        return "$" if self.single else f"jobs[{index}]"

    def field(self, index: int, name: str) -> str:
        return name if self.single else f"jobs[{index}].{name}"


def _too_many(count: int, max_batch: int) -> HttpError:
    return HttpError(413, "batch_too_large", f"{count} jobs in one request; the limit is {max_batch}")


def documents(body: bytes, content_type: str, max_batch: int) -> list[Any]:
    """The request's job documents. NDJSON lines are counted before any is parsed; a JSON batch's
    array is counted once decoded (a bounded body: ``max_body_bytes``), before any job is built."""
    if not body.strip():
        raise HttpError(400, "body_empty", "the request has no body")
    if content_type == "application/x-ndjson":
        lines = [(n, line) for n, line in enumerate(body.splitlines()) if line.strip()]
        if len(lines) > max_batch:
            raise _too_many(len(lines), max_batch)
        docs = []
        for n, line in lines:
            try:
                docs.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise HttpError(400, "body_not_json", f"line {n + 1} is not JSON: {exc}") from None
        return docs
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, "body_not_json", f"the body is not JSON: {exc}") from None
    if isinstance(doc, dict) and "jobs" in doc and "kind" not in doc:
        if not isinstance(doc["jobs"], list):
            raise HttpError(
                400, "body_invalid", "jobs must be an array", [FieldError("jobs", "not an array")]
            )
        if len(doc["jobs"]) > max_batch:
            raise _too_many(len(doc["jobs"]), max_batch)
        return list(doc["jobs"])
    return [doc]


def parse_jobs(
    queue: str,
    body: bytes,
    content_type: str,
    *,
    max_batch: int,
    idempotency: str | None,
    now: int,
    stamp: Callable[[Envelope], Envelope] | None = None,
    content: bool = False,
) -> Parsed:
    """Validate every job of the request; raises HttpError / EnvelopeError naming each bad field.

    ``stamp`` (tracing on: ``jqruntime.tracing.EnqueueSpans.stamp``) gives each valid job its enqueue span's
    context as ``trace`` before the envelope is encoded, so the size check counts it; None (tracing off)
    leaves the envelopes exactly as the client's fields make them. ``content``: jobs without an id get
    :func:`~jqcore.envelope.content_id` (so does any job with a ``dedup_key``)."""
    docs = documents(body, content_type, max_batch)
    if not docs:
        raise HttpError(400, "body_empty", "the batch holds no job")
    single = len(docs) == 1 and content_type != "application/x-ndjson"
    envelopes: list[Envelope] = []
    partitions: list[int | None] = []
    problems: list[FieldError] = []
    codes: set[str] = set()
    for i, doc in enumerate(docs):
        where = "" if single else f"jobs[{i}]."
        try:
            env, partition = _one(queue, doc, i, idempotency, now, content)
        except EnvelopeError as exc:
            problems += [FieldError(where + f.field, f.problem) for f in exc.fields]
            codes.add(exc.code)
            continue
        if stamp is not None:
            env = stamp(env)
        envelopes.append(encoded(env))  # the record value, encoded once
        partitions.append(partition)
    if problems:  # one code when every bad job has the same (kind_reserved), else envelope_invalid
        raise EnvelopeError(problems, code=codes.pop() if len(codes) == 1 else EnvelopeError.code)
    parsed = Parsed(envelopes, partitions, single)
    sizes = {i: len(env.raw or b"") for i, env in enumerate(envelopes)}
    oversize = {i: n for i, n in sizes.items() if n > MAX_ENVELOPE_BYTES}
    if oversize:
        raise too_large(parsed, oversize, MAX_ENVELOPE_BYTES)
    return parsed


def too_large(parsed: Parsed, sizes: Mapping[int, int], limit: int | None) -> HttpError:
    """413 ``job_too_large`` naming each job, its record size and the limit (None: Kafka's, unknown)."""
    why = f"the limit is {limit} bytes" if limit is not None else "Kafka refused it as too large"
    fields = [FieldError(parsed.where(i), f"{n} bytes as a Kafka record; {why}") for i, n in sizes.items()]
    return HttpError(
        413,
        "job_too_large",
        "; ".join(f"{f.field}: {f.problem}" for f in fields),
        fields,
        details={"limit_bytes": limit, "jobs": [{"index": i, "bytes": n} for i, n in sizes.items()]},
    )


def check_partitions(parsed: Parsed, count: int) -> None:
    """400 ``partition_invalid`` for each explicit partition the topic (``count`` partitions) lacks."""
    problems = [
        FieldError(parsed.field(i, "partition"), f"the topic has partitions 0-{count - 1}")
        for i, p in enumerate(parsed.partitions)
        if p is not None and p >= count
    ]
    if problems:
        raise EnvelopeError(problems, code="partition_invalid")


def needs_exclusivity(parsed: Parsed) -> bool:
    """Whether some job has no ``excl`` (only then does the queue's mode matter)."""
    return any(env.excl is None for env in parsed.envelopes)


def check_exclusive(parsed: Parsed, config: QueueConfig | None) -> None:
    """400 ``excl_missing`` for each job without an exclusivity value (``excl``, else ``meta[excl_key]``)
    when the queue is exclusive — the relay would dead-letter it. ``config`` None (Redis did not answer):
    nothing is checked."""
    if config is None or config.mode != "exclusive":
        return
    key = config.excl_key
    problems = [
        FieldError(parsed.field(i, "excl"), f"the queue is exclusive: give excl or meta.{key}")
        for i, env in enumerate(parsed.envelopes)
        if env.excl is None and not (key and env.meta.get(key))
    ]
    if problems:
        raise EnvelopeError(problems, code="excl_missing")


def _one(
    queue: str, doc: Any, index: int, idempotency: str | None, now: int, content: bool = False
) -> tuple[Envelope, int | None]:
    if not isinstance(doc, dict):
        raise EnvelopeError(FieldError("$", "a job must be a JSON object"))
    if not CLIENT_FIELDS.issuperset(doc):
        unknown = sorted(set(doc) - CLIENT_FIELDS)
        raise EnvelopeError([FieldError(k, "unknown field") for k in unknown])
    if "kind" not in doc:
        raise EnvelopeError(FieldError("kind", "required"))
    reserved = reserved_problem(doc["kind"], queue) if isinstance(doc["kind"], str) else None
    if reserved is not None:
        raise EnvelopeError(FieldError("kind", reserved), code="kind_reserved")
    partition = doc.get("partition")
    if partition is not None and (
        not isinstance(partition, int) or isinstance(partition, bool) or partition < 0
    ):
        raise EnvelopeError(FieldError("partition", "must be a non-negative integer"))
    job_id = _job_id(queue, doc, index, idempotency, content)
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


def _job_id(queue: str, doc: dict[str, Any], index: int, idempotency: str | None, content: bool) -> Any:
    """The client's id; else the content id (asked for, or a ``dedup_key``); else one derived from the
    Idempotency-Key; else None (the envelope builder makes a fresh one)."""
    key = doc.get("dedup_key")
    if key is not None:
        if not isinstance(key, str) or not 0 < len(key) <= MAX_DEDUP_KEY:
            raise EnvelopeError(
                FieldError("dedup_key", f"must be a string of 1 to {MAX_DEDUP_KEY} characters")
            )
        if doc.get("id") is not None:
            raise EnvelopeError(FieldError("dedup_key", "give id or dedup_key, not both"))
    if doc.get("id") is not None:
        return doc["id"]
    if content or key is not None:
        try:
            return content_id(queue, str(doc["kind"]), doc.get("args"), key)
        except TypeError as exc:  # args orjson cannot write (never from parsed JSON)
            raise EnvelopeError(FieldError("args", str(exc))) from None
    return f"ik-{idempotency[:32]}-{index}" if idempotency is not None else None


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
    records = [
        job_record(topic, env, partition)
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


async def produce(gate: Gate, parsed: Parsed, records: list[Record], acks: Acks) -> list[Delivered]:
    """Write the records; Kafka's refusals of a record name its job, backend failures are counted."""
    try:
        return await gate.producer(acks).produce_many(records)
    except RecordTooLarge as exc:  # a topic whose max.message.bytes is below jobq's set (made elsewhere)
        log.warning("Kafka refused a record as too large", topic=records[0].topic, error=exc.message)
        raise too_large(parsed, {exc.index: exc.size}, None) from None
    except PartitionInvalid as exc:  # the metadata the gateway checked against was out of date
        where = parsed.field(exc.index, "partition")
        problem = FieldError(where, f"the topic has no partition {exc.partition}")
        raise EnvelopeError(problem, code="partition_invalid") from None
    except JobqError as exc:
        if exc.retriable:
            metrics.GATE_PRODUCE_FAILURES.labels(records[0].topic).inc()
        raise


async def check_blocked(gate: Gate, queue: str, what: str = "") -> QueueConfig | None:
    """423 ``queue_blocked`` when the queue's ``enqueue_blocked`` flag is set (the cached configuration;
    Redis not answering: accepted, enqueues never depend on Redis). ``what``: whose queue it is, named
    first in the message (a graph's node). The configuration it read (the request's other checks use
    it: one look-up a request)."""
    config = await gate.queue_config(queue)
    if config is not None and config.enqueue_blocked:
        raise HttpError(
            423,
            "queue_blocked",
            f"{what}queue {queue!r} does not take new jobs (enqueue_blocked); nothing was written. Other"
            f" queues are not affected; an operator lifts it with PATCH /v1/queues/{queue}"
            ' {"enqueue_blocked": false}',
        )
    return config
