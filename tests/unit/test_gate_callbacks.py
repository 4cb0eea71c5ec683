"""The open dispatch callback routes of a real gateway application whose Redis must not be touched
(``kafkagate/callbacks.py``, ``kafkagate/body.py``, ``kafkagate/audit.py``): a token is checked before any
Redis call; callbacks have their own body limit, budget, read timeout and a rate per source address, never
the shared body budget; and a refused callback is no admin action in the audit trail."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from jqcore.clock import now_ms
from jqcore.routing import RoutingSettings
from jqruntime.dispatch import lease_nonce, sign_callback
from jqruntime.stores.audit import AuditEntry
from jqruntime.tokens import TokenSettings, TokenSource
from kafkagate.app import make_app
from kafkagate.limits import BODY_BUDGET, CALLBACK_LIMITS, CALLBACK_MAX_BODY_BYTES
from kafkagate.longpoll import LongPolls
from kafkagate.settings import GateSettings
from kafkagate.state import Gate

SECRET = "callback-secret-for-the-unit-test"
PATH = "/v1/callbacks/q/jobs/j1/complete"


class Untouchable:
    """An engine and a Redis client that fail the request if anything asks them for anything."""

    def __init__(self, touched: list[str]) -> None:
        self._touched = touched

    def __getattr__(self, name: str) -> Any:
        self._touched.append(name)
        raise AssertionError(f"Redis was asked for {name!r} before the token was checked")


@dataclass
class Trail:
    """An audit trail that keeps what it is given."""

    entries: list[AuditEntry] = field(default_factory=list)

    async def record(self, entry: AuditEntry) -> AuditEntry:
        self.entries.append(entry)
        return entry


@dataclass
class App:
    url: str
    app: web.Application
    touched: list[str]
    trail: Trail

    async def post(self, path: str = PATH, **kw: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
        async with aiohttp.ClientSession() as http, http.post(self.url + path, **kw) as resp:
            return resp.status, await resp.json(), dict(resp.headers)


Make = Callable[..., Any]


@pytest.fixture
async def make() -> AsyncIterator[Make]:
    servers: list[TestServer] = []

    async def start(**settings: Any) -> App:
        touched: list[str] = []
        nothing: Any = Untouchable(touched)
        gate_settings = GateSettings(callback_secret=SECRET, **settings)
        gate = Gate(
            gate_settings, RoutingSettings(), *[None], nothing, nothing, *[None] * 4, LongPolls(nothing, 1)
        )
        trail = Trail()
        tokens = TokenSource(TokenSettings(), host="127.0.0.1")
        app = make_app(gate, tokens=tokens, audit=trail)  # type: ignore[arg-type]
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return App(str(server.make_url("")).rstrip("/"), app, touched, trail)

    yield start
    for server in servers:
        await server.close()


async def test_the_token_is_checked_before_any_redis_call(make: Make) -> None:
    gw = await make()
    expired = sign_callback(SECRET, "q", "j1", 1, now_ms() - 1, lease_nonce("t"))
    foreign = sign_callback("another-gateway-secret", "q", "j1", 1, now_ms() + 60_000, lease_nonce("t"))
    for token, status, code in (
        ("junk", 401, "callback_token_invalid"),
        ("v1.1.1767225630000.3ZrQ", 401, "callback_token_invalid"),
        (expired, 403, "callback_expired"),
        (foreign, 403, "callback_signature_invalid"),
    ):
        got, body, _ = await gw.post(json={"callback_token": token})
        assert (got, body["error"]["code"]) == (status, code), body
    assert gw.touched == []


async def test_callbacks_are_no_admin_actions_in_the_audit_trail(make: Make) -> None:
    gw = await make()
    for _ in range(3):
        status, _, _ = await gw.post(
            "/v1/callbacks/q/jobs/j1/fail", json={"callback_token": "x", "error": "e"}
        )
        assert status == 401
    assert gw.trail.entries == []


async def test_callbacks_hold_their_own_budget_never_the_shared_one(make: Make) -> None:
    gw = await make()
    shared = gw.app[BODY_BUDGET]
    shared.take(shared.total)  # enqueues and claims hold every byte of the shared budget
    status, body, _ = await gw.post(json={"callback_token": "junk"})
    assert (status, body["error"]["code"]) == (401, "callback_token_invalid")  # not 429 gateway_busy
    own = gw.app[CALLBACK_LIMITS].budget
    own.take(own.total)
    status, body, headers = await gw.post(json={"callback_token": "junk"})
    assert (status, body["error"]["code"], headers["Retry-After"]) == (429, "gateway_busy", "1")
    assert "JOBQ_GATE_CALLBACK_INFLIGHT_BODY_BYTES" in body["error"]["message"]
    own.give(own.total)
    shared.give(shared.total)


async def test_a_callback_body_is_small(make: Make) -> None:
    gw = await make()
    big = b'{"callback_token": "junk", "result": "' + b"x" * CALLBACK_MAX_BODY_BYTES + b'"}'
    status, body, _ = await gw.post(data=big, headers={"Content-Type": "application/json"})
    assert (status, body["error"]["code"]) == (413, "body_too_large")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(4):
            yield big[: CALLBACK_MAX_BODY_BYTES // 2]

    status, body, _ = await gw.post(data=chunks(), headers={"Content-Type": "application/json"})
    assert (status, body["error"]["code"]) == (413, "body_too_large")
    assert gw.app[CALLBACK_LIMITS].budget.used == 0
    assert gw.touched == []


async def test_a_body_that_stops_coming_is_a_408_and_frees_its_budget(make: Make) -> None:
    gw = await make(callback_read_timeout_s=0.3)
    host, port = gw.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n"
    )
    writer.write(head.encode() + b'{"callback_token": ')  # ... and nothing more
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)  # the old gateway waited for ever
    assert status_line.split()[1] == b"408", status_line
    rest = await asyncio.wait_for(reader.read(4096), 10)
    assert b"body_timeout" in rest
    writer.close()
    assert gw.app[CALLBACK_LIMITS].budget.used == 0


async def test_callbacks_are_rate_limited_per_source_address(make: Make) -> None:
    gw = await make(callback_rate="3/min")
    answers = [await gw.post(json={"callback_token": "junk"}) for _ in range(4)]
    assert [s for s, _, _ in answers] == [401, 401, 401, 429]
    _, body, headers = answers[-1]
    assert body["error"]["code"] == "rate_limited"
    assert int(headers["Retry-After"]) >= 1
    unlimited = await make(callback_rate="")
    assert {(await unlimited.post(json={"callback_token": "junk"}))[0] for _ in range(5)} == {401}


def test_a_bad_callback_rate_is_a_settings_error() -> None:
    with pytest.raises(ValueError, match="no rate"):
        GateSettings(callback_rate="fast")
