"""The gateway's history reads and readiness under load (security review M8, L1, L4), on the session's
real Kafka and Redis: history queries run on a pool of their own (slots, half per token, 429
``gateway_busy`` past them), an unknown job's archive miss is remembered, ``/readyz`` asks Kafka at most
once a second and answers codes, never what Kafka's client said."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from jqcore.routing import RoutingSettings
from jqcore.settings.pipeline import HistorySettings
from jqruntime.stores.history import SearchPage
from kafkagate.main import GateService
from kafkagate.state import READY_TTL_S

OTHER = "other-token-0123456789"


@pytest.fixture
async def gw_history(
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
    tmp_path: Path,
) -> AsyncIterator[tuple[GateService, aiohttp.ClientSession, str]]:
    """A gateway whose history tables exist (empty), a session with the test's token, a queue."""
    root = tmp_path / "history"
    root.mkdir()
    service = make_gate(routing_for(make_topic("jobs")), history=HistorySettings(path=str(root)))
    async with service, aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
        yield service, http, f"{prefix}.q"


async def _call(http: aiohttp.ClientSession, url: str, token: str) -> tuple[int, Any, Any]:
    async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as r:
        return r.status, await r.json(), r.headers


async def test_history_searches_hold_at_most_their_slots_and_half_of_them_per_token(
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
    tmp_path: Path,
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    root = tmp_path / "history"
    root.mkdir()
    history = HistorySettings(path=str(root), query_slots=2)
    service = make_gate(routing_for(make_topic("jobs")), history=history, tokens=[token, OTHER])
    release = threading.Event()
    started: list[dict[str, Any]] = []

    def slow_search(**kw: Any) -> SearchPage:  # a search that takes as long as the test wants
        started.append(kw)
        release.wait(20)
        return SearchPage([], None)

    async with service, aiohttp.ClientSession() as http:
        store = service.gate.history()
        assert store is not None
        store.search = slow_search  # type: ignore[method-assign]
        url = f"{service.url}/v1/jobs?queue={prefix}.q"
        try:
            first = asyncio.create_task(_call(http, url, token))
            await eventually(lambda: len(started), lambda n: n == 1, timeout_s=10)
            status, body, headers = await _call(http, url, token)  # the token's share (1 of 2) is taken
            assert (status, body["error"]["code"]) == (429, "gateway_busy"), body
            assert headers["Retry-After"] == "1"
            other = asyncio.create_task(_call(http, url, OTHER))  # another token has the other slot
            await eventually(lambda: len(started), lambda n: n == 2, timeout_s=10)
            status, body, _ = await _call(http, url, OTHER)
            assert (status, body["error"]["code"]) == (429, "gateway_busy"), body
            async with http.get(f"{service.url}/readyz") as r:  # never waits behind history queries
                assert r.status == 200, await r.text()
        finally:
            release.set()
        assert [s for s, _, _ in await asyncio.gather(first, other)] == [200, 200]
        assert len(started) == 2


async def test_an_unknown_job_asks_the_history_once_per_ttl(gw_history: Any) -> None:
    service, http, queue = gw_history
    store = service.gate.history()
    assert store is not None
    asked: list[tuple[str, str]] = []
    current = store.current

    def counted(q: str, job_id: str) -> Any:
        asked.append((q, job_id))
        return current(q, job_id)

    store.current = counted  # type: ignore[method-assign]
    for _ in range(3):
        async with http.get(f"{service.url}/v1/queues/{queue}/jobs/no-such-job") as r:
            assert (r.status, (await r.json())["error"]["code"]) == (404, "job_not_found")
    async with http.get(f"{service.url}/v1/queues/{queue}/jobs/another") as r:
        assert r.status == 404
    assert asked == [(queue, "no-such-job"), (queue, "another")]


async def test_readyz_asks_kafka_at_most_once_a_second(gw_history: Any) -> None:
    service, http, _ = gw_history
    producer = service.gate.producer("all")
    asked: list[str] = []
    partitions = producer.partitions

    def counted(topic: str, timeout_s: float = 5.0) -> list[int]:
        asked.append(topic)
        return partitions(topic, timeout_s)

    producer.partitions = counted  # type: ignore[method-assign]
    answers = await asyncio.gather(*(http.get(f"{service.url}/readyz") for _ in range(10)))
    assert [r.status for r in answers] == [200] * 10
    for r in answers:
        r.release()
    async with http.get(f"{service.url}/readyz") as r:
        assert r.status == 200
    assert len(asked) == 1, asked
    gate = service.gate
    assert gate._ready is not None
    gate._ready = (gate._ready[0] - READY_TTL_S, gate._ready[1])  # the answer a second old, not slept for
    async with http.get(f"{service.url}/readyz") as r:
        assert r.status == 200
    assert len(asked) == 2, "asked again once the answer is a second old"


async def test_readyz_names_codes_never_kafka_client_text(
    prefix: str, make_gate: Callable[..., GateService]
) -> None:
    topic = f"{prefix}.jobs"
    dead = make_gate(RoutingSettings(default_topic=topic), bootstrap="127.0.0.1:1", produce_timeout_ms=1000)
    async with dead as svc, aiohttp.ClientSession() as http, http.get(f"{svc.url}/readyz") as r:
        body = await r.json()
    assert (r.status, body["error"]["code"]) == (503, "kafka_not_ready")
    assert body["error"]["topics"] == {topic: "kafka_unavailable"}
    text = str(body)
    assert "127.0.0.1:1" not in text
    assert "metadata" not in text.lower()
