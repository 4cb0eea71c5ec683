"""Relays against the real Kafka, Redis and Consul of the session stack."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from jobq.stack.manager import Endpoints
from jqcore.kafka import AsyncProducer
from jqcore.settings import ConsulSettings, KafkaSettings, RedisSettings
from jqcore.state import Engine
from jqrelay.main import RelayService
from jqrelay.settings import RelaySettings


@pytest.fixture
def relay_settings(prefix: str) -> Callable[..., RelaySettings]:
    def make(topic: str, holder: str = "relay-a", **kw: Any) -> RelaySettings:
        return RelaySettings(
            topics=[topic],
            holder=holder,
            kv_prefix=f"jobq-test/{prefix}",
            group_prefix=f"{prefix}-relay",
            session_ttl_s=10,
            lock_delay_s=0,
            batch=kw.pop("batch", 200),
            **kw,
        )

    return make


@pytest.fixture
def make_relay(
    endpoints: Endpoints, relay_settings: Callable[..., RelaySettings]
) -> Callable[..., RelayService]:
    def make(topic: str, holder: str = "relay-a", **kw: Any) -> RelayService:
        return RelayService(
            relay_settings(topic, holder, **kw),
            KafkaSettings(bootstrap=endpoints.kafka_bootstrap),
            RedisSettings(url=endpoints.redis_url or ""),
            ConsulSettings(addr=endpoints.consul_addr),
        )

    return make


@pytest.fixture
async def producer(endpoints: Endpoints) -> AsyncIterator[AsyncProducer]:
    p = AsyncProducer(KafkaSettings(bootstrap=endpoints.kafka_bootstrap))
    yield p
    await asyncio.to_thread(p.close, 5.0)


@pytest.fixture
async def engine(endpoints: Endpoints) -> AsyncIterator[Engine]:
    client = aioredis.Redis.from_url(endpoints.redis_url or "")
    yield Engine(client)
    await client.aclose()


@pytest.fixture
def eventually() -> Callable[..., Awaitable[Any]]:
    """Await ``probe()`` until ``ok(value)`` (bounded); the relay runs in the background, so the test
    watches the state it produces rather than sleeping a guessed time."""

    async def wait(
        probe: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool], timeout_s: float = 60
    ) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            value = await probe()
            if ok(value):
                return value
            if loop.time() > deadline:
                raise AssertionError(f"condition not reached in {timeout_s}s; last value: {value!r}")
            await asyncio.sleep(0.05)

    return wait
