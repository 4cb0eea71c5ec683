"""The gateway's admin calls on the audit trail (:mod:`jqruntime.stores.audit`).

Every request that needs the ``admin`` scope and is not a ``GET`` (cancel, replay, queue and job-type
configuration, dead letters, cron, graph cancel/retry) is recorded after it ran: who = the token's name
(``request[TOKEN_NAME]``, set by the authentication), the action = ``gate.<METHOD> <route template>``, the
target = the route's parameters (queue, job, kind, schedule, graph), the count from the answer where it
says one (``retried``, ``deleted``, ``canceled``, ``released``, ``changed``; else 1 when it succeeded) and
the outcome: ``ok``, or the error's code and message (also for an unexpected exception); ``queues``: the
queues the authorization door checked (``*``: every queue), which the dashboard narrows the trail by;
``details``: the kinds it named, the fields a JSON body set and what a handler adds (:data:`DETAILS`).
A request the door refused (403) is recorded with its refusal as the outcome — an authenticated attempt on
another tenant's objects is worth knowing; an unauthenticated one never gets here. Only routes whose
policy is ``admin`` are recorded: the signed dispatch callbacks are no admin calls (anyone may send one),
and one that changed a job is recorded by its handler as an action of its own (:func:`record_callback`:
``callback.complete`` or ``callback.fail``, who = ``dispatch:<kind>``). A failed write to Redis fails
the call, as on the dashboard: no admin action goes unrecorded without its caller seeing an error.
"""

from __future__ import annotations

from collections.abc import Awaitable

import orjson
from aiohttp import web

from jqcore.clock import now_ms
from jqcore.errors import JobqError
from jqruntime.authz import TOUCHED, Policy, Touch, queues_of
from jqruntime.http import TOKEN_NAME
from jqruntime.stores.audit import AuditEntry, AuditTrail
from kafkagate.body import BODY

__all__ = ["AUDIT", "DETAILS", "audited", "count_of", "described", "record_callback", "recorded"]

AUDIT = web.AppKey("jobq.audit", AuditTrail)
"""Where the gateway records its actions (set when it has a trail: ``kafkagate.app.make_app``)."""
DETAILS = web.RequestKey("jobq.audit_details", str)
"""What a handler adds to its audit entry (secret-free: e.g. a dispatch URL's host, never its auth)."""
DETAILS_MAX = 500

COUNT_KEYS = ("count", "retried", "deleted", "purged", "canceled", "released", "changed")
"""The fields of an answer that say how many jobs (or records) a call changed, in order of preference."""


def count_of(response: web.StreamResponse) -> int:
    """How many things an answer says the call changed: the first of :data:`COUNT_KEYS` in its JSON body
    (``true``: 1), else 1 for a success and 0 for anything else."""
    ok = 200 <= response.status < 300
    body = response.body if isinstance(response, web.Response) else None
    if isinstance(body, bytes) and body[:1] == b"{":
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = {}
        for key in COUNT_KEYS:
            value = doc.get(key)
            if isinstance(value, bool | int):
                return int(value)
    return 1 if ok else 0


def recorded(request: web.Request, policy: Policy | None) -> bool:
    """Whether the gateway's door records the request: a matched route whose policy is ``admin``, called
    with another method than ``GET``, ``HEAD``, ``OPTIONS`` (a mounted application records its own)."""
    return (
        policy is not None
        and policy.scope == "admin"
        and request.method not in ("GET", "HEAD", "OPTIONS")
        and request.match_info.route.resource is not None
    )


async def audited(
    trail: AuditTrail, request: web.Request, answer: Awaitable[web.StreamResponse]
) -> web.StreamResponse:
    """``answer`` (the rest of the request: its body, its authorization, its handler), recorded on
    ``trail`` once it ran — its answer's count and status, or the error it raised."""
    resource = request.match_info.route.resource
    template = resource.canonical if resource is not None else request.path
    target = "/".join(request.match_info.values())
    count, outcome = 0, "ok"
    try:
        response = await answer
        count = count_of(response)
        if response.status >= 400:
            outcome = f"http {response.status}"
        return response
    except JobqError as exc:
        outcome = f"{exc.code}: {exc.message}"
        raise
    except web.HTTPException as exc:
        outcome = f"http {exc.status}: {exc.reason}"
        raise
    except Exception as exc:
        outcome = f"error: {type(exc).__name__}: {exc}"
        raise
    finally:
        who = request.get(TOKEN_NAME, "anonymous")
        action = f"gate.{request.method} {template}"
        queues, details = described(request)
        entry = AuditEntry(
            now_ms(), who, action, target, count, outcome, token=who, queues=queues, details=details
        )
        await trail.record(entry)


def described(request: web.Request) -> tuple[str, str]:
    """``(queues, details)`` of a request's audit entry: the queues (and globs) its touches named (``*``
    for every queue), and its kinds, its JSON body's top-level fields and the handler's :data:`DETAILS`."""
    touches: list[Touch] = request.get(TOUCHED, [])
    parts = []
    kinds = sorted({t.name for t in touches if t.what == "kind"})
    if kinds:
        parts.append("kinds=" + ",".join(kinds))
    fields = _body_fields(request)
    if fields:
        parts.append("fields=" + ",".join(fields))
    if request.get(DETAILS):
        parts.append(request[DETAILS])
    return queues_of(touches), " ".join(parts)[:DETAILS_MAX]


def _body_fields(request: web.Request) -> list[str]:
    raw = request.get(BODY) or b""
    if raw[:1] != b"{":
        return []
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    return sorted(str(k) for k in doc)[:30] if isinstance(doc, dict) else []


async def record_callback(request: web.Request, action: str, kind: str, target: str, outcome: str) -> None:
    """Record a dispatch callback that changed a job (``action``: ``callback.complete`` /
    ``callback.fail``; who = ``dispatch:<kind>``: the downstream of that kind; no token). Only the request
    that changed the job is recorded, not the same callback sent again (a token holder cannot flood the
    trail). Awaited, like every record: a failure is an error answer."""
    trail = request.config_dict.get(AUDIT)
    if trail is not None:
        await trail.record(AuditEntry(now_ms(), f"dispatch:{kind}", action, target, 1, outcome))
