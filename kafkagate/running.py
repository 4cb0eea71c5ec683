"""An HTTP worker's other writes to the jobs it holds, the ones a Python pool makes: release (pending again,
attempt refunded: ``release.lua``), snooze (back after a delay, no attempt spent: ``snooze.lua``), cancel
(the job ends canceled, never retried: ``cancel_running.lua``) and a heartbeat extending many leases in one
call (``extend.lua``). Each is fenced by the claim's attempt and lease token like extend, complete and fail:
a stale pair is a 409 ``lease_stale``, an unknown job a 404 ``job_not_found``. A graph node's job that ends
here is reported to its graph before the answer (:meth:`kafkagate.state.Gate.report_node`)."""

from __future__ import annotations

from aiohttp import web

from jqengine import NotExtended, Released, StaleLease
from jqruntime.authz import Policy, path_queue
from jqruntime.http import HttpError, json_response
from kafkagate.api import Api
from kafkagate.body import read_body
from kafkagate.requests import engine_call, parse_model, queue_of
from kafkagate.state import GATE
from kafkagate.workmodels import (
    NOT_HELD_CODES,
    CancelBody,
    CancelReply,
    HeartbeatBody,
    HeartbeatItem,
    HeartbeatReply,
    ReleaseBody,
    ReleaseReply,
    SnoozeBody,
    SnoozeReply,
)

__all__ = ["routes"]

routes = Api("claims")


@routes.post(
    "/v1/queues/{queue}/jobs/{id}/release",
    policy=Policy("work", (path_queue,)),
    summary="give a held job back: pending again, its attempt refunded (an at_most_once job that started:"
    " errored)",
    body=ReleaseBody,
    body_example={"attempt": 1, "token": "9f1c", "started": False},
    answer=ReleaseReply,
    errors={
        404: "job_not_found: no such job",
        409: "lease_stale: another attempt owns the job now (a stale attempt or lease token)",
    },
)
async def release(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    body = parse_model(ReleaseBody, await read_body(request))
    held = (job_id, body.attempt, body.token, body.started)
    outcome = (await engine_call(gate.engine.jobs.release(queue, [held])))[job_id]
    if outcome == Released.MISSING:
        raise HttpError(404, "job_not_found", f"release {job_id}: no such job")
    if outcome == Released.STALE:
        raise StaleLease(f"release {job_id}: stale attempt or lease token")
    if outcome == Released.ERRORED:  # an at_most_once job that had started ended: reported to its graph
        await gate.report_node(queue, job_id)
        return json_response(ReleaseReply(id=job_id, outcome="errored").model_dump())
    return json_response(ReleaseReply(id=job_id, outcome="released").model_dump())


@routes.post(
    "/v1/queues/{queue}/jobs/{id}/snooze",
    policy=Policy("work", (path_queue,)),
    summary="put a held job back for delay_ms, no attempt spent",
    body=SnoozeBody,
    body_example={"attempt": 1, "token": "9f1c", "delay_ms": 30000},
    answer=SnoozeReply,
    errors={
        404: "job_not_found: no such job",
        409: "lease_stale: another attempt owns the job now (a stale attempt or lease token)",
    },
)
async def snooze(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    body = parse_model(SnoozeBody, await read_body(request))
    run_at = await engine_call(
        gate.engine.jobs.snooze(queue, (job_id, body.attempt, body.token), body.delay_ms)
    )
    reply = SnoozeReply(id=job_id, state="delayed" if body.delay_ms else "pending", run_at_ms=run_at)
    return json_response(reply.model_dump())


@routes.post(
    "/v1/queues/{queue}/jobs/{id}/cancel",
    policy=Policy("work", (path_queue,)),
    operation_id="cancel_held",
    summary="the worker cancels a job it holds: canceled, never retried",
    body=CancelBody,
    body_example={"attempt": 1, "token": "9f1c", "reason": "the order was withdrawn"},
    answer=CancelReply,
    errors={
        404: "job_not_found: no such job",
        409: "lease_stale: another attempt owns the job now (a stale attempt or lease token)",
    },
)
async def cancel(request: web.Request) -> web.Response:
    """The worker cancels a job it holds (a Python handler's ``Cancel``); the same pair sent again after a
    lost answer is answered the same."""
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    body = parse_model(CancelBody, await read_body(request))
    await engine_call(gate.engine.jobs.cancel_running(queue, (job_id, body.attempt, body.token), body.reason))
    await gate.report_node(queue, job_id)
    return json_response(CancelReply(id=job_id, state="canceled").model_dump())


@routes.post(
    "/v1/queues/{queue}/heartbeat",
    policy=Policy("work", (path_queue,)),
    summary="extend the leases of many held jobs in one call; per job whether it is still held",
    body=HeartbeatBody,
    body_example={"jobs": [{"id": "01J0", "attempt": 1, "token": "9f1c"}], "lease_ms": 60000},
    answer=HeartbeatReply,
    errors={400: "body_invalid: a job listed twice, or more than 1000"},
)
async def heartbeat(request: web.Request) -> web.Response:
    """Extend the leases of many held jobs in one call; per job whether the worker still holds it."""
    gate = request.app[GATE]
    queue = queue_of(request)
    body = parse_model(HeartbeatBody, await read_body(request))
    owned = [(j.id, j.attempt, j.token) for j in body.jobs]
    outcomes = await engine_call(gate.engine.jobs.extend(queue, owned, body.lease_ms or 0))
    items: list[HeartbeatItem] = []
    for job in body.jobs:
        outcome = outcomes[job.id]
        if isinstance(outcome, int):
            items.append(HeartbeatItem(id=job.id, held=True, lease_deadline_ms=outcome))
            continue
        items.append(HeartbeatItem(id=job.id, held=False, code=NOT_HELD_CODES[outcome]))
        if outcome == NotExtended.CANCELED:  # canceled at this extend: a graph node's end goes to its graph
            await gate.report_node(queue, job.id)
    reply = HeartbeatReply(jobs=items, held=sum(i.held for i in items))
    return json_response(reply.model_dump(exclude_none=True))
