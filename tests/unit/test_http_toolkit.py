"""jqruntime.http: one rule from an exception to an answer, one middleware (JSON or rendered), one way to
serve; jqruntime.consulconn closes a Consul client through its public API."""

from __future__ import annotations

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from jqcore.errors import BackendUnavailable, EnvelopeError, FieldError
from jqcore.settings.servers import ConsulSettings
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.http import ErrorAnswer, HttpError, answer_for, error_middleware, serve_http


def test_jobq_errors_map_to_status_code_and_retry_after() -> None:
    down = answer_for(BackendUnavailable("redis away"))
    assert (down.status, down.code, down.retriable, down.headers) == (
        503,
        "backend_unavailable",
        True,
        {"Retry-After": "1"},
    )
    bad = answer_for(EnvelopeError(FieldError("kind", "required")))
    assert (bad.status, bad.retriable, bad.headers) == (400, False, {})
    assert bad.body["error"]["fields"] == [{"field": "kind", "problem": "required"}]


def test_aiohttp_refusals_and_surprises_have_the_same_shape() -> None:
    refused = answer_for(web.HTTPMethodNotAllowed("DELETE", ["GET"]))
    assert (refused.status, refused.code, refused.headers["Allow"]) == (405, "method_not_allowed", "GET")
    broken = answer_for(web.RequestPayloadError("bad chunk"))
    assert (broken.status, broken.code, broken.close) == (400, "body_undecodable", True)
    boom = answer_for(RuntimeError("secret"), "the test server")
    assert (boom.status, boom.code) == (500, "internal_error")
    assert boom.message == "unexpected error; the test server logged it"


async def _refuse(_: web.Request) -> web.Response:
    raise HttpError(503, "busy", "try later")


async def _redirect(_: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/elsewhere")


async def test_the_middleware_answers_json_or_through_render() -> None:
    def render(request: web.Request, answer: ErrorAnswer) -> web.StreamResponse:
        if request.headers.get("Accept") == "application/json":
            return answer.response()
        return web.Response(text=f"<h1>{answer.code}</h1>", status=answer.status, headers=answer.headers)

    app = web.Application(middlewares=[error_middleware("the test server", render)])
    app.router.add_get("/busy", _refuse)
    app.router.add_get("/moved", _redirect)
    async with TestServer(app) as server, aiohttp.ClientSession() as http:
        async with http.get(server.make_url("/busy"), headers={"Accept": "application/json"}) as r:
            assert (r.status, r.headers["Retry-After"]) == (503, "1")
            assert await r.json() == {"error": {"code": "busy", "message": "try later"}}
        async with http.get(server.make_url("/busy")) as r:
            assert (r.status, await r.text(), r.headers["Retry-After"]) == (503, "<h1>busy</h1>", "1")
        async with http.get(server.make_url("/moved"), allow_redirects=False) as r:
            assert (r.status, r.headers["Location"]) == (303, "/elsewhere"), "a redirect is no error"


async def test_serve_http_reports_the_port_it_got_and_cleanup_stops_it() -> None:
    app = web.Application()
    app.router.add_get("/", _ok)
    runner, port = await serve_http(app, "127.0.0.1", 0)
    assert port > 0
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/") as r:
        assert (r.status, await r.text()) == (200, "ok")
    await runner.cleanup()


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def test_close_consul_closes_the_client_and_accepts_none() -> None:
    client = consul_client(ConsulSettings.model_validate({"addr": "127.0.0.1:1"}))
    await close_consul(client)
    assert client.http._session.closed
    await close_consul(None)
