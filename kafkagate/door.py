"""The gateway's door: the one middleware every request passes, doing in order what each concern asks.

1. **metrics** — ``jobq_gate_requests_total{route,method,status,token}`` and ``jobq_gate_request_seconds``
   of every request (the mounted dashboard's too), whatever its answer; its log lines say ``token=``
   (``anonymous`` until the token is known);
2. **errors** — anything raised below is answered as JSON with a machine-readable code
   (:func:`jqruntime.http.error_response`);
3. **authentication** (:func:`kafkagate.auth.bearer`, :func:`~kafkagate.auth.entitle`) — the bearer token, its
   rate and the route's scope, before a byte of the body is read; routes whose policy is ``open`` or
   ``signed`` pass without one, and so do the mounted applications' prefixes (the dashboard has its own
   door); the Redis connections the request takes count in its token's share of the pool (``POOL_HOLDER``);
4. **audit** (:mod:`kafkagate.audit`, with a trail) — an admin call is recorded once it ran, with its outcome;
5. **body** (:func:`kafkagate.body.take_body`) — headers checked, the body read and decoded within the
   request's limits and the process's budget of bodies in flight (held until answered);
6. **authorization** (:func:`jqruntime.authz.authorize`) — every touch of the route's policy is the token's;
7. the handler.

One middleware, not one per concern: the door's steps are plain calls in one coroutine, where six aiohttp
middlewares cost a frame, a coroutine and a ``partial`` each on every request; a route's policy is looked
up in the door's own table (by handler, as :func:`jqruntime.authz.policy_of` finds it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import structlog
from aiohttp import web

from jqcore import metrics
from jqcore.buckets import Buckets
from jqengine import POOL_HOLDER
from jqruntime.authz import TOUCHED, Policy, authorize
from jqruntime.clientaddr import Networks
from jqruntime.http import TOKEN_NAME, error_response
from jqruntime.stores.audit import AuditTrail
from jqruntime.tokens import Token, TokenSource
from kafkagate.audit import audited, recorded
from kafkagate.auth import bearer, entitle
from kafkagate.body import ANONYMOUS, take_body

__all__ = ["Door"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SERVER = "the gateway"
"""How a 500's message names the service."""


class Door:
    """The gateway's door (:meth:`middleware`, ``make_app``'s only middleware). ``tokens``: the accepted
    tokens; ``policies``: each route handler's policy (a handler not in it: no route matched, a token is
    needed, then 404); ``mounted``: the prefixes of sub-applications, which check their own tokens, read
    their own bodies and record their own actions; ``failures``/``proxies``: see
    :func:`kafkagate.auth.bearer`; ``trail``: where admin calls are recorded (None: nowhere)."""

    def __init__(
        self,
        tokens: TokenSource,
        policies: Mapping[Handler, Policy],
        mounted: Sequence[str] = (),
        *,
        failures: Buckets | None = None,
        proxies: Networks = (),
        trail: AuditTrail | None = None,
    ) -> None:
        self.tokens = tokens
        self.policies = policies
        self.prefixes = tuple(f"{m.rstrip('/')}/" for m in mounted)
        self.failures = failures
        self.proxies = proxies
        self.trail = trail

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The door (``make_app`` gives aiohttp this bound method): metrics and errors around
        authentication, then (audited when it is an admin call) the body, authorization, the handler."""
        match = request.match_info
        resource = match.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        started = time.perf_counter()
        status = 500
        bound = structlog.contextvars.bind_contextvars(token=ANONYMOUS)  # bearer() names the token
        holding = None
        try:
            try:
                if self.prefixes and request.path.startswith(self.prefixes):
                    response = await handler(request)  # a mounted application's door
                else:
                    policy = self.policies.get(match.handler)
                    token = None  # (signed callbacks: none; together, one token's share of the pool)
                    if policy is None or policy.checked:  # a path no route matches needs a token too (404)
                        token = bearer(request, self.tokens, self.failures, self.proxies)
                        holding = POOL_HOLDER.set(token.name)
                        entitle(request, self.tokens, token, policy)
                    else:
                        holding = POOL_HOLDER.set(ANONYMOUS)
                    if self.trail is not None and recorded(request, policy):
                        response = await audited(self.trail, request, _pass(request, handler, token, policy))
                    else:
                        response = await _pass(request, handler, token, policy)
            except web.HTTPException as exc:
                if exc.status < 400:  # a redirect, raised by design
                    raise
                response = error_response(request, exc, SERVER)
            except Exception as exc:
                response = error_response(request, exc, SERVER)
            status = response.status
            return response
        finally:
            if holding is not None:
                POOL_HOLDER.reset(holding)  # (a keep-alive connection's next request may run in this task)
            structlog.contextvars.reset_contextvars(**bound)
            token_name = request.get(TOKEN_NAME, ANONYMOUS)  # only configured names: a bounded label
            metrics.child(metrics.GATE_REQUESTS, route, request.method, str(status), token_name).inc()
            metrics.child(metrics.GATE_REQUEST_TIME, route).observe(time.perf_counter() - started)


async def _pass(
    request: web.Request, handler: Handler, token: Token | None, policy: Policy | None
) -> web.StreamResponse:
    """The body read, every touch of ``policy`` authorized for ``token``, then the handler; the body's
    budget held until answered."""
    held = await take_body(request)
    try:
        if token is not None and policy is not None and policy.checked:
            request[TOUCHED] = await authorize(request, token, policy)
        return await handler(request)
    finally:
        if held is not None:
            held.give()
