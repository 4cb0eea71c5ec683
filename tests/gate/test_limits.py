"""The gateway's own limits over HTTP, on the session's real Kafka and Redis (issue 35): parked
long-polls do not starve other requests, and each limit past its budget is a 429 ``gateway_busy`` with
``Retry-After`` (a request that could never fit: 413)."""

from __future__ import annotations

import asyncio
import gzip
import io
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from jqcore.routing import RoutingSettings
from jqengine import Engine
from kafkagate.limits import BODY_BUDGET, BodyBudget
from kafkagate.main import GateService

POLLS = 300


async def test_parked_long_polls_leave_every_other_request_answering(
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
    put: Callable[..., Awaitable[str]],
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    """300 long-poll claims parked on an idle queue (more than redis-py's default pool of 100): reads and
    enqueues still answer; the 301st poll is a 429 with Retry-After; a job put in wakes one poll."""
    service = make_gate(routing_for(make_topic("jobs")), long_polls_max=POLLS)
    queue = f"{prefix}.idle"
    auth = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=0)
    async with service, aiohttp.ClientSession(headers=auth, connector=connector) as http:
        url = f"{service.url}/v1/queues"

        async def call(method: str, path: str, **kw: Any) -> tuple[int, Any, Any]:
            async with http.request(method, url + path, **kw) as r:
                return r.status, await r.json(), r.headers

        claim = {"n": 1, "wait_ms": 3000}
        polls = [asyncio.create_task(call("POST", f"/{queue}/claims", json=claim)) for _ in range(POLLS)]
        long_polls = service.gate.long_polls
        await eventually(lambda: long_polls.parked, lambda n: n == POLLS, timeout_s=20)

        status, body, headers = await call("POST", f"/{queue}/claims", json=claim)
        assert status == 429, body
        assert body["error"]["code"] == "gateway_busy"
        assert headers["Retry-After"] == "1"

        reads = await asyncio.gather(*(call("GET", f"/{queue}") for _ in range(30)))
        assert [s for s, _, _ in reads] == [200] * 30, [b for s, b, _ in reads if s != 200][:3]
        status, body, _ = await call("POST", f"/{prefix}.other/jobs", json={"kind": "k"})
        assert status == 202, body
        status, body, _ = await call("POST", f"/{prefix}.other/claims", json={"n": 1})
        assert status == 200, body
        assert long_polls.parked == POLLS

        job_id = await put(queue)
        answers = await asyncio.gather(*polls)
        assert {s for s, _, _ in answers} == {200}, [b for s, b, _ in answers if s != 200][:3]
        claimed = [j["id"] for _, b, _ in answers for j in b["jobs"]]
        assert claimed == [job_id]
        assert long_polls.parked == 0


async def test_body_budget_refuses_what_does_not_fit_now_and_what_never_fits(
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
) -> None:
    """A body is held against the process's budget while it is handled: a body that would pass the budget
    is a 429 gateway_busy with Retry-After; one larger than the budget alone is a 413 (never retried)."""
    budget = 1024 * 1024
    service = make_gate(
        routing_for(make_topic("jobs")), inflight_body_bytes=budget, max_body_bytes=2 * budget
    )
    auth = {"Authorization": f"Bearer {token}"}
    async with service, aiohttp.ClientSession(headers=auth) as http:
        url = f"{service.url}/v1/queues/{prefix}.q/jobs"
        big = b'{"kind": "k", "args": "' + b"x" * (budget + 10) + b'"}'
        async with http.post(url, data=io.BytesIO(big), headers={"Content-Type": "application/json"}) as r:
            body = await r.json()
            assert r.status == 413, body
            assert body["error"]["code"] == "body_too_large"
            assert "Retry-After" not in r.headers

        budget_now = held_budget(service)  # other bodies being handled hold most of the budget
        budget_now.take(budget - 1000)
        try:
            small = gzip.compress(b'{"kind": "k", "args": "' + b"y" * 5000 + b'"}')
            headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
            async with http.post(url, data=small, headers=headers) as r:
                body = await r.json()
                assert r.status == 429, body
                assert body["error"]["code"] == "gateway_busy"
                assert r.headers["Retry-After"] == "1"
        finally:
            budget_now.give(budget - 1000)
        async with http.post(url, data=small, headers=headers) as r:
            assert r.status == 202, await r.text()
        assert budget_now.used == 0


def held_budget(service: GateService) -> BodyBudget:
    runner = service._runner
    assert runner is not None
    assert isinstance(runner.app, web.Application)
    return runner.app[BODY_BUDGET]


async def test_a_claim_reply_is_capped_in_bytes_and_the_rest_stays_claimable(
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
    engine: Engine,
    put: Callable[..., Awaitable[str]],
) -> None:
    """Jobs of ~0.7 MB (~1.6 MB each in a reply) under the smallest cap (4 MiB): a claim of 10 gets 2;
    the others are pending again with their attempt refunded, and the next claims get them."""
    service = make_gate(routing_for(make_topic("jobs")), claim_reply_max_bytes=4 << 20)
    q = f"{prefix}.big"
    ids = {await put(q, args="z" * 700_000) for _ in range(5)}
    auth = {"Authorization": f"Bearer {token}"}
    async with service, aiohttp.ClientSession(headers=auth) as http:
        got: list[list[dict[str, Any]]] = []
        for _ in range(3):
            async with http.post(f"{service.url}/v1/queues/{q}/claims", json={"n": 10}) as r:
                assert r.status == 200, await r.text()
                got.append((await r.json())["jobs"])
            if len(got) == 1:
                depth = await engine.depth(q)
                assert (depth.pending, depth.running) == (3, 2)
    assert [len(jobs) for jobs in got] == [2, 2, 1]
    assert {j["id"] for jobs in got for j in jobs} == ids
    assert [j["attempt"] for jobs in got for j in jobs] == [1] * 5


async def test_cancel_tombstones_take_only_valid_ids_and_short_reasons(gw: Any) -> None:
    """A cancel of a job Redis has not seen leaves a tombstone: its id must be one an enqueue could give
    and its reason is capped, so a client cannot grow Redis with arbitrary keys or text."""
    q = gw.queue
    status, body = await gw.call("DELETE", f"/v1/queues/{q}/jobs/{'x' * 129}")
    assert (status, body["error"]["code"]) == (400, "id_invalid")
    status, body = await gw.call("DELETE", f"/v1/queues/{q}/jobs/ok-1", params={"reason": "r" * 1001})
    assert (status, body["error"]["code"]) == (400, "reason_too_long")
    status, body = await gw.call("DELETE", f"/v1/queues/{q}/jobs/ok-1", params={"reason": "r" * 1000})
    assert status == 200, body


async def test_a_queue_outside_the_allowlist_is_refused_and_never_created(
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
    engine: Engine,
) -> None:
    routing = routing_for(make_topic("jobs")).model_copy(update={"queues_allowed": [f"{prefix}.ok.*"]})
    auth = {"Authorization": f"Bearer {token}"}
    async with make_gate(routing) as service, aiohttp.ClientSession(headers=auth) as http:

        async def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
            async with http.post(service.url + path, json=body) as r:
                return r.status, await r.json()

        status, body = await post(f"/v1/queues/{prefix}.made-up/jobs", {"kind": "k"})
        assert (status, body["error"]["code"]) == (403, "queue_not_allowed"), body
        node = {"name": "b", "kind": "k", "queue": f"{prefix}.made-up"}
        graph = {"id": f"{prefix}-g", "queue": f"{prefix}.ok.g", "nodes": [{"name": "a", "kind": "k"}, node]}
        status, body = await post("/v1/graphs", graph)
        assert (status, body["error"]["code"]) == (403, "queue_not_allowed"), body
        status, body = await post(f"/v1/queues/{prefix}.ok.q/jobs", {"kind": "k"})
        assert status == 202, body
    assert f"{prefix}.made-up" not in await engine.queues()
