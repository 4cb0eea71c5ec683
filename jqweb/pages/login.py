"""Signing in (a token pasted once, kept in an HttpOnly SameSite=Strict cookie) and out."""

from __future__ import annotations

from aiohttp import web

from jqweb.context import WEB
from jqweb.render import env, form
from jqweb.security import COOKIE, TOKENS

__all__ = ["routes"]

routes = web.RouteTableDef()


def _login_page(base: str, next_url: str, problem: str | None, status: int = 200) -> web.Response:
    html = env.get_template("login.html").render(
        base=base, me=None, flash=None, path="/login", next_url=next_url, problem=problem
    )
    return web.Response(text=html, status=status, content_type="text/html")


def _next(base: str, value: str | None) -> str:
    if value and value.startswith(f"{base}/") and not value.startswith("//") and "/login" not in value:
        return value
    return f"{base}/"


@routes.get("/login")
async def login_form(request: web.Request) -> web.Response:
    base = request.app[WEB].base
    return _login_page(base, _next(base, request.query.get("next")), None)


@routes.post("/login")
async def login(request: web.Request) -> web.Response:
    w = request.app[WEB]
    data = await form(request)
    token = data.get("token", "").strip()
    if not token or request.app[TOKENS].current.match(token) is None:
        return _login_page(w.base, _next(w.base, data.get("next")), "that token is not accepted", 401)
    response = web.HTTPSeeOther(_next(w.base, data.get("next")))
    response.set_cookie(
        COOKIE, token, path=w.base or "/", httponly=True, samesite="Strict", secure=w.settings.secure_cookie
    )
    raise response


@routes.post("/logout")
async def logout(request: web.Request) -> web.Response:
    w = request.app[WEB]
    response = web.HTTPSeeOther(f"{w.base}/login")
    response.del_cookie(COOKIE, path=w.base or "/")
    raise response
