"""The Python client's retries: the same job ids on every try, Retry-After honoured, 4xx never retried,
attempts and deadline bounded, unsafe calls not repeated, a proxy's HTML error surfaced, own zone first.

Most tests talk to :class:`Misbehaving`, a tiny local aiohttp server that is a TEST DOUBLE of a gateway
misbehaving (503 with Retry-After, a proxy's HTML 502, dropped connections, hanging): it checks the
client's retry logic, not the gateway. The last test puts the double in front of the REAL gateway (``gw``:
real Kafka and Redis) as a connection-dropping proxy and checks that the retried enqueue made exactly one
job per id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import orjson
import pytest
from aiohttp import web

from jqcore.envelope import decode
from jqrelay.main import RelayService
from jqruntime.client import ApiRefused, Gateway, GatewayUnavailable, JobqClient
from jqruntime.http import serve_http

Reply = Callable[[web.Request, bytes], Awaitable[web.StreamResponse]]
FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05}


@dataclass
class Seen:
    at: float  # time.monotonic() when the double received the request
    method: str
    path: str
    body: bytes


@dataclass
class Misbehaving:
    """Test double of a misbehaving gateway: request i gets ``script[i]`` (the last one repeats)."""

    script: Sequence[Reply]
    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends hanging replies at teardown
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(time.monotonic(), request.method, request.path, body))
        return await self.script[min(len(self.seen), len(self.script)) - 1](request, body)


DOUBLE = web.AppKey("double", Misbehaving)


@contextlib.asynccontextmanager
async def misbehaving(*script: Reply) -> AsyncIterator[Misbehaving]:
    double = Misbehaving(script)
    app = web.Application()
    app[DOUBLE] = double
    app.router.add_route("*", "/{tail:.*}", double.handle)
    runner, port = await serve_http(app, "127.0.0.1", 0, shutdown_timeout=1)
    double.url = f"http://127.0.0.1:{port}"
    try:
        yield double
    finally:
        double.release.set()
        await runner.cleanup()


def status(code: int, body: Any = None, headers: dict[str, str] | None = None) -> Reply:
    async def reply(request: web.Request, raw: bytes) -> web.StreamResponse:
        if isinstance(body, str):
            return web.Response(status=code, text=body, content_type="text/html", headers=headers)
        err = {"error": {"code": f"test_{code}", "message": "the double says no"}}
        return web.json_response(body or err, status=code, headers=headers)

    return reply


def unavailable(retry_after: str | None = None) -> Reply:
    err = {"error": {"code": "kafka_unavailable", "message": "Kafka did not confirm"}}
    return status(503, err, {"Retry-After": retry_after} if retry_after else None)


async def drop(request: web.Request, raw: bytes) -> web.StreamResponse:
    """The connection dies before an answer (the request may or may not have been acted on)."""
    assert request.transport is not None
    request.transport.abort()
    return web.Response()


async def hang(request: web.Request, raw: bytes) -> web.StreamResponse:
    """No answer until the test ends (a gateway stuck mid-request)."""
    await request.app[DOUBLE].release.wait()
    return web.json_response({})


async def accepted(request: web.Request, raw: bytes) -> web.StreamResponse:
    """A 202 like the gateway's: the ids the client sent (for any other call, an empty object)."""
    if not request.path.endswith("/jobs"):
        return web.json_response({})
    doc = orjson.loads(raw)
    jobs = doc["jobs"] if isinstance(doc, dict) and "jobs" in doc else [doc]
    ids = [j["id"] for j in jobs]
    return web.json_response({"ids": ids, "jobs": [{"id": i} for i in ids]}, status=202)


def gaps(seen: list[Seen]) -> list[float]:
    return [b.at - a.at for a, b in itertools.pairwise(seen)]


def refused_url() -> str:
    """An address where nothing listens (connect is refused: the request never left the client)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# ---- job ids never change between tries -------------------------------------------------------------
async def test_enqueue_retries_send_the_same_ids_and_bytes() -> None:
    html = "<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"
    async with (
        misbehaving(drop, status(502, html), unavailable(), accepted) as double,
        JobqClient([double.url], "t", **FAST) as jq,
    ):
        ids = await jq.enqueue(
            "q", [{"kind": "k", "args": i} for i in range(5)] + [{"kind": "k", "id": None}]
        )
        one = await jq.enqueue_one("q", "k", {"x": 1})
    tries = double.seen[:4]
    assert [s.method for s in tries] == ["POST"] * 4
    assert len({s.body for s in tries}) == 1, "every try carried the same bytes"
    sent = [j["id"] for j in orjson.loads(tries[0].body)["jobs"]]
    assert sent == ids, "the ids returned are the ids sent on the first try"
    assert len(set(ids)) == 6, "a job given with id None got one too"
    assert all(ids)
    assert one["id"] == orjson.loads(double.seen[4].body)["id"]


# ---- Retry-After --------------------------------------------------------------------------------------
async def test_retry_after_seconds_is_a_minimum_wait() -> None:
    async with (
        misbehaving(unavailable("1"), status(429, None, {"Retry-After": "1"}), accepted) as double,
        JobqClient([double.url], "t", **FAST) as jq,
    ):
        await jq.enqueue("q", [{"kind": "k"}])
    assert len(double.seen) == 3, "503 and 429 with Retry-After were retried"
    assert all(g >= 1.0 for g in gaps(double.seen)), gaps(double.seen)


async def test_retry_after_http_date_is_a_minimum_wait() -> None:
    async def until_date(request: web.Request, raw: bytes) -> web.StreamResponse:
        when = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)  # ≥ 1 s ahead
        return await status(503, None, {"Retry-After": format_datetime(when, usegmt=True)})(request, raw)

    async with misbehaving(until_date, accepted) as double, JobqClient([double.url], "t", **FAST) as jq:
        assert await jq.queue("q") == {}
    (gap,) = gaps(double.seen)
    assert gap >= 1.0, gap


# ---- never retried: 4xx, unsafe calls ------------------------------------------------------------------
@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 429])
async def test_a_4xx_is_raised_at_once(code: int) -> None:
    async with (
        misbehaving(status(code), accepted) as double,
        misbehaving(accepted) as other,
        JobqClient([Gateway(double.url, "a"), Gateway(other.url, "b")], "t", az="a", **FAST) as jq,
    ):
        with pytest.raises(ApiRefused) as refused:
            await jq.enqueue("q", [{"kind": "k"}])
    assert (refused.value.status, refused.value.code) == (code, f"test_{code}")
    assert (len(double.seen), len(other.seen)) == (1, 0), "no retry, no failover"


async def test_a_proxy_html_4xx_is_refused_with_status_and_snippet() -> None:
    async with (
        misbehaving(status(413, "<html><title>413 Request Entity Too Large</title></html>")) as double,
        JobqClient([double.url], "t", **FAST) as jq,
    ):
        with pytest.raises(ApiRefused) as refused:
            await jq.enqueue("q", [{"kind": "k"}])
    assert refused.value.status == 413
    assert "Request Entity Too Large" in refused.value.snippet
    assert "413" in str(refused.value)


async def test_unsafe_calls_are_not_repeated_unless_marked_idempotent() -> None:
    async with (
        misbehaving(unavailable(), accepted) as double,
        JobqClient([double.url], "t", **FAST) as jq,
    ):
        with pytest.raises(GatewayUnavailable) as failed:
            await jq.request("PUT", "/v1/queues/q", json={"paused": True})
        assert (failed.value.status, failed.value.retriable) == (503, False)
        assert len(double.seen) == 1
        assert await jq.request("PUT", "/v1/queues/q", json={"paused": True}, idempotent=True) == {}
    assert len(double.seen) == 2
    async with misbehaving(drop, accepted) as double, JobqClient([double.url], "t", **FAST) as jq:
        with pytest.raises(GatewayUnavailable):
            await jq.request("POST", "/v1/queues/q/jobs/j1/complete", json={})
    assert len(double.seen) == 1, "a dropped connection may have acted: not repeated"


async def test_unsafe_calls_still_fail_over_when_nothing_was_sent() -> None:
    async with misbehaving(accepted) as double:
        gateways = [Gateway(refused_url(), "a"), Gateway(double.url, "b")]
        async with JobqClient(gateways, "t", az="a", **FAST) as jq:
            assert await jq.request("PUT", "/v1/queues/q", json={"paused": True}) == {}
    assert len(double.seen) == 1


# ---- bounded: attempts, deadline, timeouts -----------------------------------------------------------
async def test_attempts_are_bounded_over_every_gateway() -> None:
    html = "<html><body>" + "x" * 5000 + "</body></html>"
    async with misbehaving(status(502, html)) as a, misbehaving(status(504)) as b:
        gateways = [Gateway(a.url, "a"), Gateway(b.url, "b")]
        async with JobqClient(gateways, "t", az="a", attempts=3, **FAST) as jq:
            with pytest.raises(GatewayUnavailable) as failed:
                await jq.queue("q")
    assert (len(a.seen), len(b.seen)) == (3, 3), "3 rounds, each over both gateways, own zone first"
    assert all(x.at < y.at for x, y in zip(a.seen, b.seen, strict=True))
    assert "gave up after 3 round(s)" in str(failed.value)
    assert failed.value.status in (502, 504)


async def test_a_proxy_html_502_surfaces_status_and_a_snippet() -> None:
    html = "<html><head><title>502 Bad Gateway</title></head><body>" + "y" * 5000 + "</body></html>"
    async with (
        misbehaving(status(502, html)) as double,
        JobqClient([double.url], "t", attempts=2, **FAST) as jq,
    ):
        with pytest.raises(GatewayUnavailable) as failed:
            await jq.enqueue("q", [{"kind": "k"}])
    assert failed.value.status == 502
    assert failed.value.snippet.startswith("<html><head><title>502 Bad Gateway")
    assert len(failed.value.snippet) <= 200
    assert "HTTP 502" in str(failed.value)


async def test_a_retry_after_beyond_the_deadline_ends_the_call_instead_of_waiting() -> None:
    async with (
        misbehaving(unavailable("30"), accepted) as double,
        JobqClient([double.url], "t", deadline_s=2, **FAST) as jq,
    ):
        started = time.monotonic()
        with pytest.raises(GatewayUnavailable) as failed:
            await jq.queue("q")
        assert time.monotonic() - started < 30, "did not sleep out a wait the deadline cannot fit"
    assert len(double.seen) == 1
    assert failed.value.retry_after_s == 30


async def test_a_hanging_gateway_is_cut_by_the_per_try_timeout_and_the_deadline() -> None:
    async with (
        misbehaving(hang) as double,
        JobqClient([double.url], "t", timeout_s=0.3, attempts=2, **FAST) as jq,
    ):
        with pytest.raises(GatewayUnavailable) as failed:
            await jq.queue("q")
        assert failed.value.status is None
        assert len(double.seen) == 2
        async with JobqClient([double.url], "t", timeout_s=30, deadline_s=0.5, **FAST) as jq:
            started = time.monotonic()
            with pytest.raises(GatewayUnavailable):
                await jq.queue("q")
            assert time.monotonic() - started < 30, "each try is capped by what is left of the deadline"
    assert len(double.seen) == 3


# ---- zones ---------------------------------------------------------------------------------------
async def test_own_zone_first_then_failover_within_the_round() -> None:
    async with misbehaving(accepted) as mine, misbehaving(accepted) as theirs:
        gateways = [Gateway(theirs.url, "b"), Gateway(mine.url, "a")]
        async with JobqClient(gateways, "t", az="a", **FAST) as jq:
            for _ in range(10):
                await jq.queue("q")
    assert (len(mine.seen), len(theirs.seen)) == (10, 0)
    async with misbehaving(unavailable("5")) as mine, misbehaving(accepted) as theirs:
        gateways = [Gateway(theirs.url, "b"), Gateway(mine.url, "a")]
        async with JobqClient(gateways, "t", az="a", **FAST) as jq:
            await jq.enqueue("q", [{"kind": "k"}])
    assert (len(mine.seen), len(theirs.seen)) == (1, 1), "the other zone took it at once, no wait"
    assert mine.seen[0].body == theirs.seen[0].body


# ---- the real gateway behind a connection-dropping proxy ---------------------------------------------
async def test_a_retried_enqueue_through_the_real_gateway_makes_one_job_per_id(
    gw: Any,
    token: str,
    topic_reader: Callable[..., list[Any]],
    make_relay: Callable[..., RelayService],
) -> None:
    """The first try reaches the real gateway (and Kafka), then its answer is lost; the retry carries the
    same ids, so Kafka holds each id twice and the engine keeps exactly one job per id."""

    async def forward(request: web.Request, raw: bytes) -> web.StreamResponse:
        keep = {k: v for k, v in request.headers.items() if k in ("Authorization", "Content-Type")}
        async with gw.http.request(request.method, gw.url + request.path_qs, data=raw, headers=keep) as r:
            return web.Response(status=r.status, body=await r.read(), content_type=r.content_type)

    async def forward_then_drop(request: web.Request, raw: bytes) -> web.StreamResponse:
        await forward(request, raw)
        return await drop(request, raw)

    n = 5
    async with (
        misbehaving(forward_then_drop, forward) as proxy,
        JobqClient([proxy.url], token, **FAST) as jq,
    ):
        ids = await jq.enqueue(gw.queue, [{"kind": "k", "args": i} for i in range(n)])
    assert len(proxy.seen) == 2
    assert proxy.seen[0].body == proxy.seen[1].body
    records = [decode(m.value()) for m in topic_reader(gw.topic, 2 * n)]
    assert sorted(e.id for e in records) == sorted(ids * 2), "both tries reached Kafka with the same ids"

    async with make_relay(gw.topic) as relay, JobqClient([gw.url], token) as jq:
        counts = relay.relays[0].counts
        # "read" is counted before the batch is written: wait for the write
        await relay.signals[gw.topic].batch.wait_for(
            lambda c: c.get("written", 0) + c.get("duplicate", 0) >= 2 * n
        )
        depth = (await jq.queue(gw.queue))["depth"]
        assert depth["pending"] == n, depth
        jobs = [await jq.get_job(gw.queue, i) for i in ids]
    assert all(j is not None and j["state"] == "pending" for j in jobs), jobs
    assert counts["written"] == n, counts
    assert counts.get("duplicate", 0) >= n, counts
