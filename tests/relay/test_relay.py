"""The relay end to end on the real stack: Kafka → Redis with fences, commits, dead letters, takeover,
live rate limits and shadow mode."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import consul

from jqcore import metrics
from jqcore.envelope import decode, encode, new_envelope, record_key
from jqengine import Engine
from jqrelay.elector import Elector, Role
from jqrelay.main import RelayService
from jqruntime.kafka import AsyncProducer, Record
from jqstack.manager import Endpoints
from jqstack.procs import free_port

Produce = Callable[..., Any]
Pending = Callable[[str], Any]
Offsets = Callable[..., Any]
TopicReader = Callable[..., list[Any]]


async def test_relay_writes_jobs_dead_letters_bad_records_and_commits_after_redis(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    produce_jobs: Produce,
    pending: Pending,
    offsets: Offsets,
    topic_reader: TopicReader,
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    ids = await produce_jobs(topic, queue, 300)
    dup = new_envelope(queue, "k", None, id=ids[0])
    bad = [Record(topic, b"{not json", b"x"), Record(topic, b'{"v": 1, "id": "no-queue"}', b"y")]
    await producer.produce_many([Record(topic, encode(dup), record_key(dup)), *bad])
    async with make_relay(topic) as relay:
        await relay.relays[0].signals.committed.wait_for(lambda n: n >= 303)
        assert await pending(queue) == 300
        assert await offsets(topic) == (303, 303)
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
    dead = await asyncio.to_thread(topic_reader, f"{topic}.dead", 2)
    reasons = {dict(m.headers())["jobq-reason"].decode().split(":")[0] for m in dead}
    assert reasons == {"envelope_invalid", "envelope_not_json"}
    assert {m.value() for m in dead} == {b"{not json", b'{"v": 1, "id": "no-queue"}'}, "bytes unchanged"


async def test_two_relays_one_holder_and_a_fenced_takeover(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    produce_jobs: Produce,
    pending: Pending,
    offsets: Offsets,
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    a, b = make_relay(topic, "relay-a"), make_relay(topic, "relay-b")
    async with a, b:
        ea, eb = a.relays[0].elector, b.relays[0].elector
        leader = await _first_leader(ea, eb)
        other = eb if leader is ea else ea
        assert await other.wait_role(Role.WAITING, timeout_s=60) is Role.WAITING
        first, second = (a, b) if leader is ea else (b, a)
        # /readyz's judgement: the holder and the relay waiting for the lock are both ready
        for service, role in ((first, "leader"), (second, "waiting")):
            found = await service.readiness()
            assert (found.problems, found.facts["topics"]) == ([], {topic: role})
        await produce_jobs(topic, queue, 100)
        # written *and* committed: the next holder starts after them
        await first.relays[0].signals.committed.wait_for(lambda n: n >= 100)
        assert await pending(queue) == 100
        fence_before = first.relays[0].elector.trusted_term()
        assert fence_before is not None
        await first.stop()  # releases the lock: the other takes over at once (lock-delay 0 here)
        await second.relays[0].elector.wait_role(Role.LEADER, timeout_s=60)
        term = second.relays[0].elector.trusted_term()
        assert term is not None
        assert term.fence > fence_before.fence
        await produce_jobs(topic, queue, 100)
        await _written(second, 100)
        assert await pending(queue) == 200
        assert second.relays[0].counts.get("duplicate", 0) == 0, "offsets committed: nothing re-read"


async def test_a_relay_whose_redis_is_gone_is_not_ready(
    make_topic: Callable[..., str], make_relay: Callable[..., RelayService]
) -> None:
    topic = make_topic("jobs")
    async with make_relay(topic, redis_url=f"redis://127.0.0.1:{free_port()}/0") as relay:
        role = await relay.relays[0].elector.wait_role(Role.LEADER, Role.WAITING, timeout_s=60)
        found = await relay.readiness()
    codes = [p.code for p in found.problems]
    assert codes[0] == "redis_unreachable", found.problems
    assert set(codes) <= {"redis_unreachable", "relay_failing"}, "a holder's term fails too (timing)"
    assert found.facts["topics"] == {topic: role.value}, "its lock is fine: Redis is the problem"


async def _written(relay: RelayService, n: int) -> None:
    """Until the (only) topic relay of ``relay`` wrote ``n`` jobs in all (its batch signal)."""
    await relay.relays[0].signals.batch.wait_for(lambda c: c.get("written", 0) >= n)


async def _first_leader(*electors: Elector, timeout_s: float = 60) -> Elector:
    """The elector that wins the lock, waited for on their role changes."""
    waits = {asyncio.ensure_future(e.wait_role(Role.LEADER)): e for e in electors}
    done, undecided = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    for w in undecided:
        w.cancel()
    await asyncio.gather(*undecided, return_exceptions=True)
    assert done, f"no leader within {timeout_s}s"
    return waits[done.pop()]


async def test_live_rate_limit_pauses_and_resumes_without_restart(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    consul_client: consul.Consul,
    produce_jobs: Produce,
    pending: Pending,
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    kv = consul_client.kv
    rate_key = f"jobq-test/{prefix}/rates/{topic}"
    kv.put(rate_key, "0")
    async with make_relay(topic) as relay:
        applied = relay.signals[topic].limit.applied
        await applied.wait_for(lambda r: r == 0)
        await relay.relays[0].elector.wait_role(Role.LEADER, timeout_s=60)
        held = relay.signals[topic].limit.held
        mark = held.mark()
        await produce_jobs(topic, queue, 50)
        await held.wait_for(after=mark)  # the relay read a batch and waits for the paused limit's tokens
        assert await pending(queue) == 0, "rate 0 pauses the relay"
        assert metrics.RELAY_HELD.labels(topic, "rate_limit")._value.get() == 1, "held, and says so"
        mark = applied.mark()
        kv.put(rate_key, "20")
        await applied.wait_for(lambda r: r == 20, after=mark)
        await _written(relay, 10)
        kv.put(rate_key, "")  # unlimited
        await _written(relay, 50)
        assert await pending(queue) == 50


async def test_shadow_mode_reads_and_counts_but_writes_nothing(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    produce_jobs: Produce,
    pending: Pending,
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    await produce_jobs(topic, queue, 40)
    async with make_relay(topic, shadow=True) as relay:
        # at least: a term that ends early re-reads (and re-counts) its uncommitted batch
        await relay.relays[0].signals.batch.wait_for(lambda c: c.get("shadow", 0) >= 40)
        assert relay.relays[0].lane is None, "no holding lane in shadow mode"
    assert await pending(queue) == 0


async def test_memory_backpressure_stops_then_resumes_relaying(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    produce_jobs: Produce,
    pending: Pending,
) -> None:
    """Used memory above the stop mark (of a temporary 1 GiB maxmemory): the relay writes nothing;
    once there is room again (maxmemory raised) it relays everything; Kafka accepted throughout."""
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    client = engine._client
    used = int((await client.info("memory"))["used_memory"])
    gib = 1 << 30
    assert used / gib > 0.0002, "the shared Redis holds some data"
    await client.config_set("maxmemory", gib)
    try:
        slow = used / gib / 4
        relay = make_relay(
            topic,
            memory_slow_at=slow,
            memory_stop_at=used / gib / 2,
            queue_memory_pool=slow / 2,
            queue_memory_share=1,
        )
        async with relay:
            await relay.relays[0].elector.wait_role(Role.LEADER, timeout_s=60)
            await produce_jobs(topic, queue, 30)
            guard = relay.relays[0].guard
            await relay.guard_signals.stopped.wait_for(lambda stopped: stopped)
            held = metrics.RELAY_HELD.labels(topic, "memory")
            assert held._value.get() == 1, "the batch is held by the memory guard (the gauge says so)"
            assert metrics.REDIS_MEMORY_MAX._value.get() == gib, "the guard's sample sets the Redis gauges"
            assert await pending(queue) == 0
            await client.config_set("maxmemory", 1 << 50)
            await _written(relay, 30)
            assert await pending(queue) == 30
            assert guard.stopped is False
            assert held._value.get() == 0
            assert metrics.RELAY_HELD_TIME.labels(topic, "memory")._value.get() > 0
    finally:
        await client.config_set("maxmemory", 0)


async def test_a_redis_error_that_says_nothing_about_the_jobs_holds_the_batch(
    prefix: str,
    endpoints: Endpoints,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    produce_jobs: Produce,
    pending: Pending,
) -> None:
    """An ACL that stops letting the relay run its scripts answers NOPERM — an error about no queue's data.
    The relay used to take any error it had no mapping for as the queue refusing the batch and set the
    jobs aside in ``<topic>.retry``; it holds the batch and tries again until the ACL is repaired, then
    writes every job, none set aside."""
    topic, queue, user = make_topic("jobs", partitions=1), f"{prefix}.q", f"relay-{prefix}"
    client = engine._client
    await client.acl_setuser(
        user, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    assert endpoints.redis_url
    url = endpoints.redis_url.replace("redis://", f"redis://{user}:pw@", 1)
    try:
        async with make_relay(topic, redis_url=url) as relay:
            one = relay.relays[0]
            await produce_jobs(topic, queue, 5)
            await one.signals.batch.wait_for(lambda c: c.get("written", 0) >= 5)
            await client.acl_setuser(user, commands=["-fcall", "-fcall_ro"])
            mark = one.signals.stalled.mark()
            await produce_jobs(topic, queue, 10)
            await one.signals.stalled.wait_for(lambda stage: stage == "write", after=mark)
            await one.signals.stalled.wait_for(
                lambda stage: stage == "write", after=one.signals.stalled.mark()
            )
            assert one.counts.get("retried", 0) == 0, "nothing set aside"
            assert await pending(queue) == 5, "the batch is held, not written"
            await client.acl_setuser(user, commands=["+@all"])
            await one.signals.batch.wait_for(lambda c: c.get("written", 0) >= 15)
            assert one.counts.get("retried", 0) == 0
            assert await pending(queue) == 15
    finally:
        await client.acl_deluser(user)


async def test_a_queue_that_refuses_writes_sends_its_jobs_to_the_retry_topic_and_the_rest_flows(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    produce_jobs: Produce,
    pending: Pending,
    topic_reader: TopicReader,
) -> None:
    """A poison queue (its stats key damaged: every script on it fails with WRONGTYPE) must neither block
    the partition nor lose its jobs: they land in ``<topic>.retry`` with the reason, unchanged."""
    topic, good, bad = make_topic("jobs", partitions=1), f"{prefix}.good", f"{prefix}.bad"
    await engine._client.set(f"jobq:{{{bad}}}:stats", b"not a hash")
    try:
        await produce_jobs(topic, good, 20)
        bad_ids = await produce_jobs(topic, bad, 5)
        await produce_jobs(topic, good, 20)
        async with make_relay(topic) as relay:
            # the batch that holds the bad queue's jobs is done (the good ones around them too); the good
            # queue's jobs may count as written or, when the first whole-batch call stored them before the
            # bad queue failed it, as duplicates of the queue-by-queue retry
            await relay.relays[0].signals.batch.wait_for(
                lambda c: c.get("written", 0) + c.get("duplicate", 0) >= 40 and c.get("retried", 0) >= 5
            )
            assert await pending(good) == 40
            assert relay.relays[0].counts.get("retried") == 5
        retried = await asyncio.to_thread(topic_reader, f"{topic}.retry", 5)
        assert sorted(decode(m.value()).id for m in retried) == sorted(bad_ids)
        assert all(b"refused the write" in dict(m.headers())["jobq-reason"] for m in retried)
    finally:
        await engine._client.delete(f"jobq:{{{bad}}}:stats")
