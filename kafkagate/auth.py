"""The gateway's authentication: bearer tokens with scopes.

Errors, their statuses and their one JSON body are :mod:`jqcore.http`'s (shared with the dashboard).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import SecretStr

from jqcore.errors import ConfigError
from jqcore.http import HttpError

__all__ = ["SCOPES", "auth_middleware", "parse_tokens", "required_scope"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})

SCOPES = ("enqueue", "read", "worker", "admin")
"""``enqueue``: POST jobs and graphs; ``read``: GET anything; ``worker``: claims, extend, complete, fail;
``admin``: cancel, replay, queue and job-type configuration, dead letters."""


def required_scope(method: str, path_template: str) -> str:
    """The scope a route needs (by the route's template, e.g. ``/v1/queues/{queue}/jobs``)."""
    if method == "GET":
        return "read"
    if method == "POST" and (path_template.endswith("/jobs") or path_template == "/v1/graphs"):
        return "enqueue"
    if path_template.endswith(("/claims", "/extend", "/complete", "/fail")):
        return "worker"
    return "admin"


def parse_tokens(tokens: Sequence[SecretStr]) -> list[tuple[bytes, frozenset[str]]]:
    """``secret`` (every scope) or ``secret:scope+scope`` per configured token."""
    out = []
    for t in tokens:
        secret, _, scopes = t.get_secret_value().partition(":")
        granted = frozenset(scopes.split("+")) if scopes else frozenset(SCOPES)
        unknown = granted - set(SCOPES)
        if unknown:
            raise ConfigError(
                f"JOBQ_GATE_TOKENS: unknown scope(s) {sorted(unknown)}; known: {', '.join(SCOPES)}"
            )
        out.append((secret.encode(), granted))
    return out


def auth_middleware(tokens: Sequence[SecretStr], mounted: Sequence[str] = ()) -> Middleware:
    """Bearer tokens compared in constant time, each with its scopes; probes and documentation stay open,
    and so do the ``mounted`` sub-applications' prefixes (the dashboard checks its own tokens)."""
    known = parse_tokens(tokens)
    prefixes = tuple(f"{m.rstrip('/')}/" for m in mounted)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or (prefixes and request.path.startswith(prefixes)):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise HttpError(401, "unauthenticated", "send Authorization: Bearer <token>")
        given = token.strip().encode()
        granted: frozenset[str] | None = None
        for secret, scopes in known:  # compare against every token: timing does not reveal which matched
            if hmac.compare_digest(given, secret):
                granted = scopes
        if granted is None:
            raise HttpError(401, "token_invalid", "the bearer token is not accepted")
        resource = request.match_info.route.resource
        template = resource.canonical if resource is not None else request.path
        needed = required_scope(request.method, template)
        if needed not in granted:
            raise HttpError(
                403, "scope_missing", f"this token lacks the {needed!r} scope for {request.method} {template}"
            )
        return await handler(request)

    return auth
