"""The holding lane on the real stack (issue 56): a paused, rate-limited or over-budget queue steps aside
into ``<topic>.held`` and its neighbours on the same topic flow; its jobs come back in order, once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import consul
import pytest
from confluent_kafka import Consumer, TopicPartition

from jqcore import metrics
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.lane import decode_metadata
from jqcore.testsignal import CRASH_EXIT
from jqengine import Engine, JobInfo, QueueConfig
from jqrelay.main import RelayService
from jqruntime.kafka import AsyncProducer, Record
from jqstack.manager import Endpoints
from jqstack.supervise import Child
from jqweb.overview import held_rows

Produce = Callable[..., Any]
Pending = Callable[[str], Any]
Offsets = Callable[..., Any]


def _held(relay: RelayService, topic: str, queue: str) -> dict[str, Any] | None:
    lane = relay.relays[0].lane
    return lane.snapshot()["queues"].get(queue) if lane is not None else None


async def test_a_paused_queue_steps_aside_and_its_neighbour_on_the_topic_flows(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    consul_client: consul.Consul,
    produce_jobs: Produce,
    pending: Pending,
    offsets: Offsets,
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    """The measured bug: a queue at rate 0 with 5,000 jobs ahead of 200 of its neighbour's on one topic held
    every one of them. Now the neighbour's are written, the source offsets reach the end, the paused queue's
    jobs wait in the lane; lifting the pause drains them, every one once."""
    topic, slow, fast = make_topic("jobs"), f"{prefix}.slow", f"{prefix}.fast"
    key = f"jobq-test/{prefix}/queue-rates/{slow}"
    consul_client.kv.put(key, "paused")
    await produce_jobs(topic, slow, 5000)
    await produce_jobs(topic, fast, 200)
    async with make_relay(topic, batch=500) as relay:
        signals = relay.signals[topic]
        await signals.held.wait_for(lambda v: v == (slow, "paused"))
        await signals.batch.wait_for(lambda c: c.get("written", 0) >= 200 and c.get("aside", 0) >= 5000)
        assert await pending(fast) == 200
        assert await pending(slow) == 0, "nothing of the paused queue in Redis"
        done, end = await offsets(topic)
        assert done == end == 5200, "the source is committed past the held queue's records"
        held = _held(relay, topic, slow)
        assert held is not None, "the lane holds it"
        assert (held["reason"], held["records"]) == ("paused", 5000)
        records = metrics.RELAY_LANE_RECORDS.labels(topic, slow)
        await eventually(lambda: records._value.get(), lambda n: n == 5000)  # the next snapshot's gauges
        assert metrics.RELAY_QUEUE_HELD.labels(topic, slow, "paused")._value.get() == 1
        shown = await eventually(lambda: held_rows(relay.relays[0].redis), lambda rows: rows)  # jobq status
        assert [(r["queue"], r["reason"], r["records"]) for r in shown if r["topic"] == topic] == [
            (slow, "paused", 5000)
        ]

        mark = signals.released.mark()
        consul_client.kv.delete(key)
        await signals.released.wait_for(lambda v: v[0] == slow, after=mark, timeout_s=120)
        assert await pending(slow) == 5000
        assert relay.relays[0].lane_counts.get("written") == 5000, relay.relays[0].lane_counts
        assert _held(relay, topic, slow) is None
        # released: its next jobs are written direct
        await produce_jobs(topic, slow, 10)
        await signals.batch.wait_for(lambda c: c.get("written", 0) >= 210)
        assert await pending(slow) == 5010


def _lane_at_rest(bootstrap: str, lane: str, group: str) -> list[tuple[int, int, dict[str, int]]]:
    """Each lane partition's (committed offset, end, held queues in the commit's metadata)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        parts = [TopicPartition(lane, p) for p in c.list_topics(lane, timeout=10).topics[lane].partitions]
        out = []
        for tp in c.committed(parts, timeout=10):
            _, end = c.get_watermark_offsets(tp, timeout=10)
            meta = decode_metadata(tp.metadata)
            out.append((max(tp.offset, 0), end, meta[1] if meta else {}))
        return out
    finally:
        c.close()


Source = dict[str, tuple[str, int, int]]
"""Job id → (its exclusivity value, its source record's partition and offset)."""


async def _produce_keyed(
    producer: AsyncProducer, topic: str, queue: str, n: int, keys: int, tag: str
) -> Source:
    """``n`` jobs of ``queue`` over ``keys`` exclusivity values (one key, one partition)."""
    envs = [new_envelope(queue, "k", None, id=f"{tag}-{i}", excl=f"k{i % keys}") for i in range(n)]
    done = await producer.produce_many([Record(topic, encode(e), record_key(e)) for e in envs])
    return {e.id: (e.excl or "", d.partition, d.offset) for e, d in zip(envs, done, strict=True)}


def _in_order(jobs: list[JobInfo], source: Source) -> list[str]:
    """Per exclusivity key, jobs sorted by their source offsets must have reached Redis in that order
    (``enqueued_at`` never decreasing): the ids that arrived before an earlier record of their key."""
    bad: list[str] = []
    by_key: dict[str, list[JobInfo]] = {}
    for job in jobs:
        by_key.setdefault(source[job.id][0], []).append(job)
    for mine in by_key.values():
        mine.sort(key=lambda j: source[j.id][2])
        bad += [b.id for a, b in itertools.pairwise(mine) if (b.enqueued_at or 0) < (a.enqueued_at or 0)]
    return bad


@pytest.mark.parametrize("crash_at", ["relay_after_direct", "relay_after_aside", "relay_after_drain_write"])
async def test_a_relay_killed_at_each_step_of_the_lane_loses_nothing_and_keeps_the_order(
    crash_at: str,
    prefix: str,
    endpoints: Endpoints,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    relay_process: Callable[..., Awaitable[tuple[Child, int]]],
    consul_client: consul.Consul,
    producer: AsyncProducer,
    engine: Engine,
) -> None:
    """A relay process dies (``os._exit``, as kill -9) right after a batch's direct writes, right after its
    lane produce, or right after a drain write — before the commit that would say so — and more of the
    held queue's jobs arrive. The next holder reads the lane back and the source on: every job is stored
    once, with its source record as origin, in source order per exclusivity key, and the lane ends empty."""
    topic, held_q, other = make_topic("jobs"), f"{prefix}.h", f"{prefix}.n"
    await engine.admin.configure_queue(held_q, QueueConfig(mode="exclusive", excl_key="excl"))
    rate_key = f"jobq-test/{prefix}/queue-rates/{held_q}"
    consul_client.kv.put(rate_key, "100/s")  # 300 of its jobs at once: 100 direct, the rest aside
    crashing, _ = await relay_process(
        "relay-crash",
        [topic],
        JOBQ_TEST_CRASH_AT=crash_at,
        JOBQ_RELAY_BATCH="500",
        JOBQ_RELAY_LOCK_DELAY_S="0",
    )
    await producer.produce_many(
        [Record(topic, encode(e), record_key(e)) for e in (new_envelope(other, "k", i) for i in range(100))]
    )
    source = await _produce_keyed(producer, topic, held_q, 300, 8, "h")
    assert await crashing.exited(120) == CRASH_EXIT, "the relay died at its crash point"
    # records the dead term never read: the next term meets them beside the lane it reads back, and may
    # release the queue before it reads them (they then go direct, or aside again, after the lane's)
    source |= await _produce_keyed(producer, topic, held_q, 20, 8, "g")
    _, lock = consul_client.kv.get(f"jobq-test/{prefix}/locks/{topic}")
    if lock and lock.get("Session"):  # the dead holder's session, destroyed rather than waited out
        consul_client.session.destroy(lock["Session"])
    async with make_relay(topic, holder="relay-next", batch=500) as relay:
        signals = relay.signals[topic]
        # done: the source committed to its end (whatever it set aside is in the lane's state by then),
        # and the queue released since — a release alone can come before the source is read to its end
        await signals.committed.wait_for(lambda n: n == 420, timeout_s=120)
        mark = signals.released.mark()
        if _held(relay, topic, held_q) is not None:
            await signals.released.wait_for(lambda v: v[0] == held_q, after=mark, timeout_s=120)
    jobs = [j for j in await engine.reads.get_jobs(held_q, list(source)) if j is not None]
    assert len(jobs) == 320, "every job of the held queue stored"
    assert (await engine.reads.depth(held_q)).pending + (await engine.reads.depth(held_q)).blocked == 320, (
        "each once"
    )
    assert all(j.origin == f"{topic}/{source[j.id][1]}/{source[j.id][2]}" for j in jobs), "source origins"
    assert _in_order(jobs, source) == [], "per key, in source order"
    assert (await engine.reads.depth(other)).pending == 100
    rest = await asyncio.to_thread(
        _lane_at_rest, endpoints.kafka_bootstrap, f"{topic}.held", f"{prefix}-relay.{topic}.held"
    )
    assert all(c == end and not q for c, end, q in rest), f"the lane is drained and names no queue: {rest}"
