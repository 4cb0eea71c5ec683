"""Who may see and who may act, and what a browser may be tricked into.

* **Tokens** (``jqruntime.tokens``: ``JOBQ_TOKENS_FILE`` and ``JOBQ_WEB_*_TOKENS``): a token with ``read``
  sees pages, one with ``admin`` may also act; a token held to some queues sees only those (a page or
  action on another queue is a 403 ``queue_forbidden``, lists leave the others out). A browser signs in
  once on ``/login`` and gets a server-side session (``jqweb.sessions``): the ``HttpOnly``,
  ``SameSite=Strict`` cookie holds only the session's random id, never the token, and a session whose
  token is no longer configured, or was given another secret, is refused; scripts send
  ``Authorization: Bearer <token>``. Tokens are matched by their SHA-256 in constant time against every
  configured one; a Bearer token not accepted counts in the sign-in throttle, and past it a client's
  Bearer requests are refused before any match (429 ``auth_throttled``).
* **One policy per route** (``jqruntime.authz``, declared with the route: :mod:`jqweb.routes`): its scope
  (``read`` for a page, ``admin`` for an action, ``open`` for sign-in and the probes) and what it touches —
  the queue of its path, the jobs a bulk action selects, a graph's or a schedule's owner. The door
  (:func:`auth_middleware`) checks both before any handler runs (so before any JSON or HTML branch); lists
  are narrowed by their pages. A path no route matches needs a principal too; the static files are the
  one route served by name without one (:data:`STATIC_ROUTE`).
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

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from jqruntime.authz import (
    EVERY_QUEUE,
    TOUCHED,
    Policy,
    Touch,
    auth_throttled,
    authorize,
    policy_of,
    queue,
)
from jqruntime.http import TOKEN_NAME, HttpError
from jqruntime.tokens import Token, TokenSource

__all__ = [
    "COOKIE",
    "CSP",
    "READ",
    "SECURE_COOKIE",
    "STATIC_ROUTE",
    "TOKENS",
    "BearerGuard",
    "Principal",
    "SessionLookup",
    "auth_middleware",
    "cookie_name",
    "csrf_middleware",
    "headers_middleware",
    "principal",
    "query_queue",
    "require_admin",
    "search_queue",
    "session_id",
    "visible",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

COOKIE = "jobq_session"
"""The session cookie's name on plain ``http`` to a loopback host (a ``__Host-`` cookie must be Secure)."""
SECURE_COOKIE = "__Host-jobq_session"
"""The session cookie's name everywhere else: ``Secure``, ``Path=/``, no ``Domain`` (the browser keeps it
from any other host or scheme)."""
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
STATIC_ROUTE = "static"
"""The vendored assets and the stylesheet (``app.py``): served without a principal."""
READ = Policy("read")
"""A page that shows what the token may see (its lists narrowed by the page)."""


@dataclass(frozen=True)
class Principal:
    who: str
    admin: bool
    via_cookie: bool = False
    token: Token | None = None
    """The token signed in with (its queues narrow what the pages show)."""
    session: str = ""
    """The session's ref (``jqweb.sessions``) when signed in by cookie."""

    def allows_queue(self, queue: str) -> bool:
        return self.token is None or self.token.allows_queue(queue)


PRINCIPAL = web.RequestKey("principal", Principal)
TOKENS = web.AppKey("web_tokens", TokenSource)
"""The dashboard's tokens (``jqruntime.tokens``)."""


SessionLookup = Callable[[web.Request, str], Awaitable[tuple[str, str] | None]]
"""``(token name, session ref)`` of a live session id (None: expired, signed out or revoked)."""


@dataclass(frozen=True)
class BearerGuard:
    """The sign-in throttle, for tokens sent as ``Authorization: Bearer`` (``jqweb.sessions.Throttle``):
    ``wait_s(request, presented)`` before the match (> 0: refused, 429 ``auth_throttled``), ``failed``
    after a match that found no token."""

    wait_s: Callable[[web.Request, str], Awaitable[int]]
    failed: Callable[[web.Request, str], Awaitable[None]]


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def cookie_name(request: web.Request, secure_setting: bool) -> tuple[str, bool]:
    """``(name, secure)`` of the session cookie for this request: ``__Host-jobq_session`` and ``Secure``
    unless the dashboard is reached over plain http on a loopback host (a browser drops a Secure cookie
    set over http there) and ``secure_cookie`` is not set."""
    if secure_setting or request.secure or not _loopback(request.url.host):
        return SECURE_COOKIE, True
    return COOKIE, False


def session_id(request: web.Request, secure_setting: bool) -> str:
    """The session id the browser sent, or ``""``: the ``__Host-`` cookie anywhere; the plain
    ``jobq_session`` only where it is the cookie the dashboard sets (:func:`cookie_name`: plain http to a
    loopback host, ``secure_cookie`` off). Elsewhere a plain cookie is ignored: a sibling subdomain can
    plant one (``Domain=example.com``) to sign a browser in as someone else; a ``__Host-`` cookie it
    cannot."""
    found = request.cookies.get(SECURE_COOKIE)
    if found:
        return found
    if cookie_name(request, secure_setting)[0] == COOKIE:
        return request.cookies.get(COOKIE, "")
    return ""


async def _bearer(
    request: web.Request, source: TokenSource, guard: BearerGuard | None, given: str
) -> Token | None:
    """The token of a Bearer header: refused before the match when the client is past the throttle, a
    failed match counted."""
    if guard is None:
        return source.current.match(given)
    wait_s = await guard.wait_s(request, given)
    if wait_s:
        raise auth_throttled(wait_s)
    found = source.current.match(given)
    if found is None:
        await guard.failed(request, given)
    return found


def auth_middleware(
    source: TokenSource,
    base: str,
    sessions: SessionLookup,
    *,
    secure_cookie: bool = False,
    guard: BearerGuard | None = None,
) -> Middleware:
    """The door: a session cookie (:func:`session_id`) or a bearer token (throttled by ``guard``: a client
    past the failed-match limit is refused before its token is compared), then the route's policy."""

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        policy = policy_of(request)
        if (policy is not None and not policy.checked) or request.match_info.route.name == STATIC_ROUTE:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, bearer = header.partition(" ")
        via_cookie = not (scheme.lower() == "bearer" and bearer)
        found: Token | None = None
        ref = ""
        if via_cookie:
            given = session_id(request, secure_cookie)
            live = await sessions(request, given) if given else None
            if live is not None:  # its token as configured now: gone (None) ends the session
                found, ref = source.current.by_name(live[0]), live[1]
        else:
            given = bearer
            found = await _bearer(request, source, guard, given) if given.strip() else None
        if found is None:
            if request.method == "GET" and via_cookie and "text/html" in request.headers.get("Accept", ""):
                raise web.HTTPSeeOther(f"{base}/login?next={quote(request.path_qs, safe='/')}")
            code = ("session_invalid" if via_cookie else "token_invalid") if given else "unauthenticated"
            raise HttpError(401, code, "sign in with a read or admin token (or send Authorization: Bearer)")
        request[TOKEN_NAME] = found.name
        if not found.has("read"):
            raise HttpError(
                403,
                "scope_missing",
                f"token {found.name!r} lacks the 'read' scope the dashboard needs",
                details={"token": found.name, "scope": "read"},
            )
        request[PRINCIPAL] = Principal(found.name, found.has("admin"), via_cookie, found, ref)
        if policy is not None:
            if policy.scope == "admin":
                require_admin(request)
            request[TOUCHED] = await authorize(request, found, policy)
        return await handler(request)

    return auth


def principal(request: web.Request) -> Principal:
    return request[PRINCIPAL]


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


# ---- what dashboard requests touch (the finds of the pages' policies) --------------------------------
async def query_queue(request: web.Request, _: Token) -> Iterable[Touch]:
    """A page's ``?queue=`` (a page of one queue: the dead letters of one)."""
    named = request.query.get("queue")
    return [queue(named, "?queue=")] if named else []


async def search_queue(request: web.Request, _: Token) -> Iterable[Touch]:
    """A search's ``?queue=``, else every queue (a token held to some queues searches one at a time)."""
    named = request.query.get("queue")
    return [queue(named, "?queue=")] if named else [EVERY_QUEUE]
