"""Redis stopped under load: the relay writes nothing, commits nothing for unwritten jobs, retries with
backoff, and once Redis is back everything arrives; the gateway side (Kafka) is untouched throughout."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from redis.exceptions import ConnectionError as RedisConnectionError

from jobq.stack.backends import NativeTestStack, SessionStack
from jobq.stack.manager import Endpoints
from jobq.stack.procs import alive, wait_until
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.kafka import AsyncProducer, Record
from jqcore.state import Engine, reads
from jqrelay.elector import Role
from jqrelay.main import RelayService

pytestmark = [pytest.mark.faults, pytest.mark.kills_servers]

OUTAGE_S = 30
PER_SECOND = 20
"""Jobs produced into Kafka every second of the outage (load never stops)."""


def committed(endpoints: Endpoints, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": group, "log_level": 0})
    try:
        parts = [TopicPartition(topic, p) for p in c.list_topics(topic, timeout=10).topics[topic].partitions]
        return sum(max(0, tp.offset) for tp in c.committed(parts, timeout=10))
    finally:
        c.close()


async def test_redis_down_commits_nothing_then_everything_arrives(
    stack: SessionStack,
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("native stack only")
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    group = f"{prefix}-relay.{topic}"
    redis_server = stack.stack.of_kind("redis")[0]

    async def depth() -> int:
        try:
            return (await reads.depth(engine.client, queue)).pending
        except RedisConnectionError:  # the test's own connection from before the restart
            return -1

    async def send(first: int, n: int) -> None:
        envs = [new_envelope(queue, "k", i, id=f"o{i}") for i in range(first, first + n)]
        await producer.produce_many([Record(topic, encode(e), record_key(e)) for e in envs])

    async with make_relay(topic) as relay:
        await relay.relays[0].elector.wait_role(Role.LEADER, timeout_s=30)
        await send(0, 100)
        await eventually(depth, lambda n: n == 100)
        before = await eventually(
            lambda: asyncio.to_thread(committed, endpoints, group, topic), lambda c: c == 100
        )
        assert redis_server.pid is not None
        os.kill(redis_server.pid, signal.SIGTERM)  # a clean stop: Redis flushes its AOF
        wait_until(lambda: not alive(redis_server.pid), what="Redis to stop", timeout_s=20)
        try:
            await send(100, 200)  # Kafka keeps accepting while Redis is away
            read_during = await eventually(
                lambda: _value(relay.relays[0].counts.get("read", 0)), lambda n: n == 300, 30
            )
            assert read_during == 300
            for second in range(OUTAGE_S):  # the outage itself, under load; the relay retries meanwhile
                await send(300 + second * PER_SECOND, PER_SECOND)
                await asyncio.sleep(1)
            assert await asyncio.to_thread(committed, endpoints, group, topic) == before, (
                "no offset committed for jobs Redis never took"
            )
        finally:
            await asyncio.to_thread(stack.stack.up)
        total = 300 + OUTAGE_S * PER_SECOND
        await eventually(depth, lambda n: n == total, 90)
        await eventually(
            lambda: asyncio.to_thread(committed, endpoints, group, topic), lambda c: c == total, 60
        )


async def _value(v: Any) -> Any:
    return v
