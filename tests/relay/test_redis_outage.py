"""Redis stopped under load: the relay writes nothing, commits nothing for unwritten jobs, retries with
backoff, and once Redis is back everything arrives exactly once; the gateway side (Kafka) is untouched.

What the relay does meanwhile depends on timing, and the test accepts both: if a batch was read before
the relay noticed the outage, it holds that batch and retries writing it (``read`` > 100, never higher
than one batch allows); if it noticed while idle (its memory guard asks Redis every 0.5 s), the guard
waits for Redis with backoff, or a term that starts during the outage fails and starts over. Each of
these is a stall the relay signals (``RelaySignals.stalled``, ``GuardSignals.unreachable``); the outage
lasts :data:`OUTAGE_ROUNDS` of them under load. How much it reads depends on batch boundaries, so no
count of reads is asserted; the guarantees are."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from jqcore.envelope import encode, new_envelope, record_key
from jqcore.testsignal import TestSignal
from jqengine import Engine
from jqrelay.elector import Role
from jqrelay.main import RelayService
from jqruntime.kafka import AsyncProducer, Record
from jqstack.manager import Endpoints
from jqstack.supervise import alive, wait_until
from jqstack.testing.backends import NativeTestStack, SessionStack

pytestmark = [pytest.mark.faults, pytest.mark.kills_servers]

OUTAGE_ROUNDS = 5
"""How many times the relay must meet Redis's absence (a write retried after its backoff, a term that
failed, a memory sample that found Redis away) before Redis comes back: past the first backoffs. On the
held batch's path the waits double from 0.1 s (0.1 + 0.2 + 0.4 + 0.8 + 1.6 s); eight rounds reached the
5 s cap and made the test 22 s instead of 5 without testing more."""
PER_ROUND = 75
"""Jobs produced into Kafka in each round of the outage (load never stops)."""


def next_stall(*stalls: TestSignal[Any]) -> asyncio.Future[None]:
    """Ends at the first stall any of ``stalls`` (test signals) reports after this call."""
    return asyncio.ensure_future(_first([sig.wait_for(after=sig.mark()) for sig in stalls]))


async def _first(waits: list[Coroutine[Any, Any, Any]]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for t in done:
        t.result()  # a wait that timed out names its signal


async def test_redis_down_commits_nothing_then_everything_arrives(
    stack: SessionStack,
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    offsets: Callable[..., Any],
) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("native stack only")
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    redis_server = stack.stack.of_kind("redis")[0]

    async def depth() -> int:
        try:
            return (await engine.reads.depth(queue)).pending
        except RedisConnectionError:  # the test's own connection from before the restart: try anew
            return (await engine.reads.depth(queue)).pending

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
        # Marked before the stop: the memory guard (it asks Redis every 0.5 s) may meet the outage
        # while this test still waits for Redis to exit.
        stalls = (relay.signals[topic].stalled, relay.guard_signals.unreachable)
        first_stall = next_stall(*stalls)
        os.kill(redis_server.pid, signal.SIGTERM)  # a clean stop: Redis flushes its AOF
        # in a thread: the relay under test runs on this event loop and must not be frozen meanwhile
        await asyncio.to_thread(
            wait_until, lambda: not alive(redis_server.pid), what="Redis to stop", timeout_s=60
        )
        try:
            await send(100, 200)  # Kafka keeps accepting while Redis is away
            await first_stall  # the relay met the outage (which way depends on timing: see above)
            for rnd in range(OUTAGE_ROUNDS):  # the outage itself, under load; the relay retries meanwhile
                await send(300 + rnd * PER_ROUND, PER_ROUND)
                await next_stall(*stalls)
            assert counts.get("written", 0) == 100, "nothing written while Redis is down"
            found = await relay.readiness()  # /readyz's judgement meanwhile
            assert [p.code for p in found.problems][:1] == ["redis_unreachable"], found.problems
            assert (await offsets(topic))[0] == before[0], "no offset committed for jobs Redis never took"
        finally:
            await asyncio.to_thread(stack.stack.up, 180)
        total = 300 + OUTAGE_ROUNDS * PER_ROUND
        await committed.wait_for(lambda n: n >= total, 180)
        assert (await offsets(topic))[0] == total
        # Exactly once: every job written once by the relay, none seen twice (the held batch was
        # written once, not re-read), and every record read is accounted for.
        assert counts.get("written", 0) == total, counts
        assert counts.get("duplicate", 0) == 0, counts
        assert counts["read"] == counts["written"] + counts.get("duplicate", 0), counts
        assert await depth() == total, "nothing stored twice"
        assert (await relay.readiness()).problems == [], "ready again once Redis is back"
