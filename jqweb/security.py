"""Who may see and who may act, and what a browser may be tricked into.

* **Tokens** (``jqcore.tokens``: ``JOBQ_TOKENS_FILE`` and ``JOBQ_WEB_*_TOKENS``): a token with ``read``
  sees pages, one with ``admin`` may also act; a token held to some queues sees only those (a page or
  action on another queue is a 403 ``queue_forbidden``, lists leave the others out). A browser signs in
  once on ``/login`` (the token is kept in an ``HttpOnly``, ``SameSite=Strict`` cookie); scripts send
  ``Authorization: Bearer <token>``. Tokens are matched by their SHA-256 in constant time against every
  configured one.
* **CSRF**: an unsafe method (POST, PUT, PATCH, DELETE) from a browser must be same-origin: the
  ``Sec-Fetch-Site`` header (``same-origin``; ``none`` for a typed URL) or, for browsers without it, the
  ``Origin`` header equal to the host. A cookie-authenticated request carrying neither is refused too.
  A request authenticated by its ``Authorization`` header is no ambient credential and passes.
* **Headers**: a strict Content-Security-Policy (scripts and styles only from the dashboard's own
  ``/static``, no inline script or style, no frames, forms only to itself), ``nosniff``, no referrer,
  pages never cached. Every value is escaped by the templates (Jinja2 autoescape): job arguments, results
  and errors are attacker-controlled text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from jqcore.http import TOKEN_NAME, HttpError
from jqcore.tokens import Token, TokenSource

__all__ = [
    "COOKIE",
    "CSP",
    "TOKENS",
    "Principal",
    "auth_middleware",
    "csrf_middleware",
    "headers_middleware",
    "principal",
    "require_admin",
    "require_queue",
    "visible",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

COOKIE = "jobq_session"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
OPEN_PATHS = frozenset({"/login", "/healthz", "/readyz", "/metrics"})
"""Paths (under the dashboard's base) served without a token; exact, so no page whose path merely ends
the same way (a queue named ``metrics``) is opened."""


@dataclass(frozen=True)
class Principal:
    who: str
    admin: bool
    via_cookie: bool = False
    token: Token | None = None
    """The token signed in with (its queues narrow what the pages show)."""

    def allows_queue(self, queue: str) -> bool:
        return self.token is None or self.token.allows_queue(queue)


PRINCIPAL = web.RequestKey("principal", Principal)
TOKENS = web.AppKey("web_tokens", TokenSource)
"""The dashboard's tokens (``jqcore.tokens``)."""


def auth_middleware(source: TokenSource, base: str) -> Middleware:
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        relative = path[len(base) :] if path.startswith(base) else path
        if path.startswith(f"{base}/static/") or relative in OPEN_PATHS:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, bearer = header.partition(" ")
        via_cookie = not (scheme.lower() == "bearer" and bearer)
        given = request.cookies.get(COOKIE, "") if via_cookie else bearer
        found = source.current.match(given) if given.strip() else None
        if found is None:
            if request.method == "GET" and via_cookie and "text/html" in request.headers.get("Accept", ""):
                raise web.HTTPSeeOther(f"{base}/login?next={request.path_qs}")
            code = "token_invalid" if given else "unauthenticated"
            raise HttpError(401, code, "sign in with a read or admin token (or send Authorization: Bearer)")
        request[TOKEN_NAME] = found.name
        if not found.has("read"):
            raise HttpError(
                403,
                "scope_missing",
                f"token {found.name!r} lacks the 'read' scope the dashboard needs",
                details={"token": found.name, "scope": "read"},
            )
        request[PRINCIPAL] = Principal(found.name, found.has("admin"), via_cookie, found)
        queue = request.match_info.get("queue") or request.query.get("queue")
        if queue:
            require_queue(request, queue)
        return await handler(request)

    return auth


def principal(request: web.Request) -> Principal:
    return request[PRINCIPAL]


def require_queue(request: web.Request, queue: str) -> None:
    """403 ``queue_forbidden`` unless the signed-in token may use ``queue``."""
    p = principal(request)
    if not p.allows_queue(queue):
        raise HttpError(
            403,
            "queue_forbidden",
            f"token {p.who!r} may not use queue {queue!r}",
            details={"token": p.who, "queue": queue},
        )


def visible(request: web.Request, queues: Iterable[str]) -> list[str]:
    """The queues of ``queues`` the signed-in token may see."""
    p = principal(request)
    return [q for q in queues if p.allows_queue(q)]


def require_admin(request: web.Request) -> Principal:
    """The signed-in admin; a read token gets a 403 ``admin_required``."""
    p = principal(request)
    if not p.admin:
        raise HttpError(403, "admin_required", "this action needs an admin token; yours may only read")
    return p


def _same_origin(request: web.Request) -> bool | None:
    """True/False when the browser said where the request came from; None when it said nothing."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is not None:
        return origin != "null" and urlsplit(origin).netloc == request.host
    return None


@web.middleware
async def csrf_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method in UNSAFE:
        same = _same_origin(request)
        p = request.get(PRINCIPAL)
        from_cookie = p is None or p.via_cookie
        if same is False or (same is None and from_cookie):
            raise HttpError(
                403, "cross_site_refused", "a dashboard action must come from the dashboard's pages"
            )
    return await handler(request)


@web.middleware
async def headers_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:  # redirects carry the headers too
        _harden(exc)
        raise
    _harden(response, static="/static/" in request.path)
    return response


def _harden(response: web.StreamResponse, *, static: bool = False) -> None:
    h = response.headers
    if static:  # the vendored assets and the stylesheet change only with a release
        h.setdefault("Cache-Control", "max-age=3600")
    h.setdefault("Content-Security-Policy", CSP)
    h.setdefault("X-Content-Type-Options", "nosniff")
    h.setdefault("Referrer-Policy", "no-referrer")
    h.setdefault("X-Frame-Options", "DENY")
    h.setdefault("Cache-Control", "no-store")
