"""The dashboard's ``form()`` reading a JSON body (security review L8): parsed with orjson, whose nesting is
bounded, so a deeply nested body is a 400 ``body_invalid`` like any bad JSON, never a 500 (the stdlib's
parser and ``str()`` recurse as deep as the body nests); only scalars and lists of scalars are fields."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from jqruntime.http import error_middleware, json_response
from jqweb.render import _pretty, form


async def echo(request: web.Request) -> web.Response:
    return json_response(await form(request))


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    app = web.Application(middlewares=[error_middleware("the dashboard")])
    app.router.add_post("/form", echo)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c


async def post(client: TestClient[Any, Any], body: bytes) -> tuple[int, Any]:
    r = await client.post("/form", data=body, headers={"Content-Type": "application/json"})
    return r.status, await r.json()


@pytest.mark.parametrize("depth", [500, 1000, 5000, 100_000])
async def test_deeply_nested_json_is_a_400_never_a_500(client: TestClient[Any, Any], depth: int) -> None:
    for body in (b'{"a": ' + b"[" * depth + b"]" * depth + b"}", b"[" * depth + b"]" * depth):
        status, answer = await post(client, body)
        assert (status, answer["error"]["code"]) == (400, "body_invalid"), answer


async def test_fields_are_scalars_or_lists_of_them(client: TestClient[Any, Any]) -> None:
    status, answer = await post(client, b'{"id": ["q/a", "q/b"], "all": 1, "x": true, "n": null}')
    assert status == 200, answer
    assert answer == {"id": "q/a\nq/b", "all": "1", "x": "True", "n": "None"}
    status, answer = await post(client, b'{"id": {"q": "a"}}')
    assert (status, answer["error"]["code"]) == (400, "body_invalid")
    status, answer = await post(client, b"not json")
    assert (status, answer["error"]["code"]) == (400, "body_invalid")


def test_a_stored_value_nested_too_deep_is_shown_as_text() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert _pretty(deep) == deep
    assert _pretty('{"a": [1]}') == '{\n  "a": [\n    1\n  ]\n}'
