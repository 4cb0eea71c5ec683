"""The relay end to end on the real stack: Kafka → Redis with fences, commits, dead letters, takeover,
live rate limits and shadow mode."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import consul
from confluent_kafka import Consumer, TopicPartition

from jobq.stack.manager import Endpoints
from jqcore.envelope import decode, encode, new_envelope, record_key
from jqcore.kafka import AsyncProducer, Record
from jqcore.state import Engine, reads
from jqrelay.elector import Role
from jqrelay.main import RelayService

Eventually = Callable[..., Awaitable[Any]]


async def produce_jobs(producer: AsyncProducer, topic: str, queue: str, n: int, **kw: Any) -> list[str]:
    envs = [new_envelope(queue, "k", {"i": i}, **kw) for i in range(n)]
    await producer.produce_many([Record(topic, encode(e), record_key(e)) for e in envs])
    return [e.id for e in envs]


async def pending(engine: Engine, queue: str) -> int:
    return (await reads.depth(engine.client, queue)).pending


async def test_relay_writes_jobs_dead_letters_bad_records_and_commits_after_redis(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Eventually,
    offsets: Callable[..., Any],
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    ids = await produce_jobs(producer, topic, queue, 300)
    dup = new_envelope(queue, "k", None, id=ids[0])
    bad = [Record(topic, b"{not json", b"x"), Record(topic, b'{"v": 1, "id": "no-queue"}', b"y")]
    await producer.produce_many([Record(topic, encode(dup), record_key(dup)), *bad])
    async with make_relay(topic) as relay:
        await eventually(lambda: pending(engine, queue), lambda n: n == 300)
        group = f"{prefix}-relay.{topic}"
        await eventually(lambda: offsets(group, topic), lambda t: t[0] == t[1] == 303)
        # Committed means written, dead-lettered and counted. The guarantees, not one particular run: each
        # job written exactly once, and every record read accounted for. (A term that ends early, e.g.
        # the loop starved past its trust window on a loaded machine, re-reads its uncommitted batch:
        # more reads, duplicates and dead letters, never a second write.)
        counts = relay.relays[0].counts
        assert counts["written"] == 300, counts
        duplicate, dead = counts.get("duplicate", 0), counts.get("dead", 0)
        assert counts["read"] == counts["written"] + duplicate + dead, counts
        assert duplicate >= 1, counts
        assert dead >= 2, counts
    dead = await asyncio.to_thread(read_all, endpoints, f"{topic}.dead", 2)
    reasons = {dict(m.headers())["jobq-reason"].decode().split(":")[0] for m in dead}
    assert reasons == {"envelope_invalid", "envelope_not_json"}
    assert {m.value() for m in dead} == {b"{not json", b'{"v": 1, "id": "no-queue"}'}, "bytes unchanged"


def read_all(endpoints: Endpoints, topic: str, n: int) -> list[Any]:
    c = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": f"{topic}.r", "log_level": 0})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[Any] = []
    try:
        for _ in range(150):
            out += [m for m in c.consume(100, 0.19) if m.error() is None]
            if len(out) >= n:
                break
    finally:
        c.close()
    return out


async def test_two_relays_one_holder_and_a_fenced_takeover(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Eventually,
    offsets: Callable[..., Any],
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    a, b = make_relay(topic, "relay-a"), make_relay(topic, "relay-b")
    async with a, b:
        ea, eb = a.relays[0].elector, b.relays[0].elector
        await eventually(lambda: _roles(ea, eb), lambda r: sorted(r) == ["leader", "waiting"])
        first, second = (a, b) if ea.role is Role.LEADER else (b, a)
        await produce_jobs(producer, topic, queue, 100)
        await eventually(lambda: pending(engine, queue), lambda n: n == 100)
        group = f"{prefix}-relay.{topic}"
        await eventually(  # written *and* committed: the next holder starts after them
            lambda: offsets(group, topic), lambda t: t[0] == t[1] == 100
        )
        fence_before = first.relays[0].elector.trusted_term()
        assert fence_before is not None
        await first.stop()  # releases the lock: the other takes over at once (lock-delay 0 here)
        await second.relays[0].elector.wait_role(Role.LEADER, timeout_s=60)
        term = second.relays[0].elector.trusted_term()
        assert term is not None
        assert term.fence > fence_before.fence
        await produce_jobs(producer, topic, queue, 100)
        await eventually(lambda: pending(engine, queue), lambda n: n == 200)
        assert second.relays[0].counts.get("duplicate", 0) == 0, "offsets committed: nothing re-read"


async def _roles(*electors: Any) -> list[str]:
    return [e.role.value for e in electors]


async def test_live_rate_limit_pauses_and_resumes_without_restart(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Eventually,
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    host, port = endpoints.consul_addr.rsplit(":", 1)
    kv = consul.Consul(host=host, port=int(port)).kv
    rate_key = f"jobq-test/{prefix}/rates/{topic}"
    kv.put(rate_key, "0")
    async with make_relay(topic) as relay:
        limit = relay.relays[0].limit
        await eventually(lambda: _value(limit.rate), lambda r: r == 0)
        await relay.relays[0].elector.wait_role(Role.LEADER, timeout_s=60)
        await produce_jobs(producer, topic, queue, 50)
        await asyncio.sleep(1.0)  # the one bounded wait: proving *absence* needs a window
        assert await pending(engine, queue) == 0, "rate 0 pauses the relay"
        kv.put(rate_key, "20")
        await eventually(lambda: _value(limit.rate), lambda r: r == 20)
        await eventually(lambda: pending(engine, queue), lambda n: n >= 10, 60)
        kv.put(rate_key, "")  # unlimited
        await eventually(lambda: pending(engine, queue), lambda n: n == 50, 60)


async def _value(v: Any) -> Any:
    return v


async def test_a_queue_rate_limit_holds_that_queue_live_and_the_topic_keeps_flowing_without_it(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Eventually,
) -> None:
    topic, slow, fast = make_topic("jobs"), f"{prefix}.slow", f"{prefix}.fast"
    host, port = endpoints.consul_addr.rsplit(":", 1)
    kv = consul.Consul(host=host, port=int(port)).kv
    slow_key = f"jobq-test/{prefix}/queue-rates/{slow}"
    kv.put(slow_key, "0")
    async with make_relay(topic) as relay:
        limits = relay.relays[0].queue_limits
        await eventually(lambda: _value(limits.rates()), lambda r: r == {slow: 0})
        await relay.relays[0].elector.wait_role(Role.LEADER, timeout_s=60)
        await produce_jobs(producer, topic, fast, 40)
        await eventually(lambda: pending(engine, fast), lambda n: n == 40, 60)  # no slow job: not held
        await produce_jobs(producer, topic, slow, 20)
        await eventually(lambda: _value(limits.waiting), lambda q: q == slow, 60)
        assert await pending(engine, slow) == 0, "a paused queue's jobs are held at the relay"
        assert relay.relays[0].counts.get("written") == 40
        kv.put(slow_key, "25")
        await eventually(lambda: pending(engine, slow), lambda n: n == 20, 60)
        kv.delete(slow_key)
        await eventually(lambda: _value(limits.rates()), lambda r: r == {})
        await produce_jobs(producer, topic, slow, 10)
        await eventually(lambda: pending(engine, slow), lambda n: n == 30, 60)
    assert relay.relays[0].counts.get("written") == 70


async def test_shadow_mode_reads_and_counts_but_writes_nothing(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Eventually,
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    await produce_jobs(producer, topic, queue, 40)
    async with make_relay(topic, shadow=True) as relay:
        # at least: a term that ends early re-reads (and re-counts) its uncommitted batch
        await eventually(lambda: _value(relay.relays[0].counts.get("shadow", 0)), lambda n: n >= 40)
    assert await pending(engine, queue) == 0


async def test_memory_backpressure_stops_then_resumes_relaying(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Eventually,
) -> None:
    """Used memory above the stop mark (of a temporary 1 GiB maxmemory): the relay writes nothing;
    once there is room again (maxmemory raised) it relays everything; Kafka accepted throughout."""
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    client = engine.client
    used = int((await client.info("memory"))["used_memory"])
    gib = 1 << 30
    assert used / gib > 0.0002, "the shared Redis holds some data"
    await client.config_set("maxmemory", gib)
    try:
        relay = make_relay(topic, memory_slow_at=used / gib / 4, memory_stop_at=used / gib / 2)
        async with relay:
            await relay.relays[0].elector.wait_role(Role.LEADER, timeout_s=60)
            await produce_jobs(producer, topic, queue, 30)
            guard = relay.relays[0].guard
            await eventually(lambda: _value(guard.stopped), lambda s: s is True)
            assert await pending(engine, queue) == 0
            await client.config_set("maxmemory", 1 << 50)
            await eventually(lambda: pending(engine, queue), lambda n: n == 30)
            assert guard.stopped is False
    finally:
        await client.config_set("maxmemory", 0)


async def test_a_queue_that_refuses_writes_sends_its_jobs_to_the_retry_topic_and_the_rest_flows(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Eventually,
) -> None:
    """A poison queue (its stats key damaged: every script on it fails with WRONGTYPE) must neither block
    the partition nor lose its jobs: they land in ``<topic>.retry`` with the reason, unchanged."""
    topic, good, bad = make_topic("jobs", partitions=1), f"{prefix}.good", f"{prefix}.bad"
    await engine.client.set(f"jobq:{{{bad}}}:stats", b"not a hash")
    try:
        await produce_jobs(producer, topic, good, 20)
        bad_ids = await produce_jobs(producer, topic, bad, 5)
        await produce_jobs(producer, topic, good, 20)
        async with make_relay(topic) as relay:
            await eventually(lambda: pending(engine, good), lambda n: n == 40)
            await eventually(lambda: _value(relay.relays[0].counts.get("retried", 0)), lambda n: n == 5)
        retried = await asyncio.to_thread(read_all, endpoints, f"{topic}.retry", 5)
        assert sorted(decode(m.value()).id for m in retried) == sorted(bad_ids)
        assert all(b"refused the write" in dict(m.headers())["jobq-reason"] for m in retried)
    finally:
        await engine.client.delete(f"jobq:{{{bad}}}:stats")
