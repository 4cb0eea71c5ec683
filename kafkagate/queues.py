"""Queue administration: config, depths (also by filter), dead letters, job types."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from aiohttp import web

from jqcore.errors import BackendUnavailable, FieldError
from jqcore.rates import Rate
from jqengine import QueueConfig, check_bounds
from jqruntime.authz import Policy, path_queue
from jqruntime.dispatch import EVERY_QUEUE, DispatchConfig, load_configs, pick
from jqruntime.http import HttpError, json_response
from jqruntime.stores import dispatch as dispatch_store
from jqruntime.stores.config import restore_switches
from kafkagate import admin_models as m
from kafkagate.api import Api, Param
from kafkagate.audit import DETAILS
from kafkagate.auth import kind_put, token_of, visible
from kafkagate.queue_bodies import DeadBody, KindBody, PurgeBody, QueueConfigBody, QueuePatchBody
from kafkagate.requests import body_model, engine_call, kind_of, queue_of
from kafkagate.state import GATE

__all__ = ["routes"]

routes = Api()
MAX_OFFSET = 2**53
"""Largest dead-list offset accepted (Redis ranges are 64-bit; a bigger one is a client error)."""
PURGE_CHUNK = 100
"""Jobs a purge lists (and tombstones, for far-future ones) at once."""


def _filter(request: web.Request) -> dict[str, str]:
    """The ``meta.KEY=VALUE`` query pairs (any number; a job must have them all), each key once."""
    given = [(k[5:], v) for k, v in request.query.items() if k.startswith("meta.")]
    pairs = dict(given)
    if len(pairs) < len(given):
        raise HttpError(400, "filter_invalid", "depth by filter takes each meta.KEY once")
    return pairs


@routes.get(
    "/v1/queues",
    policy=Policy("read"),
    summary="queues known to the engine (those the token may see)",
    answer=m.QueueList,
)
async def list_queues(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    return json_response({"queues": visible(request, await engine_call(gate.engine.reads.queues()))})


@routes.get(
    "/v1/queues/{queue}",
    policy=Policy("read", (path_queue,)),
    summary="config, depth per state (depth by filter with ?meta.KEY=VALUE&…, jobs having every pair),"
    " oldest pending age",
    answer=m.QueueInfo,
    params=(
        Param(
            "meta.KEY",
            "query",
            {"type": "string"},
            "depth of the jobs whose meta KEY is this value (repeat with other keys: all must match)",
        ),
    ),
    errors={400: "filter_invalid, filter_key_not_indexed: a meta key given twice, or a key not indexed"},
)
async def get_queue(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue = queue_of(request)
    config = await engine_call(gate.engine.reads.queue_config(queue))
    depth = await engine_call(gate.engine.reads.depth(queue, _filter(request) or None))
    topic, acks = gate.routing.route(queue)
    try:
        rate: dict[str, Any] | None = (await gate.rates().get(queue)).as_dict()
    except BackendUnavailable:
        rate = None  # the rest of the answer is Redis's: Consul down costs only this field
    body: dict[str, Any] = {
        "queue": queue,
        "topic": topic,
        "acks": acks,
        "config": config.as_dict(),
        "depth": depth.as_dict(),
        "rate": rate,
    }
    return json_response(body)


@routes.put(
    "/v1/queues/{queue}",
    policy=Policy("admin", (path_queue,)),
    summary="replace the whole configuration (simple/exclusive, lease, attempts, filter keys, paused,"
    " retention, dedup policy, fairness, memory budget, default delay, enqueues blocked)",
    body=QueueConfigBody,
    body_example={"mode": "exclusive", "excl_key": "tenant", "lease_ms": 60000},
    answer=m.QueueConfigured,
    errors={
        400: "queue_config_invalid: an inconsistent configuration",
        409: "queue_config_would_reset: would turn an exclusive queue simple (send mode, or PATCH)",
    },
)
async def put_queue(request: web.Request) -> web.Response:
    """Replace the whole configuration (fields not given take their defaults). Refused (409) when it
    would silently turn an exclusive queue into a simple one: send ``mode`` explicitly, or PATCH."""
    gate = request.app[GATE]
    queue = queue_of(request)
    body = await body_model(request, QueueConfigBody)
    current = await engine_call(gate.engine.reads.queue_config(queue))
    if current.mode == "exclusive" and "mode" not in body.model_fields_set:
        raise HttpError(
            409,
            "queue_config_would_reset",
            f"queue {queue!r} is exclusive on {current.excl_key!r}; PUT replaces the whole configuration and"
            " this document does not name a mode (it would become simple). Send mode explicitly, or use"
            " PATCH to change only some fields",
        )
    config = QueueConfig(**{**body.model_dump(), "filter_keys": tuple(body.filter_keys)})
    return await _configure(request, queue, config, body.model_dump())


@routes.patch(
    "/v1/queues/{queue}",
    policy=Policy("admin", (path_queue,)),
    summary="change only the fields given; the others keep their values",
    body=QueuePatchBody,
    body_example={"paused": True},
    answer=m.QueueConfigured,
    errors={
        400: "queue_config_invalid: an inconsistent configuration; rate_invalid: a rate limit that is none",
        503: "consul_unavailable: the rate limit (or the configuration's durable copy) not kept",
    },
)
async def patch_queue(request: web.Request) -> web.Response:
    """Change only the fields given (e.g. ``{"paused": true}``); the rest keep their current values.
    ``rate`` is the relays' live limit (``jqcore.rates``), kept in Consul and watched by every relay."""
    gate = request.app[GATE]
    queue = queue_of(request)
    body = await body_model(request, QueuePatchBody)
    changes = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
    extra: dict[str, Any] = {}
    if (text := changes.pop("rate", None)) is not None:
        try:
            rate = Rate.parse(text)
        except ValueError as exc:
            raise HttpError(400, "rate_invalid", str(exc)) from exc
        await gate.rates().put(queue, rate)
        request[DETAILS] = f"rate={rate.text or 'unlimited'}"
        extra["rate"] = rate.as_dict()
    if "filter_keys" in changes:
        changes["filter_keys"] = tuple(changes["filter_keys"])
    if changes.get("fair_key") == "":  # "" turns fairness off
        changes["fair_key"] = None
    current = await engine_call(gate.engine.reads.queue_config(queue))
    if extra and not changes:  # the rate alone: the configuration stays as it is
        return json_response({"queue": queue, "config": current.as_dict(), **extra})
    return await _configure(request, queue, replace(current, **changes), changes, extra)


async def _configure(
    request: web.Request,
    queue: str,
    config: QueueConfig,
    changes: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> web.Response:
    """Store ``config`` as the queue's configuration (in force in Redis, then kept in Consul for a
    rebuild: Consul unreachable is a 503 with the change in force but not kept; send it again); answer
    with what is now in force. The values the request set (``changes``) must be within the operator's
    bounds (``JOBQ_QUEUE_MAX_*``)."""
    gate = request.app[GATE]
    await check_bounds(gate.redis_client, gate.queue_bounds, changes)
    # a queue this creates after Redis lost its data is created with the kill switches kept in Consul
    await engine_call(restore_switches(gate.configs(), gate.engine))
    await engine_call(gate.engine.admin.configure_queue(queue, config))
    gate.forget_queue_config(queue)  # this gateway's next enqueue reads it (others within the TTL)
    await gate.configs().put_queue(queue, config)
    return json_response({"queue": queue, "config": config.as_dict(), **(extra or {})})


@routes.get(
    "/v1/queues/{queue}/dead",
    policy=Policy("read", (path_queue,)),
    summary="dead letters (errored jobs), paged by offset and limit",
    answer=m.DeadJobs,
    params=(
        Param("offset", "query", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET}),
        Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000}),
    ),
    errors={400: "query_invalid: offset or limit not an integer in range"},
)
async def list_dead(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue = queue_of(request)
    try:
        offset = int(request.query.get("offset", "0"))
        limit = min(1000, int(request.query.get("limit", "100")))
    except ValueError:
        raise HttpError(400, "query_invalid", "offset and limit must be integers") from None
    if not (0 <= offset <= MAX_OFFSET and limit >= 1):
        raise HttpError(400, "query_invalid", f"offset must be 0..{MAX_OFFSET} and limit at least 1")
    jobs = await engine_call(gate.engine.reads.dead_list(queue, offset, limit))
    out = []
    for j in jobs:
        d = j.as_dict()
        d.pop("envelope", None)
        out.append(d)
    return json_response({"queue": queue, "jobs": out})


@routes.post(
    "/v1/queues/{queue}/dead/retry",
    policy=Policy("admin", (path_queue,)),
    summary="retry dead letters (ids, or the oldest up to limit)",
    body=DeadBody,
    body_example={"ids": ["01J0"]},
    answer=m.DeadRetried,
)
async def retry_dead(request: web.Request) -> web.Response:
    return await _on_dead(request, "retried")


@routes.delete(
    "/v1/queues/{queue}/dead",
    policy=Policy("admin", (path_queue,)),
    summary="purge dead letters (ids, or the oldest up to limit)",
    body=DeadBody,
    body_example={"limit": 100},
    answer=m.DeadPurged,
)
async def purge_dead(request: web.Request) -> web.Response:
    return await _on_dead(request, "purged")


@routes.post(
    "/v1/queues/{queue}/purge",
    policy=Policy("admin", (path_queue,)),
    summary="cancel the queue's waiting jobs (pending, delayed, far-future), at most limit a call, each"
    " kept as canceled with the reason; running jobs finish",
    body=PurgeBody,
    body_example={"limit": 1000, "reason": "bad deploy"},
    answer=m.QueuePurged,
)
async def purge_queue(request: web.Request) -> web.Response:
    """Cancel waiting jobs, state by state in each state's order (pending: priority; delayed: run_at), at
    most ``limit`` in this call, as ``DELETE /v1/queues/{queue}/jobs/{id}`` would each (a far-future job
    is tombstoned in the schedule topic first); ``remaining``: how many still wait in those states. Jobs
    enqueued meanwhile may be among them: a purge empties what waits, it does not close the queue (set
    ``enqueue_blocked`` for that)."""
    gate = request.app[GATE]
    queue = queue_of(request)
    body = await body_model(request, PurgeBody)
    left, by_state = body.limit, dict.fromkeys(body.states, 0)
    for state in body.states:
        while left > 0:  # canceled jobs leave the state's list: always read its head
            ids, _ = await engine_call(gate.engine.reads.list_ids(queue, state, 0, min(PURGE_CHUNK, left)))
            if not ids:
                break
            if state == "far":  # tombstoned first, as a cancel does: no rebuild of the tier brings them
                await gate.unschedule_far(queue, *ids)
            changed = 0
            for job_id in ids:
                changed += (await engine_call(gate.engine.admin.cancel(queue, job_id, body.reason))).changed
            by_state[state] += changed
            left -= changed
            if not changed:  # the head moved on by itself (claimed, finished): nothing more to take here
                break
    depth = await engine_call(gate.engine.reads.depth(queue))
    remaining = sum(getattr(depth, state) for state in body.states)
    canceled = sum(by_state.values())
    return json_response({"queue": queue, "canceled": canceled, "by_state": by_state, "remaining": remaining})


async def _on_dead(request: web.Request, done: Literal["retried", "purged"]) -> web.Response:
    """Retry or purge the queue's dead jobs (the body's ``ids``, or up to its ``limit``); answer how many."""
    engine = request.app[GATE].engine
    queue = queue_of(request)
    body = await body_model(request, DeadBody)
    act = engine.admin.dead_retry if done == "retried" else engine.admin.dead_purge
    n = await engine_call(act(queue, body.ids, body.limit))
    return json_response({"queue": queue, done: n})


@routes.put(
    "/v1/kinds/{kind}",
    policy=Policy("admin", (kind_put,)),
    summary="configure a job type: concurrency, attempts, delivery, for every queue or some",
    body=KindBody,
    body_example={"concurrency": 4, "delivery": "at_least_once"},
    answer=m.KindConfigured,
)
async def put_kind(request: web.Request) -> web.Response:
    """Configure a job type for the queues it names (``queues`` omitted: every queue). Its dispatch
    configuration is stored for each of those queues (omitted: under ``*``, every queue without one of its
    own), replacing theirs; a PUT without ``dispatch`` removes theirs. Another queue's is never touched."""
    gate = request.app[GATE]
    kind = kind_of(request)
    body = await body_model(request, KindBody)
    if body.queues is not None and not body.queues:
        raise HttpError(
            400,
            "kind_queues_empty",
            'queues: [] names no queue; name the queues this job type is for, or omit "queues" for every'
            " queue (a token of every queue)",
            [FieldError("queues", "must name at least one queue, or be omitted")],
        )
    options = body.model_dump(
        include={"concurrency", "max_attempts", "delivery", "priority", "ignore_result"}
    )
    await engine_call(gate.engine.admin.configure_kind(kind, queues=body.queues, **options))
    stored = body.dispatch.stored() if body.dispatch else None
    if body.dispatch is not None:  # the audit trail says where the jobs go and by which credential name
        request[DETAILS] = f"dispatch={body.dispatch.url.host} auth={body.dispatch.auth_source()}"
    await engine_call(dispatch_store.put(gate.redis_client, kind, body.queues, stored))
    await gate.configs().put_kind(kind, body.queues, **options)
    shown = body.dispatch.public() if body.dispatch else None
    return json_response({"kind": kind, **body.model_dump(exclude={"dispatch"}), "dispatch": shown})


async def _kinds(request: web.Request) -> dict[str, dict[str, Any]]:
    """The job types of the queues the token sees. ``dispatch``: the configuration for every queue
    (``*``); each queue's ``dispatch`` (when it has one): the one its jobs are pushed with (its own, else
    ``*``'s) — the dispatcher's and the callbacks' rule. A dispatch URL's path and query are masked for
    a token without ``admin`` (a webhook's secret is often in them)."""
    gate = request.app[GATE]
    queues = visible(request, await engine_call(gate.engine.reads.queues()))
    found: dict[str, dict[str, Any]] = await engine_call(gate.engine.reads.kinds(queues))
    pushed = load_configs(await engine_call(dispatch_store.configs(gate.redis_client)))
    full_url = token_of(request).has("admin")

    def shown(config: DispatchConfig | None) -> dict[str, Any] | None:
        return None if config is None else config.public(full_url=full_url)

    seen = set(queues)
    for queue, kind in pushed:  # a queue the kind has no options in may still push it
        if queue in seen:
            found.setdefault(kind, {"defaults": None, "queues": {}})["queues"].setdefault(queue, {})
    for kind, entry in found.items():
        entry["dispatch"] = shown(pushed.get((EVERY_QUEUE, kind)))
        for queue, options in entry["queues"].items():
            config = pick(pushed, queue, kind)
            if config is not None:  # else absent (null): the queue's jobs of the kind are for pools
                options["dispatch"] = shown(config)
    return found


@routes.get(
    "/v1/kinds",
    policy=Policy("read"),
    summary="every configured job type, its defaults and per-queue options",
    answer=m.KindList,
)
async def list_kinds(request: web.Request) -> web.Response:
    """Every configured job type: defaults for all queues, and per queue its options and running count."""
    found = await _kinds(request)
    return json_response({"kinds": [{"kind": k, **v} for k, v in sorted(found.items())]})


@routes.get(
    "/v1/kinds/{kind}",
    policy=Policy("read"),
    summary="one job type",
    answer=m.Kind,
    errors={404: "kind_not_found: the job type is not configured"},
)
async def get_kind(request: web.Request) -> web.Response:
    kind = kind_of(request)
    found = (await _kinds(request)).get(kind)
    if found is None:
        raise HttpError(404, "kind_not_found", f"no job type {kind!r} is configured (PUT /v1/kinds/{kind})")
    return json_response({"kind": kind, **found})
