"""Job endpoints: enqueue (into Kafka), look up, cancel / unschedule, replay."""

from __future__ import annotations

import hashlib

from aiohttp import web

from jqcore import metrics
from jqcore.clock import now_ms
from jqcore.envelope import decode, validate_name
from jqcore.errors import EnvelopeError, FieldError
from jqcore.log import get_logger
from jqengine import QueueConfig
from jqrecover.replay import REPLAYABLE, ReplayError, replayed, replayed_from_archive
from jqruntime import tracing
from jqruntime.authz import Policy, path_queue
from jqruntime.http import HttpError, json_response
from jqruntime.stores import idempotency
from kafkagate import models as m
from kafkagate.api import Api, Param
from kafkagate.archive import archived, archived_snapshot
from kafkagate.auth import job_kinds, replayed_kind
from kafkagate.body import read_body
from kafkagate.enqueue import (
    Parsed,
    accepted_body,
    build_records,
    check_blocked,
    check_exclusive,
    check_partitions,
    idempotency_digest,
    needs_exclusivity,
    parse_jobs,
    produce,
)
from kafkagate.requests import engine_call, queue_of
from kafkagate.state import GATE, Gate

__all__ = ["routes"]

log = get_logger("kafkagate.jobs")
routes = Api()

IDEMPOTENCY_HEADER = "Idempotency-Key"
CANCEL_REASON_MAX = 1000
"""Longest cancel reason (kept in the job's record, or in its tombstone until the relay brings it)."""


async def _check_idempotency(gate: Gate, digest: str, body_hash: str) -> None:
    """Refuse a reused key with a different body (best effort: Redis down ⇒ skip, ids stay stable)."""
    try:
        previous = await idempotency.remember(
            gate.redis_client, digest, body_hash, gate.settings.idempotency_ttl_s
        )
    except Exception as exc:
        log.warning("idempotency check skipped (Redis unreachable)", error=repr(exc))
        return
    if previous is not None and previous != body_hash:
        raise HttpError(
            409, "idempotency_key_reused", f"{IDEMPOTENCY_HEADER} was used before with a different body"
        )


async def _idempotency(request: web.Request, gate: Gate, queue: str, body: bytes) -> str | None:
    """The digest naming the request's ``Idempotency-Key`` (None without one), after the reuse check."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    if not key or len(key) > 255:
        raise HttpError(400, "idempotency_key_invalid", f"{IDEMPOTENCY_HEADER} must be 1-255 characters")
    digest, body_hash = idempotency_digest(key, queue, body)
    await _check_idempotency(gate, digest, body_hash)
    return digest


def _content_ids(request: web.Request, config: QueueConfig | None) -> bool:
    """Whether jobs without an id get content ids: ``?id_from=content|random``, else the queue's
    ``id_from`` policy (its cached ``config``; None, Redis not answering: random ids, enqueues never
    depend on Redis)."""
    asked = request.query.get("id_from")
    if asked is not None:
        if asked not in ("content", "random"):
            problem = FieldError("id_from", "must be content or random")
            raise HttpError(
                400, "id_from_invalid", f"id_from must be content or random, not {asked!r}", [problem]
            )
        return asked == "content"
    return config is not None and config.id_from == "content"


@routes.post(
    "/v1/queues/{queue}/jobs",
    policy=Policy("enqueue", (path_queue, job_kinds)),
    summary="enqueue one job, a batch ({jobs: [...]}) or NDJSON; 202 once Kafka confirmed every job",
    body=(m.JobIn, m.JobBatch),
    answer=m.Accepted,
    ok=202,
    params=(
        Param("Idempotency-Key", "header", {"type": "string", "minLength": 1, "maxLength": 255}),
        Param(
            "id_from",
            "query",
            {"type": "string", "enum": ["random", "content"]},
            "ids of jobs without one: random, or from their content (default: the queue's id_from)",
        ),
    ),
    errors={
        400: "body_empty, body_invalid, envelope_invalid, partition_invalid, excl_missing, id_from_invalid,"
        " idempotency_key_invalid: an invalid job (every bad field named, jobs[i].field in a batch)",
        403: "kind_forbidden, queue_not_allowed: the token may not enqueue this kind, or the queue is not"
        " served here",
        404: "queue_unrouted: no route sends the queue to a topic",
        409: "idempotency_key_reused: the Idempotency-Key was used with another body",
        413: "batch_too_large, job_too_large: more jobs than JOBQ_GATE_MAX_BATCH, or a job over 1 MiB",
        423: "queue_blocked: the queue's enqueue_blocked flag is set (its cached configuration); nothing"
        " written",
        429: "gateway_busy: the process's in-flight body budget is full (Retry-After)",
        503: "kafka_unavailable, topic_missing: Kafka did not confirm (Retry-After); nothing is"
        " half-accepted",
    },
)
async def enqueue(request: web.Request) -> web.Response:
    """Enqueue one job or a batch; 202 only after Kafka confirmed every job of the request."""
    gate = request.app[GATE]
    queue = queue_of(request)
    body = await read_body(request)
    config = await check_blocked(gate, queue)
    digest = await _idempotency(request, gate, queue, body)
    content = _content_ids(request, config)
    with tracing.enqueue_spans(request.headers) as spans:  # off: a shared no-op, envelopes untouched
        parsed = parse_jobs(
            queue,
            body,
            request.content_type,
            max_batch=gate.settings.max_batch,
            idempotency=digest,
            now=now_ms(),
            stamp=spans.stamp,
            content=content,
        )
        records, acks = build_records(parsed, gate.routing, queue)
        wanted = [p for p in parsed.partitions if p is not None]
        check_partitions(parsed, await gate.partition_count(records[0].topic, wanted))  # also: topic exists
        if needs_exclusivity(parsed):
            check_exclusive(parsed, config)
        delivered = await produce(gate, parsed, records, acks)
        spans.delivered(delivered)
    metrics.child(metrics.GATE_JOBS_PRODUCED, queue, records[0].topic).inc(len(records))
    gate.count_produced(records[0].topic, len(records))
    accepted = accepted_body(parsed.envelopes, delivered)
    accepted["az"] = gate.settings.az  # which zone's gateway took it (clients prefer their own)
    return json_response(accepted, 202)


@routes.get(
    "/v1/queues/{queue}/jobs/{id}",
    policy=Policy("read", (path_queue,)),
    summary="a job, live or finished: state, attempts, errors, timestamps, result; from the history"
    " (source: archive) once Redis forgot it",
    answer=m.Job,
    errors={404: "job_not_found: no such job (not yet relayed, or forgotten)"},
)
async def get_job(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    info = await engine_call(gate.engine.reads.get_job(queue, job_id))
    if info is None:
        old = await archived(request, queue, job_id)
        if old is not None:
            return json_response(old)
        raise HttpError(
            404, "job_not_found", f"no job {job_id!r} in queue {queue!r} (not yet relayed, or GC'd)"
        )
    out = info.as_dict()
    out.pop("envelope", None)
    if info.envelope:
        env = decode(info.envelope)
        out["args"], out["meta"], out["excl"] = env.args, dict(env.meta), env.excl
    return json_response(out)


@routes.delete(
    "/v1/queues/{queue}/jobs/{id}",
    policy=Policy("admin", (path_queue,)),
    summary="cancel / unschedule (a job still in Kafka is tombstoned); a finished job answers outcome"
    " already_<state> and changed=false",
    answer=m.Canceled,
    params=(
        Param(
            "reason",
            "query",
            {"type": "string"},
            f"kept with the job; at most {CANCEL_REASON_MAX} characters",
        ),
    ),
    errors={400: "reason_too_long: the reason is over 1000 characters"},
)
async def cancel_job(request: web.Request) -> web.Response:
    """Cancel or unschedule; a job still in Kafka is tombstoned and refused when the relay brings it. A
    far-future job is first tombstoned in the schedule topic (so no rebuild of the tier brings it back),
    then canceled in Redis (its index entry gone, a canceled record left: a move racing this is refused)."""
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    try:  # a job not yet relayed leaves a tombstone: only ids an enqueue could have given
        validate_name("id", job_id)
    except EnvelopeError as exc:
        raise HttpError(400, "id_invalid", exc.message, exc.fields) from None
    reason = request.query.get("reason", "canceled over HTTP")
    if len(reason) > CANCEL_REASON_MAX:
        message = f"reason is {len(reason)} characters; at most {CANCEL_REASON_MAX}"
        raise HttpError(400, "reason_too_long", message, [FieldError("reason", message)])
    if await engine_call(gate.engine.reads.far_run_at(queue, job_id)) is not None:
        await gate.unschedule_far(queue, job_id)
    result = await engine_call(gate.engine.admin.cancel(queue, job_id, reason))
    if not result.changed:  # idempotent: say what it is; nothing was changed
        state = result.state
        return json_response({"id": job_id, "outcome": f"already_{state}", "state": state, "changed": False})
    return json_response({"id": job_id, "outcome": result.outcome, "changed": True})


@routes.post(
    "/v1/queues/{queue}/jobs/{id}/replay",
    policy=Policy("admin", (path_queue, replayed_kind)),
    summary="a new job from a finished or dead one (Idempotency-Key: the same replay twice is one job)",
    answer=m.ReplayAccepted,
    ok=202,
    also={200: m.Replayed},
    params=(Param("Idempotency-Key", "header", {"type": "string", "minLength": 1, "maxLength": 255}),),
    errors={
        400: "idempotency_key_invalid: the Idempotency-Key is not 1-255 characters",
        404: "job_not_found: no such job",
        409: "job_not_finished: only finished jobs replay; payload_missing / payload_truncated: the archive"
        " kept no payload, or cut its args or meta",
    },
)
async def replay_job(request: web.Request) -> web.Response:
    """A new job (new id) with the same kind, args, meta, priority, lease and expiry as a finished or dead
    one, through Kafka; from the archive (the history's payload) once Redis forgot the job. With an
    ``Idempotency-Key`` header the new id is derived from (job, key): the same replay sent twice is one
    new job."""
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is not None and not 0 < len(key) <= 255:
        raise HttpError(400, "idempotency_key_invalid", f"{IDEMPOTENCY_HEADER} must be 1-255 characters")
    info = await engine_call(gate.engine.reads.get_job(queue, job_id))
    old = None if info is not None else await archived_snapshot(request, queue, job_id)
    if (info is None or info.envelope is None) and old is None:
        raise HttpError(404, "job_not_found", f"no job {job_id!r} in queue {queue!r}")
    if info is not None and info.state not in REPLAYABLE:
        raise HttpError(409, "job_not_finished", f"job {job_id!r} is {info.state}; only finished jobs replay")
    source = "redis" if info is not None else "archive"
    new_id = None
    if key is not None:
        new_id = "rp-" + hashlib.sha256(f"{queue}\0{job_id}\0{key}".encode()).hexdigest()[:40]
        done = await engine_call(gate.engine.reads.get_job(queue, new_id))
        if done is not None:  # this replay was made before (and reached Redis): the same answer again
            again = {"ids": [new_id], "replay_of": job_id, "state": done.state, "changed": False}
            return json_response(again)
    try:
        if info is not None:
            env = replayed(queue, info, new_id)
        else:
            assert old is not None  # one of them, checked above
            env = replayed_from_archive(queue, old, new_id)
    except ReplayError as exc:
        raise HttpError(exc.http_status, exc.code, exc.message) from exc
    records, acks = build_records(Parsed([env], [None]), gate.routing, queue)
    await gate.check_topic(records[0].topic)
    delivered = await gate.producer(acks).produce_many(records)
    body = accepted_body([env], delivered)
    body["replay_of"] = job_id
    body["source"] = source
    return json_response(body, 202)
