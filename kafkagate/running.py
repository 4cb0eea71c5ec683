"""An HTTP worker's other writes to the jobs it holds, the ones a Python pool makes: release (pending again,
attempt refunded: ``release.lua``), snooze (back after a delay, no attempt spent: ``snooze.lua``), cancel
(the job ends canceled, never retried: ``cancel_running.lua``) and a heartbeat extending many leases in one
call (``extend.lua``). Each is fenced by the claim's attempt and lease token like extend, complete and fail:
a stale pair is a 409 ``lease_stale``, an unknown job a 404 ``job_not_found``. A graph node's job that ends
here is reported to its graph before the answer (:func:`kafkagate.claims.report_node`)."""

from __future__ import annotations

from aiohttp import web

from jqcore.http import HttpError, json_response
from jqcore.state import NotExtended, Released, StaleLease
from kafkagate.body import read_body
from kafkagate.claims import report_node
from kafkagate.jobs import engine_call, queue_of
from kafkagate.queues import parse_model
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

routes = web.RouteTableDef()


@routes.post("/v1/queues/{queue}/jobs/{id}/release")
async def release(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    body = parse_model(ReleaseBody, await read_body(request))
    held = (job_id, body.attempt, body.token, body.started)
    outcome = (await engine_call(gate.engine.release(queue, [held])))[job_id]
    if outcome == Released.MISSING:
        raise HttpError(404, "job_not_found", f"release {job_id}: no such job")
    if outcome == Released.STALE:
        raise StaleLease(f"release {job_id}: stale attempt or lease token")
    if outcome == Released.ERRORED:  # an at_most_once job that had started ended: reported to its graph
        await report_node(gate, queue, job_id)
        return json_response(ReleaseReply(id=job_id, outcome="errored").model_dump())
    return json_response(ReleaseReply(id=job_id, outcome="released").model_dump())


@routes.post("/v1/queues/{queue}/jobs/{id}/snooze")
async def snooze(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    body = parse_model(SnoozeBody, await read_body(request))
    run_at = await engine_call(gate.engine.snooze(queue, (job_id, body.attempt, body.token), body.delay_ms))
    reply = SnoozeReply(id=job_id, state="delayed" if body.delay_ms else "pending", run_at_ms=run_at)
    return json_response(reply.model_dump())


@routes.post("/v1/queues/{queue}/jobs/{id}/cancel")
async def cancel(request: web.Request) -> web.Response:
    """The worker cancels a job it holds (a Python handler's ``Cancel``); the same pair sent again after a
    lost answer is answered the same."""
    gate = request.app[GATE]
    queue, job_id = queue_of(request), request.match_info["id"]
    body = parse_model(CancelBody, await read_body(request))
    await engine_call(gate.engine.cancel_running(queue, (job_id, body.attempt, body.token), body.reason))
    await report_node(gate, queue, job_id)
    return json_response(CancelReply(id=job_id, state="canceled").model_dump())


@routes.post("/v1/queues/{queue}/heartbeat")
async def heartbeat(request: web.Request) -> web.Response:
    """Extend the leases of many held jobs in one call; per job whether the worker still holds it."""
    gate = request.app[GATE]
    queue = queue_of(request)
    body = parse_model(HeartbeatBody, await read_body(request))
    owned = [(j.id, j.attempt, j.token) for j in body.jobs]
    outcomes = await engine_call(gate.engine.extend(queue, owned, body.lease_ms or 0))
    items: list[HeartbeatItem] = []
    for job in body.jobs:
        outcome = outcomes[job.id]
        if isinstance(outcome, int):
            items.append(HeartbeatItem(id=job.id, held=True, lease_deadline_ms=outcome))
            continue
        items.append(HeartbeatItem(id=job.id, held=False, code=NOT_HELD_CODES[outcome]))
        if outcome == NotExtended.CANCELED:  # canceled at this extend: a graph node's end goes to its graph
            await report_node(gate, queue, job.id)
    reply = HeartbeatReply(jobs=items, held=sum(i.held for i in items))
    return json_response(reply.model_dump(exclude_none=True))
