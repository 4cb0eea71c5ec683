"""Kafka away while jobs run, and past them: their events wait in Redis and reach Kafka once it is back
(no event lost, duplicates from the retried batches absorbed by (queue, id, v)); a queue whose cap is too
small for the outage counts every event it drops; the history built afterwards holds every complete
timeline."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pyspark.sql import SparkSession

from jqcore.envelope import new_envelope
from jqcore.settings.pipeline import EventSettings
from jqengine import Engine, QueueConfig
from jqruntime.stores.history import HistoryStore
from jqsched.service import SchedulerService
from jqspark.history import start_history
from jqstack.manager import Endpoints
from jqstack.testing.backends import NativeTestStack, SessionStack
from tests.conftest import TopicEvents
from worker.pool import Pool, PoolConfig
from worker.registry import Registry

pytestmark = [pytest.mark.spark, pytest.mark.faults]

Eventually = Callable[..., Awaitable[Any]]
N = 300
SMALL_CAP = 100


async def test_kafka_away_loses_no_event_and_the_history_catches_up(
    stack: SessionStack,
    spark: SparkSession,
    endpoints: Endpoints,
    prefix: str,
    tmp_path: Path,
    make_topic: Callable[..., str],
    make_scheduler: Callable[..., SchedulerService],
    engine: Engine,
    redis: aioredis.Redis,
    eventually: Eventually,
    topic_end: Callable[[str], int],
    topic_events: TopicEvents,
) -> None:
    if not isinstance(stack, NativeTestStack):
        pytest.skip("native stack only")
    broker = stack.stack.of_kind("kafka")[0]
    assert broker.pid is not None
    topic = make_topic("events", partitions=2)
    q, small = f"{prefix}.q", f"{prefix}.small"
    await engine.admin.configure_queue(small, QueueConfig(events_cap=SMALL_CAP))
    registry = Registry()

    @registry.job("outage.ok", queue=q)
    async def ok(i: int) -> int:
        return i

    async with make_scheduler(f"{prefix}-s0", events=EventSettings(topic=topic, batch=100)) as sched:
        await engine.enqueue_batch([new_envelope(q, "outage.ok", {"i": -1}, id="warmup")])
        await eventually(lambda: asyncio.to_thread(topic_end, topic), lambda n: n >= 1, 60)  # shipping works
        os.kill(broker.pid, signal.SIGSTOP)
        failed = sched.signals.events.failed
        try:
            ids = {queue: [f"{queue}-{i}" for i in range(N)] for queue in (q, small)}
            for queue, queue_ids in ids.items():
                envs = [new_envelope(queue, "outage.ok", {"i": i}, id=j) for i, j in enumerate(queue_ids)]
                await engine.enqueue_batch(envs)
            async with Pool(registry, engine, PoolConfig([q, small], concurrency=20), redis=redis):
                for queue, queue_ids in ids.items():
                    await eventually(
                        lambda queue=queue, queue_ids=queue_ids: engine.reads.get_jobs(queue, queue_ids),
                        lambda infos: all(i is not None and i.state == "completed" for i in infos),
                        120,
                    )
            failed_mark = failed.mark()  # every job ran, every event of theirs waits in Redis
            backlog = await engine.events.backlog([q, small])
            assert backlog[q] == 3 * N + 2, "every event of the outage waits in Redis (+ the warm-up's run)"
            assert backlog[small] == SMALL_CAP, "the small queue holds its cap ..."
            dropped = (await engine.reads.queue_stats(small))["events_dropped"]
            assert dropped == 3 * N - SMALL_CAP, "... and counts every event past it"
            # the fault outlasts the jobs: a shipping round that began after they all ran fails too
            await failed.wait_for(after=failed_mark, timeout_s=120)
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        await eventually(lambda: engine.events.backlog([q, small]), lambda b: not any(b.values()), 120)
        assert sched.shipper is not None
        assert sched.shipper.shipped >= 3 + 3 * N + SMALL_CAP, "every event trimmed was counted shipped"

    shipped = await asyncio.to_thread(topic_events, topic)
    seen: dict[tuple[str, str], set[int]] = defaultdict(set)
    for _, e in shipped:
        seen[(e.queue, e.id)].add(e.v)
    # the backlog left in rounds of 100 events (JOBQ_EVENTS_BATCH), each a record per partition
    assert len({(r.partition(), r.offset()) for r, _ in shipped}) * 10 <= len(shipped), (
        "records of many events"
    )
    for job_id in ids[q]:
        assert seen[(q, job_id)] == {1, 2, 3}, f"{job_id}: pending, running, completed"
    assert sum(len(vs) for (queue, _), vs in seen.items() if queue == small) == SMALL_CAP

    query = start_history(
        spark,
        bootstrap=endpoints.kafka_bootstrap,
        topic=topic,
        root=tmp_path / "history",
        trigger_s=1.0,
        retention_days=30,
        available_now=True,
    )
    await asyncio.to_thread(query.awaitTermination)
    store = HistoryStore(tmp_path / "history")
    got = store.query(f"SELECT count(*) FROM current WHERE queue = '{q}' AND to_state = 'completed'").rows
    assert got == [(N + 1,)], "every job of the queue, warm-up included, completed in the history"
    timeline = store.timeline(ids[q][7], q)
    assert [e.to_state for e in timeline] == ["pending", "running", "completed"]
