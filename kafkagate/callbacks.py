"""Dispatch callbacks: a downstream that answered 202 to a pushed job reports its outcome later with the
signed callback token it was sent (``jqruntime.dispatch``; ``docs/dispatcher.md``). No bearer token: the
callback token is the proof (``/v1/callbacks/`` is open in :mod:`kafkagate.auth`).

Before the handler, the body middleware holds the request to the callbacks' own limits (a rate per source
address, a 128 KiB body, a budget apart from the shared one, a read timeout: :mod:`kafkagate.body`). Then,
in order:

1. the token's signature and expiry, by this host's clock and without any Redis call (401
   ``callback_token_invalid``, 403 ``callback_signature_invalid`` / ``callback_expired`` /
   ``callbacks_off``);
2. the job's lease: the token's attempt and claim (the nonce of the lease token it was signed for) must be
   the job's live ones — an older attempt (failed by the dispatcher meanwhile, and retried), or the same
   attempt released and claimed again, is a 409 ``callback_stale``;
3. the job's kind must be pushed from its queue (a dispatch configuration for (queue, kind) or (``*``,
   kind)): 403 ``callback_not_dispatched`` otherwise;
4. the write, fenced by that attempt's lease token like any worker's. The same callback sent twice is
   answered as the first time; the one that changed the job is recorded in the audit trail
   (``callback.complete`` / ``callback.fail``, who = ``dispatch:<kind>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jqcore.clock import now_ms
from jqcore.log import get_logger
from jqengine import Engine, JobLease, StaleLease
from jqruntime.authz import SIGNED
from jqruntime.dispatch import DispatchConfig, load_config, verify_callback
from jqruntime.http import HttpError, json_response
from jqruntime.stores import dispatch as dispatch_store
from kafkagate.api import Api
from kafkagate.audit import record_callback
from kafkagate.body import read_body
from kafkagate.limits import CALLBACK_PREFIX
from kafkagate.requests import engine_call, parse_model, queue_of
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
    403: "callback_signature_invalid, callback_expired, callbacks_off, callback_not_dispatched: not signed"
    " for this job with the gateway's JOBQ_CALLBACK_SECRET, expired, no secret here, or the job's kind is"
    " not pushed from its queue",
    404: "job_not_found: no such job",
    408: "body_timeout: the body did not arrive within JOBQ_GATE_CALLBACK_READ_TIMEOUT_S",
    409: "callback_stale: the token's attempt is no longer the job's live one (failed meanwhile, or released"
    " and claimed again)",
    413: "body_too_large: here the limit is 128 KiB (64 KiB and a result), not JOBQ_GATE_MAX_BODY_BYTES",
    429: "rate_limited: too many callbacks from this address (JOBQ_GATE_CALLBACK_RATE); gateway_busy: the"
    " callbacks' body budget is taken (Retry-After)",
    503: "backend_unavailable: Redis did not answer; retrying may succeed (Retry-After)",
}
EXAMPLE_TOKEN = "v2.1.1767225630000.3f9a0c2b7d1e4a55.3ZrQ"
EXAMPLE = {"callback_token": EXAMPLE_TOKEN, "result": {"sent": True}}


@dataclass(frozen=True, slots=True)
class Owner:
    """The attempt a valid callback token names, as the job holds it now."""

    queue: str
    job_id: str
    lease: JobLease
    config: DispatchConfig | None
    """The dispatch configuration the job's kind is pushed with from its queue (None: unreadable)."""

    @property
    def first(self) -> bool:
        """Whether this callback ends the attempt (not the same callback sent again)."""
        return self.lease.state == "running"


async def _owner(request: web.Request, token: str) -> Owner:
    """The job's live attempt when a valid callback token names it (see the module's docstring)."""
    gate = request.app[GATE]
    engine: Engine = gate.engine
    queue, job_id = queue_of(request), request.match_info["id"]
    claim = verify_callback(gate.settings.callback_secret.get_secret_value(), token, queue, job_id, now_ms())
    (lease,) = await engine_call(engine.reads.leases(queue, [job_id]))
    if lease is None:
        raise HttpError(404, "job_not_found", f"no job {job_id!r} in queue {queue!r}")
    if lease.attempt != claim.attempt or not claim.holds(lease.token):
        raise _stale(job_id, claim.attempt, lease)
    stored = await engine_call(dispatch_store.config_for(gate.redis_client, queue, lease.kind))
    if stored is None:
        raise HttpError(
            403,
            "callback_not_dispatched",
            f"job {job_id!r}: kind {lease.kind!r} is not pushed from queue {queue!r} (no dispatch"
            " configuration): it takes no callbacks",
        )
    return Owner(queue, job_id, lease, _readable(stored, queue, lease.kind))


def _readable(stored: str, queue: str, kind: str) -> DispatchConfig | None:
    try:
        return load_config(stored)
    except ValidationError as exc:
        log.warning("dispatch configuration unreadable", queue=queue, kind=kind, errors=exc.error_count())
        return None


def _stale(job_id: str, attempt: int, lease: JobLease, why: str | None = None) -> HttpError:
    current, state = lease.attempt, lease.state
    if why is None and attempt == current:
        why = f"that attempt was released and claimed again since, or ended unreported ({state})"
    elif why is None:
        why = f"the job is at attempt {current} ({state})"
    return HttpError(
        409,
        "callback_stale",
        f"job {job_id!r}: the callback is for attempt {attempt}; {why}",
        details={"attempt": attempt, "current_attempt": current, "state": state},
    )


ENDED = "that attempt ended meanwhile (failed for its overdue callback, released or canceled)"


@routes.post(
    "/v1/callbacks/{queue}/jobs/{id}/complete",
    summary="a dispatch downstream completes the attempt it answered 202 (no bearer token: the"
    " callback_token it was sent authenticates it); sent again, answered the same",
    body=CallbackCompleteBody,
    body_example=EXAMPLE,
    answer=CallbackCompleted,
    errors=ERRORS,
    policy=SIGNED,
)
async def callback_complete(request: web.Request) -> web.Response:
    body = parse_model(CallbackCompleteBody, await read_body(request))
    owner = await _owner(request, body.callback_token)
    queue, job_id, lease = owner.queue, owner.job_id, owner.lease
    data = None if body.result is None else orjson.dumps(body.result)
    try:
        await engine_call(
            request.app[GATE].engine.jobs.complete(queue, (job_id, lease.attempt, lease.token), data)
        )
    except StaleLease:  # that attempt was failed (callback overdue) or released meanwhile
        raise _stale(job_id, lease.attempt, lease, ENDED) from None
    await request.app[GATE].report_node(queue, job_id)
    await _done(request, owner, "complete", "completed")
    return json_response({"id": job_id, "attempt": lease.attempt, "state": "completed"})


async def _done(request: web.Request, owner: Owner, action: str, outcome: str) -> None:
    lease = owner.lease
    log.info(
        "dispatch callback",
        job_id=owner.job_id,
        queue=owner.queue,
        kind=lease.kind,
        attempt=lease.attempt,
        outcome=outcome,
    )
    if owner.first:
        await record_callback(
            request, f"callback.{action}", lease.kind, f"{owner.queue}/{owner.job_id}", "ok"
        )


@routes.post(
    "/v1/callbacks/{queue}/jobs/{id}/fail",
    summary="a dispatch downstream fails the attempt it answered 202 (retried with the kind's backoff"
    " unless permanent)",
    body=CallbackFailBody,
    body_example={"callback_token": EXAMPLE_TOKEN, "error": "no such customer"},
    answer=CallbackFailed,
    errors=ERRORS,
    policy=SIGNED,
)
async def callback_fail(request: web.Request) -> web.Response:
    engine: Engine = request.app[GATE].engine
    body = parse_model(CallbackFailBody, await read_body(request))
    owner = await _owner(request, body.callback_token)
    queue, job_id, lease = owner.queue, owner.job_id, owner.lease
    delay = body.retry_in_ms
    if delay is None and owner.config is not None:
        delay = owner.config.backoff.policy().delay_ms(lease.attempt)
    try:
        outcome = await engine_call(
            engine.jobs.fail(
                queue,
                (job_id, lease.attempt, lease.token),
                body.error,
                retry_delay_ms=delay,
                permanent=body.permanent,
            )
        )
    except StaleLease:
        raise _stale(job_id, lease.attempt, lease, ENDED) from None
    await request.app[GATE].report_node(queue, job_id)
    await _done(request, owner, "fail", str(outcome))
    return json_response({"id": job_id, "attempt": lease.attempt, "outcome": outcome})
