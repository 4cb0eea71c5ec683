"""Dispatch callbacks: a downstream that answered 202 to a pushed job reports its outcome later with the
signed callback token it was sent (``jqruntime.dispatch``; ``docs/dispatcher.md``). No bearer token: the
callback token is the proof (``/v1/callbacks/`` is open in :mod:`kafkagate.auth`).

Checked in order: the token's signature and expiry (401 ``callback_token_invalid``, 403
``callback_signature_invalid`` / ``callback_expired`` / ``callbacks_off``), then the attempt it names
against the job's current one — an older attempt (failed by the dispatcher meanwhile, and retried) is a
409 ``callback_stale``; then the write is fenced by that attempt's lease token like any worker's. The same
callback sent twice is answered as the first time.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from jqcore.log import get_logger
from jqengine import Engine, JobLease, StaleLease
from jqruntime.dispatch import load_config, verify_callback
from jqruntime.http import HttpError, json_response
from jqruntime.stores import dispatch as dispatch_store
from kafkagate.api import Api
from kafkagate.body import read_body
from kafkagate.claims import report_node
from kafkagate.jobs import engine_call, queue_of
from kafkagate.queues import parse_model
from kafkagate.state import GATE

__all__ = [
    "CALLBACK_PREFIX",
    "CallbackCompleteBody",
    "CallbackCompleted",
    "CallbackFailBody",
    "CallbackFailed",
    "routes",
]

routes = Api("callbacks")
log = get_logger("kafkagate.callbacks")

CALLBACK_PREFIX = "/v1/callbacks/"


class CallbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    callback_token: str = Field(min_length=1, max_length=512)
    """The token the dispatcher sent with this attempt (``callback.token`` of the POSTed job)."""


class CallbackCompleteBody(CallbackBody):
    result: Any = None
    """The job's result (any JSON, at most 64 KiB encoded)."""


class CallbackFailBody(CallbackBody):
    error: str = Field(max_length=65_536)
    permanent: bool = False
    """True: never retried (dead-lettered now)."""
    retry_in_ms: int | None = Field(None, ge=0, le=7 * 86_400_000)
    """Omitted: the kind's backoff."""


class CallbackCompleted(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "01J0", "attempt": 1, "state": "completed"}]}
    )

    id: str
    attempt: int
    state: Literal["completed"]


class CallbackFailed(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "01J0", "attempt": 1, "outcome": "retry"}]}
    )

    id: str
    attempt: int
    outcome: Literal["retry", "errored", "canceled"]
    """``retry``: back after the kind's backoff (or ``retry_in_ms``); ``errored``: dead letters (attempts
    used up, or ``permanent``); ``canceled``: a cancel was asked meanwhile."""


ERRORS = {
    401: "callback_token_invalid: not a callback token",
    403: "callback_signature_invalid, callback_expired, callbacks_off: not signed for this job with the"
    " gateway's JOBQ_CALLBACK_SECRET, expired, or no secret here",
    404: "job_not_found: no such job",
    409: "callback_stale: the token's attempt is no longer the job's live one (failed meanwhile)",
}
EXAMPLE = {"callback_token": "v1.1.1767225630000.3ZrQ", "result": {"sent": True}}


async def _owner(request: web.Request, token: str) -> tuple[str, str, JobLease]:
    """(queue, job id, the job's lease) when a valid callback token names its current attempt."""
    gate = request.app[GATE]
    engine: Engine = gate.engine
    queue, job_id = queue_of(request), request.match_info["id"]
    now = await engine_call(engine.now())
    attempt = verify_callback(gate.settings.callback_secret.get_secret_value(), token, queue, job_id, now)
    (lease,) = await engine_call(engine.leases(queue, [job_id]))
    if lease is None:
        raise HttpError(404, "job_not_found", f"no job {job_id!r} in queue {queue!r}")
    if lease.attempt != attempt:
        raise _stale(job_id, attempt, lease.attempt, lease.state)
    if not lease.token:  # the attempt ended without a write of its own (released, reaped)
        raise _stale(job_id, attempt, lease.attempt, lease.state)
    return queue, job_id, lease


def _stale(job_id: str, attempt: int, current: int, state: str) -> HttpError:
    return HttpError(
        409,
        "callback_stale",
        f"job {job_id!r}: the callback is for attempt {attempt}, the job is at attempt {current} ({state})",
        details={"attempt": attempt, "current_attempt": current, "state": state},
    )


@routes.post(
    "/v1/callbacks/{queue}/jobs/{id}/complete",
    summary="a dispatch downstream completes the attempt it answered 202 (no bearer token: the"
    " callback_token it was sent authenticates it); sent again, answered the same",
    body=CallbackCompleteBody,
    body_example=EXAMPLE,
    answer=CallbackCompleted,
    errors=ERRORS,
    open=True,
)
async def callback_complete(request: web.Request) -> web.Response:
    body = parse_model(CallbackCompleteBody, await read_body(request))
    queue, job_id, lease = await _owner(request, body.callback_token)
    attempt, kind = lease.attempt, lease.kind
    data = None if body.result is None else orjson.dumps(body.result)
    try:
        await engine_call(request.app[GATE].engine.complete(queue, (job_id, attempt, lease.token), data))
    except StaleLease:  # that attempt was failed (callback overdue) or released meanwhile
        raise _stale(job_id, attempt, attempt, lease.state) from None
    await report_node(request.app[GATE], queue, job_id)
    log.info("dispatch callback", job_id=job_id, queue=queue, kind=kind, attempt=attempt, outcome="completed")
    return json_response({"id": job_id, "attempt": attempt, "state": "completed"})


@routes.post(
    "/v1/callbacks/{queue}/jobs/{id}/fail",
    summary="a dispatch downstream fails the attempt it answered 202 (retried with the kind's backoff"
    " unless permanent)",
    body=CallbackFailBody,
    body_example={"callback_token": "v1.1.1767225630000.3ZrQ", "error": "no such customer"},
    answer=CallbackFailed,
    errors=ERRORS,
    open=True,
)
async def callback_fail(request: web.Request) -> web.Response:
    engine: Engine = request.app[GATE].engine
    body = parse_model(CallbackFailBody, await read_body(request))
    queue, job_id, lease = await _owner(request, body.callback_token)
    attempt, kind = lease.attempt, lease.kind
    delay = body.retry_in_ms
    if delay is None:
        stored = await engine_call(dispatch_store.config_for(request.app[GATE].redis_client, queue, kind))
        config = load_config(stored) if stored is not None else None
        delay = config.backoff.policy().delay_ms(attempt) if config is not None else None
    try:
        outcome = await engine_call(
            engine.fail(
                queue,
                (job_id, attempt, lease.token),
                body.error,
                retry_delay_ms=delay,
                permanent=body.permanent,
            )
        )
    except StaleLease:
        raise _stale(job_id, attempt, attempt, lease.state) from None
    await report_node(request.app[GATE], queue, job_id)
    log.info("dispatch callback", job_id=job_id, queue=queue, kind=kind, attempt=attempt, outcome=outcome)
    return json_response({"id": job_id, "attempt": attempt, "outcome": outcome})
