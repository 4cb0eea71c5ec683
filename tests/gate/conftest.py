"""A real gateway (GateService on a free port) in front of the session's real Kafka and Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from confluent_kafka import Consumer, TopicPartition

from jobq.stack.manager import Endpoints
from jqcore.envelope import new_envelope
from jqcore.routing import Route, RoutingSettings
from jqcore.state import Engine
from kafkagate.main import GateService


@dataclass
class Gw:
    service: GateService
    http: aiohttp.ClientSession
    topic: str
    queue: str

    @property
    def url(self) -> str:
        return self.service.url

    async def call(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.http.request(method, self.url + path, **kw) as resp:
            body = await resp.json() if resp.content_type == "application/json" else await resp.text()
            return resp.status, body


@pytest.fixture
def routing_for(prefix: str) -> Callable[[str], RoutingSettings]:
    def make(topic: str) -> RoutingSettings:
        return RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")

    return make


@pytest.fixture
async def gw(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
) -> AsyncIterator[Gw]:
    topic = make_topic("jobs", partitions=3)
    service = make_gate(routing_for(topic))
    async with service, aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
        yield Gw(service, http, topic, f"{prefix}.q")


def read_topic(bootstrap: str, topic: str, n: int, timeout_s: float = 30) -> list[Any]:
    """Every record of ``topic`` from the start until ``n`` were read (or the deadline: fewer)."""
    import time

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.read", "log_level": 0})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.19):
                assert msg.error() is None, msg.error()
                out.append(msg)
    finally:
        consumer.close()
    return out


def end_offsets(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.ends", "log_level": 0})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
    finally:
        consumer.close()


@pytest.fixture
def topic_reader(endpoints: Endpoints) -> Callable[..., list[Any]]:
    return lambda topic, n, timeout_s=30: read_topic(endpoints.kafka_bootstrap, topic, n, timeout_s)


@pytest.fixture
def topic_end(endpoints: Endpoints) -> Callable[[str], int]:
    return lambda topic: end_offsets(endpoints.kafka_bootstrap, topic)


@pytest.fixture
async def engine(endpoints: Endpoints) -> AsyncIterator[Engine]:
    client = aioredis.Redis.from_url(endpoints.redis_url or "")
    yield Engine(client)
    await client.aclose()


Put = Callable[..., Any]


@pytest.fixture
def put(engine: Engine) -> Put:
    """``await put(queue, kind="k", **envelope options)``: a job put into Redis as the relay would."""

    async def store(queue: str, kind: str = "k", **kw: Any) -> str:
        env = new_envelope(queue, kind, kw.pop("args", None), **kw)
        await engine.enqueue_batch([env])
        return env.id

    return store
