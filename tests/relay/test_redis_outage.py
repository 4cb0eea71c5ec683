"""Redis stopped under load: the relay writes nothing, commits nothing for unwritten jobs, retries with
backoff, and once Redis is back everything arrives exactly once; the gateway side (Kafka) is untouched.

What the relay does meanwhile depends on timing, and the test accepts both: if a batch was read before
the relay noticed the outage, it holds that batch and retries writing it (``read`` > 100, never higher
than one batch allows); if it noticed while idle (its memory guard asks Redis every 0.5 s), the guard
waits for Redis with backoff ("Redis unreachable; relaying waits for it"), or a term that starts during
the outage fails and starts over ("relay loop failed"). How much it reads depends on
batch boundaries, so no count of reads is asserted; the guarantees are."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

import jqrelay.backpressure
import jqrelay.topic
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.kafka import AsyncProducer, Record
from jqcore.state import Engine
from jqrelay.elector import Role
from jqrelay.main import RelayService
from jqstack.manager import Endpoints
from jqstack.supervise import alive, wait_until
from jqstack.testing.backends import NativeTestStack, SessionStack

pytestmark = [pytest.mark.faults, pytest.mark.kills_servers]

OUTAGE_S = 30
PER_SECOND = 20
"""Jobs produced into Kafka every second of the outage (load never stops)."""


class LogRecorder:
    """Stands in for a module's structlog logger: forwards every call and remembers the event names
    (independent of how, or whether, structlog was configured in this process)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.events: list[str] = []

    def __getattr__(self, level: str) -> Callable[..., Any]:
        method = getattr(self.inner, level)

        def record(event: str, *args: Any, **kw: Any) -> Any:
            self.events.append(event)
            return method(event, *args, **kw)

        return record


async def test_redis_down_commits_nothing_then_everything_arrives(
    stack: SessionStack,
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Callable[..., Awaitable[Any]],
    monkeypatch: pytest.MonkeyPatch,
    offsets: Callable[..., Any],
) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("native stack only")
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    redis_server = stack.stack.of_kind("redis")[0]
    relay_log = LogRecorder(jqrelay.topic.log)
    monkeypatch.setattr(jqrelay.topic, "log", relay_log)
    guard_log = LogRecorder(jqrelay.backpressure.log)
    monkeypatch.setattr(jqrelay.backpressure, "log", guard_log)

    def met_outage() -> int:
        waits = guard_log.events.count("Redis unreachable; relaying waits for it")
        return relay_log.events.count("relay loop failed") + waits

    async def depth() -> int:
        try:
            return (await engine.depth(queue)).pending
        except RedisConnectionError:  # the test's own connection from before the restart: try anew
            return (await engine.depth(queue)).pending

    async def send(first: int, n: int) -> None:
        envs = [new_envelope(queue, "k", i, id=f"o{i}") for i in range(first, first + n)]
        await producer.produce_many([Record(topic, encode(e), record_key(e)) for e in envs])

    async with make_relay(topic) as relay:
        counts = relay.relays[0].counts
        await relay.relays[0].elector.wait_role(Role.LEADER, timeout_s=60)
        committed = relay.signals[topic].committed
        await send(0, 100)
        await committed.wait_for(lambda n: n >= 100)  # Kafka confirmed the commit of the written batch
        assert await depth() == 100
        before = await offsets(topic)
        assert before[0] == 100
        assert counts.get("written", 0) == 100
        assert redis_server.pid is not None
        # Counted before the stop: the memory guard (it asks Redis every 0.5 s) may meet the outage
        # while this test still waits for Redis to exit, and it says so once.
        failures_before = met_outage()
        os.kill(redis_server.pid, signal.SIGTERM)  # a clean stop: Redis flushes its AOF
        # in a thread: the relay under test runs on this event loop and must not be frozen meanwhile
        await asyncio.to_thread(
            wait_until, lambda: not alive(redis_server.pid), what="Redis to stop", timeout_s=60
        )
        try:
            await send(100, 200)  # Kafka keeps accepting while Redis is away
            # The sign that the relay met the outage: it holds a batch it cannot write, its memory
            # guard waits for Redis, or its term loop fails and starts over. It must not write or commit.
            # None of these is a step it completes, so their traces are watched.
            await eventually(
                lambda: (counts.get("read", 0), met_outage()),
                lambda v: v[0] > 100 or v[1] > failures_before,
                60,
            )
            for second in range(OUTAGE_S):  # the outage itself, under load; the relay retries meanwhile
                await send(300 + second * PER_SECOND, PER_SECOND)
                await asyncio.sleep(1)
            assert counts.get("written", 0) == 100, "nothing written while Redis is down"
            assert (await offsets(topic))[0] == before[0], "no offset committed for jobs Redis never took"
        finally:
            await asyncio.to_thread(stack.stack.up, 180)
        total = 300 + OUTAGE_S * PER_SECOND
        await committed.wait_for(lambda n: n >= total, 180)
        assert (await offsets(topic))[0] == total
        # Exactly once: every job written once by the relay, none seen twice (the held batch was
        # written once, not re-read), and every record read is accounted for.
        assert counts.get("written", 0) == total, counts
        assert counts.get("duplicate", 0) == 0, counts
        assert counts["read"] == counts["written"] + counts.get("duplicate", 0), counts
        assert await depth() == total, "nothing stored twice"
