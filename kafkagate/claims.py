"""The worker API for workers in other languages: claim (batch, lease, filter, long-poll), extend,
complete, fail (release, snooze, cancel and heartbeat: :mod:`kafkagate.running`). Every write carries the
attempt and the lease token; a stale one is a 409 (Rickover). A claim names its worker (stored on the job
and in its events, as a Python pool's name); a graph node's claim carries its parents' outcomes, and its
end written here is reported to its graph before the answer (the Python pool's path: the next nodes are
released at once, not by the scheduler's repair)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from jqcore.envelope_rules import MAX_LEASE_MS, MIN_LEASE_MS
from jqcore.log import get_logger
from jqengine import ClaimedJob, NodeInputs
from jqruntime.authz import Policy, any_kind, path_queue
from jqruntime.http import HttpError, json_response
from kafkagate import models as m
from kafkagate.api import Api
from kafkagate.auth import token_of
from kafkagate.body import read_body
from kafkagate.requests import engine_call, parse_model, queue_of
from kafkagate.state import GATE, Gate
from kafkagate.workmodels import NOT_HELD_CODES, WORKER_PATTERN, Owner

__all__ = ["routes"]

log = get_logger("kafkagate.claims")
routes = Api()

CLAIM_REPLY_MAX_BYTES = 16 * 1024 * 1024
"""Largest claim answer in bytes (16 MiB, room for 16 of the largest jobs): a claim returns the jobs that
fit (always at least one) and gives the rest back to the queue at once, unstarted, their attempt
refunded."""
INPUTS_AT_ONCE = 16
"""Graph nodes of one claim whose inputs are read at once (each read takes one of the process's Redis
connections for its round trip)."""


class ClaimBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(1, ge=1, le=1000)
    lease_ms: int | None = Field(None, ge=MIN_LEASE_MS, le=MAX_LEASE_MS)
    """Omitted: each job's own ``lease_ms``, else the queue's default lease."""
    filter: dict[str, str] = Field(default_factory=dict)
    wait_ms: int = Field(0, ge=0)
    """Long-poll: wait up to this long (capped by the gateway) for work when none is claimable now."""
    worker: str | None = Field(None, pattern=WORKER_PATTERN)
    """Who claims (kept on each job as ``worker`` and in its events); omitted: ``http:<token name>``."""


class ExtendBody(Owner):
    lease_ms: int | None = Field(None, ge=MIN_LEASE_MS, le=MAX_LEASE_MS)
    """Omitted: the job's own ``lease_ms``, else the queue's default lease."""


class CompleteBody(Owner):
    result: Any = None


class FailBody(Owner):
    error: str = Field(max_length=65_536)
    retry_in_ms: int | None = Field(None, ge=0)
    permanent: bool = False


def _claimed(job: ClaimedJob, inputs: NodeInputs | None) -> dict[str, Any]:
    env = job.envelope
    graph = {"graph": inputs.as_dict()} if inputs is not None else {}
    return {
        "id": env.id,
        "kind": env.kind,
        "args": env.args,
        "meta": dict(env.meta),
        "attempt": job.attempt,
        "token": job.token,
        "lease_deadline_ms": job.lease_deadline_ms,
        "lease_ms": job.lease_ms,
        "envelope_b64": base64.b64encode(env.raw or b"").decode(),
        **graph,
    }


@routes.post(
    "/v1/queues/{queue}/claims",
    policy=Policy("work", (path_queue, any_kind)),
    summary="claim jobs (batch, lease, filter, long-poll) for a named worker; a graph node's job carries"
    " its parents' outcomes (graph); an answer holds at most 16 MiB (the rest stay"
    " claimable)",
    body=ClaimBody,
    body_example={"n": 10, "lease_ms": 30000, "wait_ms": 20000, "worker": "billing-7"},
    answer=m.Claimed,
    errors={
        400: "filter_key_not_indexed: a filter on a key the queue does not index",
        403: "kind_forbidden: a token limited to some kinds cannot claim (a claim takes any kind)",
        429: "gateway_busy: the process's long-polls are all parked, or the token's share of them"
        " (Retry-After)",
    },
)
async def claim(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue = queue_of(request)
    token = token_of(request)
    body = parse_model(ClaimBody, await read_body(request))
    worker = body.worker or f"http:{token.name}"
    wait_s = min(body.wait_ms, gate.settings.claim_wait_max_ms) / 1000
    jobs = await _claim(gate, queue, body, worker)
    filtered = bool(body.filter)
    await gate.saw_worker(worker, token.name, queue, claimed=bool(jobs), filtered=filtered)
    if jobs or wait_s <= 0:
        return await _reply(gate, queue, jobs)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    with gate.long_polls.slot(token.name):  # 429 gateway_busy past JOBQ_GATE_LONG_POLLS_MAX or its share
        while not jobs:
            left = deadline - loop.time()
            if left <= 0 or not await gate.long_polls.wait(queue, left):
                break
            jobs = await _claim(gate, queue, body, worker)
    if jobs:
        await gate.saw_worker(worker, token.name, queue, claimed=True, filtered=filtered)
    return await _reply(gate, queue, jobs)


async def _claim(gate: Gate, queue: str, body: ClaimBody, worker: str) -> list[ClaimedJob]:
    claiming = gate.engine.jobs.claim(
        queue, body.n, lease_ms=body.lease_ms or 0, filter=body.filter or None, worker=worker
    )
    jobs: list[ClaimedJob] = await engine_call(claiming)
    return jobs


async def _inputs(gate: Gate, queue: str, jobs: list[ClaimedJob]) -> list[NodeInputs | None]:
    """Each graph node's view of its graph (its parents' outcomes), as a Python pool reads it before
    running the node; None for a plain job. Unreadable (Redis away): the jobs are given back first."""

    async def one(job: ClaimedJob) -> NodeInputs | None:
        graph = job.envelope.graph
        return await gate.engine.graphs.inputs(graph["id"], graph["node"]) if graph else None

    out: list[NodeInputs | None] = []
    try:
        for at in range(0, len(jobs), INPUTS_AT_ONCE):
            out += await asyncio.gather(*(one(j) for j in jobs[at : at + INPUTS_AT_ONCE]))
    except Exception:
        owned = [(j.envelope.id, j.attempt, j.token, False) for j in jobs]
        with contextlib.suppress(Exception):
            await gate.engine.jobs.release(queue, owned)
        raise
    return out


async def _reply(gate: Gate, queue: str, jobs: list[ClaimedJob]) -> web.Response:
    """The claimed jobs that fit :data:`CLAIM_REPLY_MAX_BYTES` (the first always does); the rest
    are released at once: pending again, unstarted, their attempt refunded (never claimed and dropped)."""
    parts: list[bytes] = []
    size, limit = 0, CLAIM_REPLY_MAX_BYTES
    inputs = await engine_call(_inputs(gate, queue, jobs)) if any(j.envelope.graph for j in jobs) else None
    for i, job in enumerate(jobs):
        part = orjson.dumps(_claimed(job, inputs[i] if inputs else None))
        if parts and size + len(part) + 1 > limit:
            break
        parts.append(part)
        size += len(part) + 1
    rest = jobs[len(parts) :]
    if rest:
        owned = [(j.envelope.id, j.attempt, j.token, False) for j in rest]
        await engine_call(gate.engine.jobs.release(queue, owned))
    body = b'{"jobs":[' + b",".join(parts) + b"]}"
    return web.Response(body=body, content_type="application/json")


def _owner(request: web.Request, body: Owner) -> tuple[str, int, str]:
    return request.match_info["id"], body.attempt, body.token


@routes.post(
    "/v1/queues/{queue}/jobs/{id}/extend",
    policy=Policy("work", (path_queue,)),
    summary="extend a claimed job's lease",
    body=ExtendBody,
    body_example={"attempt": 1, "token": "9f1c", "lease_ms": 60000},
    answer=m.LeaseExtended,
    errors={
        404: "job_not_found: no such job",
        409: "lease_stale, job_canceled: another attempt owns the job now, or it was canceled",
    },
)
async def extend(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue = queue_of(request)
    body = parse_model(ExtendBody, await read_body(request))
    owner = _owner(request, body)
    result = await engine_call(gate.engine.jobs.extend(queue, [owner], body.lease_ms or 0))
    outcome = result[owner[0]]
    if isinstance(outcome, str):
        status = 404 if outcome == "missing" else 409
        if outcome == "canceled":  # canceled at this extend: a graph node's end goes to its graph
            await gate.report_node(queue, owner[0])
        raise HttpError(status, NOT_HELD_CODES[outcome], f"lease of job {owner[0]!r} not extended: {outcome}")
    return json_response({"id": owner[0], "lease_deadline_ms": outcome})


@routes.post(
    "/v1/queues/{queue}/jobs/{id}/complete",
    policy=Policy("work", (path_queue,)),
    summary="complete an attempt, with its result (any JSON)",
    body=CompleteBody,
    body_example={"attempt": 1, "token": "9f1c", "result": {"sent": True}},
    answer=m.Completed,
    errors={
        400: "queue_config_invalid: the result is larger than the engine keeps",
        404: "job_not_found: no such job",
        409: "lease_stale, job_canceled: another attempt owns the job now, or it was canceled",
    },
)
async def complete(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue = queue_of(request)
    body = parse_model(CompleteBody, await read_body(request))
    data = None if body.result is None else orjson.dumps(body.result)
    await engine_call(gate.engine.jobs.complete(queue, _owner(request, body), data))
    await gate.report_node(queue, request.match_info["id"])
    return json_response({"id": request.match_info["id"], "state": "completed"})


@routes.post(
    "/v1/queues/{queue}/jobs/{id}/fail",
    policy=Policy("work", (path_queue,)),
    summary="fail an attempt: retried after its backoff (or retry_in_ms), errored when permanent or out of"
    " attempts",
    body=FailBody,
    body_example={"attempt": 1, "token": "9f1c", "error": "smtp timeout", "retry_in_ms": 5000},
    answer=m.Failed,
    errors={
        404: "job_not_found: no such job",
        409: "lease_stale, job_canceled: another attempt owns the job now, or it was canceled",
    },
)
async def fail(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue = queue_of(request)
    body = parse_model(FailBody, await read_body(request))
    outcome = await engine_call(
        gate.engine.jobs.fail(
            queue,
            _owner(request, body),
            body.error,
            retry_delay_ms=body.retry_in_ms,
            permanent=body.permanent,
        )
    )
    if outcome != "retry":
        await gate.report_node(queue, request.match_info["id"])
    return json_response({"id": request.match_info["id"], "outcome": outcome})
