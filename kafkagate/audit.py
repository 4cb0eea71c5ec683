"""The gateway's admin calls on the audit trail (:mod:`jqruntime.stores.audit`).

Every request that needs the ``admin`` scope and is not a ``GET`` (cancel, replay, queue and job-type
configuration, dead letters, cron, graph cancel/retry) is recorded after it ran: who = the token's name
(``request[TOKEN_NAME]``, set by the authentication), the action = ``gate.<METHOD> <route template>``, the
target = the route's parameters (queue, job, kind, schedule, graph), the count from the answer where it
says one (``retried``, ``deleted``, ``canceled``, ``released``, ``changed``; else 1 when it succeeded) and
the outcome: ``ok``, or the error's code and message (also for an unexpected exception). A refused request
(401/403) never reached the handler and is not an action. A failed write to Redis fails the call, as on
the dashboard: no admin action goes unrecorded without its caller seeing an error.

The open dispatch callback routes (``/v1/callbacks/``, :data:`kafkagate.limits.CALLBACK_PREFIX`) are no
admin calls: anyone may send them, and a refused one is no action. A callback that changed a job is
recorded by its handler as an action of its own (:func:`record_callback`: ``callback.complete`` or
``callback.fail``, who = ``dispatch:<kind>``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware

from jqcore.clock import now_ms
from jqcore.errors import JobqError
from jqruntime.http import TOKEN_NAME
from jqruntime.stores.audit import AuditEntry, AuditTrail
from kafkagate.auth import required_scope
from kafkagate.limits import CALLBACK_PREFIX

__all__ = ["AUDIT", "audit_middleware", "count_of", "record_callback"]

AUDIT = web.AppKey("jobq.audit", AuditTrail)
"""Where the gateway records its actions (set when it has a trail: ``kafkagate.app.make_app``)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

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


def audit_middleware(trail: AuditTrail, mounted: Sequence[str] = ()) -> Middleware:
    """``mounted``: the prefixes of sub-applications (the dashboard at ``/ui``), which record their own
    actions (and whose sign-in is no admin call)."""
    prefixes = tuple(f"{m.rstrip('/')}/" for m in mounted)

    @web.middleware
    async def audit(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if request.method in ("GET", "HEAD", "OPTIONS") or resource is None:
            return await handler(request)
        if prefixes and request.path.startswith(prefixes):
            return await handler(request)
        if request.path.startswith(CALLBACK_PREFIX):  # open and signed: no admin call (record_callback)
            return await handler(request)
        template = resource.canonical
        if required_scope(request.method, template) != "admin":
            return await handler(request)
        target = "/".join(request.match_info.values())
        count, outcome = 0, "ok"
        try:
            response = await handler(request)
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
            await trail.record(AuditEntry(now_ms(), who, action, target, count, outcome, token=who))

    return audit


async def record_callback(request: web.Request, action: str, kind: str, target: str, outcome: str) -> None:
    """Record a dispatch callback that changed a job (``action``: ``callback.complete`` /
    ``callback.fail``; who = ``dispatch:<kind>``: the downstream of that kind; no token). Only the request
    that changed the job is recorded, not the same callback sent again (a token holder cannot flood the
    trail). Awaited, like every record: a failure is an error answer."""
    trail = request.config_dict.get(AUDIT)
    if trail is not None:
        await trail.record(AuditEntry(now_ms(), f"dispatch:{kind}", action, target, 1, outcome))
