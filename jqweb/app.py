"""The dashboard's aiohttp application: its own process (``jobq web``) or a sub-application the gateway
mounts (``jobq gate --web``, served under ``/ui``)."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from jqcore.http import error_middleware
from jqweb.context import WEB, Web
from jqweb.pages import PAGES
from jqweb.render import render_error
from jqweb.security import auth_middleware, csrf_middleware, headers_middleware, parse_tokens

__all__ = ["STATIC", "make_app"]

STATIC = Path(__file__).parent / "static"


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def make_app(w: Web) -> web.Application:
    known = parse_tokens(w.settings.read_tokens, w.settings.admin_tokens)
    app = web.Application(
        middlewares=[
            headers_middleware,
            error_middleware("the dashboard", render_error),
            auth_middleware(known, w.base),
            csrf_middleware,
        ],
        client_max_size=1024 * 1024,
    )
    app[WEB] = w
    app.router.add_get("/healthz", healthz)
    app.router.add_static("/static/", STATIC, follow_symlinks=False, append_version=False)
    for module in PAGES:
        app.router.add_routes(module.routes)

    async def close(_: web.Application) -> None:
        await w.close()

    app.on_cleanup.append(close)
    return app
