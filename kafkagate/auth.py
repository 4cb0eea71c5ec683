"""The gateway's authentication: named, scoped tokens (``jqruntime.tokens``, ``docs/security.md``).

The middleware matches the bearer token, names it on the request (:data:`~jqruntime.http.TOKEN_NAME`, and
``token=`` on every log line of the request), spends one request of its rate (429 ``rate_limited``), checks
the route's scope (403 ``scope_missing``) and the path's ``{queue}`` (403 ``queue_forbidden``). What a
request names in its body or in a stored object (a job's kind, a graph's nodes, a cron schedule's queue) is
checked by the handler with :func:`require_queue` / :func:`require_kind`; lists of queues are narrowed
with :func:`visible`. Errors, their statuses and their one JSON body are :mod:`jqruntime.http`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from jqruntime.http import TOKEN_NAME, HttpError
from jqruntime.tokens import SCOPES, Token, TokenSource, queue_forbidden, retry_after

__all__ = [
    "SCOPES",
    "TOKEN",
    "TOKENS",
    "auth_middleware",
    "require_every_queue",
    "require_kind",
    "require_queue",
    "required_scope",
    "token_of",
    "visible",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})
SIGNED_PREFIXES = ("/v1/callbacks/",)
"""Routes that authenticate with their own signed token instead (dispatch callbacks,
:mod:`kafkagate.callbacks`)."""

TOKEN = web.RequestKey("token", Token)
"""The token a request was authenticated with."""
TOKENS = web.AppKey("tokens", TokenSource)
"""The gateway's tokens (reloaded on SIGHUP: ``kafkagate.main``)."""


WORK_ROUTES = ("/claims", "/extend", "/complete", "/fail", "/release", "/snooze", "/cancel", "/heartbeat")
"""The ends of the queue routes a worker uses (scope ``work``); a job's cancel by its holder is one of them,
``DELETE`` of a job (any job) is ``admin``."""


def required_scope(method: str, path_template: str) -> str:
    """The scope a route needs (by the route's template, e.g. ``/v1/queues/{queue}/jobs``)."""
    if method == "GET":
        return "read"
    if method == "POST" and (path_template.endswith("/jobs") or path_template == "/v1/graphs"):
        return "enqueue"
    if path_template.startswith("/v1/queues/") and path_template.endswith(WORK_ROUTES):
        return "work"
    return "admin"


def token_of(request: web.Request) -> Token:
    return request[TOKEN]


def require_queue(request: web.Request, queue: str) -> None:
    """403 ``queue_forbidden`` unless the request's token may use ``queue``."""
    token = token_of(request)
    if not token.allows_queue(queue):
        raise queue_forbidden(token.name, queue, token.queues)


def require_kind(request: web.Request, kind: str, where: str | None = None) -> None:
    """403 ``kind_forbidden`` unless the request's token may enqueue jobs of ``kind``; ``where`` names the
    job in the body (``jobs[3]``, ``nodes.load``)."""
    token = token_of(request)
    if not token.allows_kind(kind):
        at = f" ({where})" if where else ""
        raise HttpError(
            403,
            "kind_forbidden",
            f"token {token.name!r} may not enqueue kind {kind!r}{at} (its kinds: {', '.join(token.kinds)})",
            details={"token": token.name, "kind": kind, **({"at": where} if where else {})},
        )


def require_every_queue(request: web.Request, what: str) -> None:
    """403 ``queue_forbidden`` for an action on every queue at once by a token limited to some."""
    token = token_of(request)
    if not token.every_queue:
        raise HttpError(
            403,
            "queue_forbidden",
            f"token {token.name!r} is limited to queues {', '.join(token.queues)}; {what}",
            details={"token": token.name, "queue": "*"},
        )


def visible(request: web.Request, queues: Iterable[str]) -> list[str]:
    """The queues of ``queues`` the request's token may see (lists are narrowed, never refused)."""
    token = token_of(request)
    return [q for q in queues if token.allows_queue(q)]


def auth_middleware(source: TokenSource, mounted: Sequence[str] = ()) -> Middleware:
    """Bearer tokens of ``source.current`` (read per request: a reload takes effect at the next one);
    probes and documentation stay open, and so do the ``mounted`` sub-applications' prefixes (the
    dashboard checks its own tokens)."""
    prefixes = tuple(f"{m.rstrip('/')}/" for m in mounted)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or request.path.startswith(SIGNED_PREFIXES):
            return await handler(request)
        if prefixes and request.path.startswith(prefixes):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise HttpError(401, "unauthenticated", "send Authorization: Bearer <token>")
        token = source.current.match(secret)
        if token is None:
            raise HttpError(401, "token_invalid", "the bearer token is not accepted")
        request[TOKEN] = token
        request[TOKEN_NAME] = token.name
        structlog.contextvars.bind_contextvars(token=token.name)  # reset by metrics_middleware
        wait = source.throttle(token)
        if wait > 0 and token.rate is not None:
            after = retry_after(wait)
            limited = HttpError(
                429,
                "rate_limited",
                f"token {token.name!r} is over its rate of {token.rate}; retry in {after} s",
                details={"token": token.name, "rate": str(token.rate), "retry_after_s": int(after)},
            )
            limited.headers["Retry-After"] = after
            raise limited
        resource = request.match_info.route.resource
        template = resource.canonical if resource is not None else request.path
        needed = required_scope(request.method, template)
        if not token.has(needed):
            raise HttpError(
                403,
                "scope_missing",
                f"token {token.name!r} lacks the {needed!r} scope for {request.method} {template}",
                details={"token": token.name, "scope": needed},
            )
        queue = request.match_info.get("queue")
        if queue is not None:
            require_queue(request, queue)
        return await handler(request)

    return auth
