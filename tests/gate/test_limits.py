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
import orjson
import pytest
from aiohttp import web
from pydantic import SecretStr
from redis.exceptions import MaxConnectionsError

from jqcore.routing import RoutingSettings
from jqcore.settings.servers import RedisSettings
from jqengine import POOL_HOLDER, Engine, connect
from jqengine.redisconn import WaitingPool
from jqruntime.tokens import load_tokens
from jqstack.manager import Endpoints
from kafkagate import claims
from kafkagate.limits import BODY_BUDGET, BodyBudget
from kafkagate.main import GateService

POLLS = 300
OTHER = "other-team-token-0123456789"


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
    enqueues still answer; the 301st poll is a 429 with Retry-After; a job put in wakes one poll; a
    stopping gateway answers the others at once (empty), not at their deadline."""
    service = make_gate(routing_for(make_topic("jobs")), long_polls_max=POLLS, token_share=1.0)  # one token
    queue = f"{prefix}.idle"
    auth = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(headers=auth, connector=connector) as http:
        async with service:
            url = f"{service.url}/v1/queues"

            async def call(method: str, path: str, **kw: Any) -> tuple[int, Any, Any]:
                async with http.request(method, url + path, **kw) as r:
                    return r.status, await r.json(), r.headers

            claim = {"n": 1, "wait_ms": 30_000}  # the cap: every poll is still parked when the last parks
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
            await eventually(lambda: long_polls.parked, lambda n: n == POLLS - 1, timeout_s=20)
        answers = await asyncio.wait_for(asyncio.gather(*polls), 15)  # 30 s if the stop left them parked
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


async def test_one_token_parks_at_most_its_share_of_the_long_polls_and_others_still_park(
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
    put: Callable[..., Awaitable[str]],
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    """Review M7: with 4 slots and the default share (half), one token's third parked poll is a 429
    gateway_busy for it alone; another token's polls still park, and jobs put in wake them."""
    service = make_gate(routing_for(make_topic("jobs")), long_polls_max=4, tokens=[token, OTHER])
    queue = f"{prefix}.idle"
    connector = aiohttp.TCPConnector(limit=0)
    async with service, aiohttp.ClientSession(connector=connector) as http:

        async def claim(secret: str) -> tuple[int, Any, Any]:
            body, auth = {"n": 1, "wait_ms": 5000}, {"Authorization": f"Bearer {secret}"}
            async with http.post(f"{service.url}/v1/queues/{queue}/claims", json=body, headers=auth) as r:
                return r.status, await r.json(), r.headers

        polls = service.gate.long_polls
        greedy = [asyncio.create_task(claim(token)) for _ in range(2)]
        await eventually(lambda: polls.parked, lambda n: n == 2, timeout_s=20)
        status, body, headers = await claim(token)
        assert (status, body["error"]["code"], headers["Retry-After"]) == (429, "gateway_busy", "1"), body
        assert "for one token" in body["error"]["limit"]
        modest = asyncio.create_task(claim(OTHER))
        await eventually(lambda: polls.parked, lambda n: n == 3, timeout_s=20)
        job_id = await put(queue)
        await put(queue)
        await put(queue)
        answers = await asyncio.gather(*greedy, modest)
        assert [s for s, _, _ in answers] == [200, 200, 200], answers
        assert job_id in [j["id"] for _, b, _ in answers for j in b["jobs"]]
        assert polls.parked == 0


async def test_one_token_holds_at_most_its_share_of_the_body_budget_over_http(
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
) -> None:
    """Review M7: bodies of one token in flight stop at its share of the process's budget (429 for it
    alone); another token's body still fits; a body larger than a token's share can never fit (413)."""
    budget = 2 * 1024 * 1024
    service = make_gate(routing_for(make_topic("jobs")), inflight_body_bytes=budget, tokens=[token, OTHER])
    async with service, aiohttp.ClientSession() as http:
        url, small = f"{service.url}/v1/queues/{prefix}.q/jobs", {"kind": "k", "args": "y" * 5000}

        async def enqueue(secret: str, doc: Any) -> tuple[int, Any]:
            headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
            async with http.post(url, data=io.BytesIO(orjson.dumps(doc)), headers=headers) as r:
                return r.status, await r.json()

        held = held_budget(service)
        greedy = token_name(token)
        held.take(budget // 2 - 1000, greedy)  # the token's other bodies, being handled
        try:
            status, body = await enqueue(token, small)
            assert (status, body["error"]["code"]) == (429, "gateway_busy"), body
            assert "for one token" in body["error"]["limit"]
            status, body = await enqueue(OTHER, small)
            assert status == 202, body
        finally:
            held.give(budget // 2 - 1000, greedy)
        status, body = await enqueue(token, small)
        assert status == 202, body
        big = {"kind": "k", "args": "z" * (budget // 2 + 10)}
        status, body = await enqueue(OTHER, big)
        assert (status, body["error"]["code"]) == (413, "body_too_large"), body
        assert held.used == 0


async def test_one_holder_takes_at_most_its_share_of_the_redis_pool(endpoints: Endpoints) -> None:
    """Review M7: the gateway's requests share one pool (JOBQ_GATE_REDIS_CONNECTIONS); a token holding its
    share (POOL_HOLDER) waits for one of its own and then gets MaxConnectionsError (the gateway's 429
    gateway_busy), while another token still gets a connection at once."""
    client = connect(
        RedisSettings(url=endpoints.redis_url or ""), max_connections=4, wait_s=0.3, holder_max=2
    )
    pool = client.connection_pool
    assert isinstance(pool, WaitingPool)
    try:

        async def take(holder: str | None) -> Any:
            POOL_HOLDER.set(holder)  # (this task's own context)
            return await pool.get_connection()

        first = [await asyncio.create_task(take("greedy")) for _ in range(2)]
        assert pool.held_by("greedy") == 2
        with pytest.raises(MaxConnectionsError, match="its share of 2"):
            await asyncio.create_task(take("greedy"))
        other = await asyncio.create_task(take("modest"))
        assert pool.held_by("modest") == 1
        waiting = asyncio.create_task(take("greedy"))
        await pool.release(first[0])  # one of its own comes back: the waiting command gets it
        again = await waiting
        assert pool.held_by("greedy") == 2
        unlimited = await asyncio.create_task(take(None))  # nobody's: only the pool's own limit
        for connection in (first[1], other, again, unlimited):
            await pool.release(connection)
        assert (pool.held_by("greedy"), pool.held_by("modest")) == (0, 0)
    finally:
        await client.aclose()


def token_name(secret: str) -> str:
    found = load_tokens(gate=[SecretStr(secret)]).match(secret)
    assert found is not None
    return found.name


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
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jobs of ~0.7 MB (~1.6 MB each in a reply) under a cap of 4 MiB: a claim of 10 gets 2; the others
    are pending again with their attempt refunded, and the next claims get them."""
    monkeypatch.setattr(claims, "CLAIM_REPLY_MAX_BYTES", 4 << 20)
    service = make_gate(routing_for(make_topic("jobs")))
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
                depth = await engine.reads.depth(q)
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
    assert f"{prefix}.made-up" not in await engine.reads.queues()
