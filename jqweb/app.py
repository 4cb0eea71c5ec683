"""The dashboard's aiohttp application: its own process (``jobq web``) or a sub-application the gateway
mounts (``jobq gate --web``, served under ``/ui``)."""

from __future__ import annotations

import hmac
from pathlib import Path

from aiohttp import web

from jqcore import metrics
from jqcore.log import get_logger
from jqcore.settings.common import load
from jqruntime.authz import OPEN, POLICIES
from jqruntime.health import Readiness, ping, readiness_answer
from jqruntime.http import error_middleware, json_response
from jqruntime.tokens import TokenSettings, TokenSource
from jqweb.context import WEB, Web
from jqweb.pages import PAGES
from jqweb.render import render_error
from jqweb.security import (
    STATIC_ROUTE,
    TOKENS,
    BearerGuard,
    auth_middleware,
    csrf_middleware,
    headers_middleware,
)

__all__ = ["STATIC", "make_app"]

STATIC = Path(__file__).parent / "static"

log = get_logger("jqweb")


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready while Redis (every page reads it) answers; 503 ``redis_unreachable`` otherwise."""
    found = Readiness()
    await ping("Redis", request.app[WEB].client.ping(), found, code="redis_unreachable")
    return json_response(readiness_answer("dashboard", found))


async def metrics_route(_: web.Request) -> web.Response:
    return web.Response(body=metrics.render(), headers={"Content-Type": metrics.CONTENT_TYPE})


def make_app(w: Web, tokens: TokenSource | None = None) -> web.Application:
    """The dashboard; ``tokens`` default to ``JOBQ_TOKENS_FILE`` and ``JOBQ_WEB_*_TOKENS``."""
    s = w.settings
    if tokens is None:
        tokens = TokenSource(
            load(TokenSettings), web_read=s.read_tokens, web_admin=s.admin_tokens, host=s.host
        )

    async def session_token(request: web.Request, session_id: str) -> tuple[str, str] | None:
        """``(token name, ref)`` of the live session; a session whose token is no longer configured, or
        whose token's secret was replaced since its sign-in (another generation: the file's ``sha256``
        changed and was reloaded), is ended."""
        store = request.app[WEB].sessions()
        found = await store.use(session_id)
        if found is None:
            return None
        now = request.app[TOKENS].current.generation_of(found.who)
        if now is None or not hmac.compare_digest(now, found.generation):
            await store.end([found.ref])
            why = "its token is no longer configured" if now is None else "its token's secret was replaced"
            log.info("dashboard session ended", who=found.who, session=found.ref[:12], reason=why)
            return None
        return found.who, found.ref

    async def bearer_wait(request: web.Request, presented: str) -> int:
        web_ = request.app[WEB]
        return await web_.throttle().retry_after_s(web_.address(request), presented)

    async def bearer_failed(request: web.Request, presented: str) -> None:
        web_ = request.app[WEB]
        address = web_.address(request)
        await web_.throttle().failed(address, presented)
        log.info("dashboard bearer token not accepted", address=address)

    door = auth_middleware(
        tokens,
        w.base,
        session_token,
        secure_cookie=s.secure_cookie,
        guard=BearerGuard(bearer_wait, bearer_failed),
    )
    app = web.Application(
        middlewares=[
            headers_middleware,
            error_middleware("the dashboard", render_error),
            door,
            csrf_middleware,
        ],
        client_max_size=1024 * 1024,
    )
    app[WEB] = w
    app[TOKENS] = tokens
    # every route's policy (jqweb.routes): the probes are open, and so are the static files (by name)
    probes = {healthz: OPEN, readyz: OPEN, metrics_route: OPEN}
    app[POLICIES] = {**probes, **{h: p for m in PAGES for h, p in m.routes.policies.items()}}
    for probe in probes:
        app.router.add_get(f"/{probe.__name__.removesuffix('_route')}", probe)
    app.router.add_static("/static/", STATIC, follow_symlinks=False, append_version=False, name=STATIC_ROUTE)
    for module in PAGES:
        app.router.add_routes(module.routes)

    async def close(_: web.Application) -> None:
        await w.close()

    app.on_cleanup.append(close)
    return app
