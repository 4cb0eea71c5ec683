"""Signing in (a token pasted once; the browser gets a server-side session, ``jqweb.sessions``) and out.

Every sign-in, failed sign-in and sign-out is an audit record; failed sign-ins are throttled per client
address and token prefix, and in all (``jqweb.sessions.Throttle``: 429 with ``Retry-After`` before any
token is compared). The client address is ``X-Forwarded-For``'s only from a trusted proxy
(``JOBQ_WEB_TRUSTED_PROXIES``)."""

from __future__ import annotations

from aiohttp import web

from jqcore.clock import now_ms
from jqcore.log import get_logger
from jqruntime.authz import OPEN
from jqruntime.http import HttpError
from jqruntime.stores.audit import AuditEntry
from jqweb.context import WEB
from jqweb.redirect import safe_next
from jqweb.render import env, form
from jqweb.routes import Pages
from jqweb.security import COOKIE, SECURE_COOKIE, TOKENS, cookie_name, session_id

__all__ = ["cookie_name", "routes"]

log = get_logger("jqweb")

routes = Pages()

ANONYMOUS = "anonymous"


def _login_page(base: str, next_url: str, problem: str | None, status: int = 200) -> web.Response:
    html = env.get_template("login.html").render(
        base=base, me=None, flash=None, path="/login", next_url=next_url, problem=problem
    )
    return web.Response(text=html, status=status, content_type="text/html")


@routes.get("/login", policy=OPEN, name="login")
async def login_form(request: web.Request) -> web.Response:
    base = request.app[WEB].base
    return _login_page(base, safe_next(base, request.query.get("next"), f"{base}/"), None)


@routes.post("/login", policy=OPEN, name="login-submit")
async def login(request: web.Request) -> web.Response:
    w = request.app[WEB]
    address = w.address(request)
    data = await form(request)
    token = data.get("token", "").strip()
    throttle = w.throttle()
    wait_s = await throttle.retry_after_s(address, token)
    if wait_s:
        log.warning("dashboard sign-in throttled", address=address, retry_after_s=wait_s)
        raise HttpError(
            429,
            "login_throttled",
            f"too many failed sign-ins lately: try again in {wait_s} s",
            (),
            details={"retry_after_s": wait_s},
            **{"Retry-After": str(wait_s)},
        )
    next_url = safe_next(w.base, data.get("next"), f"{w.base}/")
    tokens = request.app[TOKENS].current  # one set for the match and the generation (a reload may swap it)
    found = tokens.match(token) if token else None
    if found is None or not found.has("read"):
        await throttle.failed(address, token)
        if found is not None:
            outcome = f"scope_missing: token {found.name!r} lacks the 'read' scope the dashboard needs"
        else:
            outcome = "token_invalid: that token is not accepted" if token else "unauthenticated: no token"
        await w.audit.record(AuditEntry(now_ms(), ANONYMOUS, "session.login", address, 0, outcome))
        return _login_page(w.base, next_url, "that token is not accepted", 401)
    who, admin = found.name, found.has("admin")
    sid = await w.sessions().create(who, admin, tokens.generation_of(who) or "")
    await w.audit.record(AuditEntry(now_ms(), who, "session.login", address, 1, token=who))
    log.info("dashboard sign-in", who=who, admin=admin, address=address)
    response = web.HTTPSeeOther(next_url)
    name, secure = cookie_name(request, w.settings.secure_cookie)
    response.set_cookie(name, sid, path="/", httponly=True, samesite="Strict", secure=secure)
    raise response


@routes.post("/logout", policy=OPEN, name="logout")
async def logout(request: web.Request) -> web.Response:
    """Ends the browser's session (if it has a live one) and clears its cookie; open, so an expired
    session can still sign out cleanly."""
    w = request.app[WEB]
    sid = session_id(request, w.settings.secure_cookie)
    store = w.sessions()
    live = await store.use(sid) if sid else None
    if live is not None:
        await store.end([live.ref])
        entry = AuditEntry(now_ms(), live.who, "session.logout", w.address(request), 1, token=live.who)
        await w.audit.record(entry)
    response = web.HTTPSeeOther(f"{w.base}/login")
    response.del_cookie(SECURE_COOKIE, path="/", secure=True, httponly=True, samesite="Strict")
    response.del_cookie(COOKIE, path="/", httponly=True, samesite="Strict")
    raise response
