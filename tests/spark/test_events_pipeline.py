"""Lifecycle events through the whole path: 240 jobs of mixed outcomes (succeed, retry then succeed,
dead, canceled, expired) go HTTP → gateway → Kafka → relay → Redis → workers, and the scheduler service
ships every transition's event to the events topic: each job's sequence there is complete (versions 1..n
without gaps, each event starting where the previous ended, ending in the job's final state), with the
hop stamps, the workers and the errors. The PySpark history built from the topic holds exactly those
timelines, and building it a second time over the same events (a new checkpoint, the same tables)
changes no answer."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from pyspark.sql import SparkSession

from jqcore.backoff import Backoff
from jqcore.events import Event, partition_of
from jqcore.routing import Route, RoutingSettings
from jqcore.settings.pipeline import EventSettings
from jqengine import Engine, JobInfo
from jqrelay.main import RelayService
from jqruntime.client import JobqClient
from jqruntime.stores.history import HistoryStore
from jqsched.service import SchedulerService
from jqspark.history import start_history
from jqstack.manager import Endpoints
from kafkagate.main import GateService
from tests.conftest import TopicEvents
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

pytestmark = pytest.mark.spark

Eventually = Callable[..., Awaitable[Any]]

N_OK, N_FLAKY, N_DEAD, N_CANCELED, N_EXPIRED = 120, 60, 30, 15, 15
"""~960 events: several of the scheduler's batches of 300 over 3 partitions (the checks are per job: the
1,000 jobs this test sent before showed nothing more)."""
FAST = Backoff(base_s=0.05, factor=1.0, cap_s=0.05, jitter=False)


@pytest.fixture
async def events_path(
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    make_scheduler: Callable[..., SchedulerService],
    token: str,
) -> AsyncIterator[tuple[JobqClient, str, str]]:
    jobs_topic, events_topic = make_topic("jobs", partitions=2), make_topic("events", partitions=3)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=jobs_topic)], default_topic="")
    events = EventSettings(topic=events_topic, batch=300)
    async with (
        make_gate(routing) as gate,
        make_relay(jobs_topic),
        make_scheduler(f"{prefix}-s0", events=events),
        JobqClient([gate.url], token) as client,
    ):
        yield client, jobs_topic, events_topic


async def test_every_job_has_its_whole_story_in_the_events_topic_and_the_history(
    events_path: tuple[JobqClient, str, str],
    spark: SparkSession,
    endpoints: Endpoints,
    tmp_path: Path,
    prefix: str,
    engine: Engine,
    redis: aioredis.Redis,
    eventually: Eventually,
    topic_events: TopicEvents,
) -> None:
    client, jobs_topic, events_topic = events_path
    q = f"{prefix}.q"
    registry = Registry()

    @registry.job("ev.ok", queue=q)
    async def ok(i: int) -> int:
        return i

    @registry.job("ev.flaky", queue=q, backoff=FAST)
    async def flaky(i: int) -> int:
        if current_job().attempt == 1:
            raise ValueError(f"first try of {i}")
        return i

    @registry.job("ev.dead", queue=q, backoff=FAST, max_attempts=2)
    async def dead(i: int) -> int:
        raise KeyError("never works")

    now = int(time.time() * 1000)
    specs: list[tuple[str, dict[str, Any]]] = []
    specs += [("completed", {"kind": "ev.ok", "args": {"i": i}}) for i in range(N_OK)]
    specs += [("completed", {"kind": "ev.flaky", "args": {"i": i}}) for i in range(N_FLAKY)]
    specs += [("errored", {"kind": "ev.dead", "args": {"i": i}}) for i in range(N_DEAD)]
    specs += [
        ("canceled", {"kind": "ev.ok", "args": {"i": i}, "delay_ms": 600_000}) for i in range(N_CANCELED)
    ]
    ids = await client.enqueue(q, [body for _, body in specs])
    expected = dict(zip(ids, (state for state, _ in specs), strict=True))
    # Expired: a paused queue holds them until their expires_at passed; the claim after the resume ends
    # them (a job whose trip through Kafka took longer than its expiry ends at its enqueue instead)
    q_exp = f"{prefix}.exp"
    await engine.admin.pause(q_exp)
    expires_at = now + 3_000
    expiring = [{"kind": "ev.ok", "args": {"i": i}, "expires_at": expires_at} for i in range(N_EXPIRED)]
    exp_ids = await client.enqueue(q_exp, expiring)
    canceled = [i for i, s in expected.items() if s == "canceled"]
    await eventually(lambda: engine.reads.depth(q), lambda d: d.delayed >= N_CANCELED, 120)
    for job_id in canceled:
        await client.cancel(q, job_id)
    await eventually(lambda: engine.reads.depth(q_exp), lambda d: d.pending + d.finished == N_EXPIRED, 120)
    await eventually(time.time, lambda t: t * 1000 > expires_at + 10, 10)  # expiry needs the clock to pass
    await engine.admin.pause(q_exp, False)

    async with Pool(registry, engine, PoolConfig([q, q_exp], concurrency=20), redis=redis):
        await eventually(
            lambda: engine.reads.get_jobs(q, ids),
            lambda infos: all(i is not None and i.state == expected[i.id] for i in infos),
            180,
        )
        await eventually(
            lambda: engine.reads.get_jobs(q_exp, exp_ids),
            lambda infos: all(i and i.state == "expired" for i in infos),
        )
    expected.update(dict.fromkeys(exp_ids, "expired"))
    infos = {
        i.id: i
        for i in await engine.reads.get_jobs(q, ids) + await engine.reads.get_jobs(q_exp, exp_ids)
        if i
    }
    n_events = sum(i.version for i in infos.values())
    await eventually(lambda: engine.events.backlog([q, q_exp]), lambda b: not any(b.values()), 60)
    shipped = await eventually(
        lambda: asyncio.to_thread(topic_events, events_topic), lambda got: len(got) >= n_events, 60
    )

    by_job: dict[str, dict[int, Event]] = defaultdict(dict)
    for rec, e in shipped:  # each partition's records in order
        assert rec.partition() == partition_of(e.id, 3), "partitioned by job id: one job's events on one"
        assert e.v >= max(by_job[e.id], default=0) or e.v in by_job[e.id], "a job's events in order"
        by_job[e.id].setdefault(e.v, e)  # at least once: keep one per (id, v)
    assert set(by_job) == set(ids) | set(exp_ids)
    for job_id, by_v in by_job.items():
        check_story(infos[job_id], [by_v[v] for v in sorted(by_v)], expected[job_id], jobs_topic)
    for queue in (q, q_exp):
        assert (await engine.reads.queue_stats(queue)).get("events_dropped", 0) == 0

    stories = {
        (job_id, infos[job_id].queue): [(e.from_state, e.to, e.v) for _, e in sorted(by_v.items())]
        for job_id, by_v in by_job.items()
    }
    final = {(i.queue, i.id): i.state for i in infos.values()}
    for run in ("first", "again"):  # again: a new checkpoint reads every event a second time
        store = await build_history(spark, endpoints.kafka_bootstrap, events_topic, tmp_path, run)
        assert indexed_stories(store) == stories, f"{run}: the history's timelines are the topic's, each once"
        current = store.query("SELECT queue, id, to_state FROM current").rows
        assert {(r[0], r[1]): r[2] for r in current} == final, f"{run}: the current table"


async def build_history(spark: SparkSession, bootstrap: str, topic: str, tmp: Path, run: str) -> HistoryStore:
    """The history of ``topic`` in ``tmp/history``, by a query with its own checkpoint (``run``)."""
    query = start_history(
        spark,
        bootstrap=bootstrap,
        topic=topic,
        root=tmp / "history",
        checkpoint=tmp / f"checkpoint-{run}",
        trigger_s=1.0,
        retention_days=30,
        available_now=True,
    )
    await asyncio.to_thread(query.awaitTermination)
    return HistoryStore(tmp / "history")


def indexed_stories(store: HistoryStore) -> dict[tuple[str, str], list[tuple[str, str, int]]]:
    got: dict[tuple[str, str], list[tuple[str, str, int]]] = defaultdict(list)
    for job_id, queue, from_state, to_state, v in store.query(
        "SELECT id, queue, from_state, to_state, v FROM events ORDER BY id, queue, v"
    ).rows:
        got[(job_id, queue)].append((from_state, to_state, v))
    return dict(got)


STORIES = {
    "ev.flaky": ["pending", "running", "delayed", "pending", "running", "completed"],
    "ev.dead": ["pending", "running", "delayed", "pending", "running", "errored"],
    "canceled": ["delayed", "canceled"],
    "expired": ["pending", "expired"],
    "ev.ok": ["pending", "running", "completed"],
}


def check_story(info: JobInfo, events: list[Event], state: str, jobs_topic: str) -> None:
    """One job's events: versions 1..n, a chain of states ending in its final one, the hop stamps."""
    assert [e.v for e in events] == list(range(1, info.version + 1)), f"{info.id}: gaps"
    assert events[0].from_state == ""
    for before, after in itertools.pairwise(events):
        assert after.from_state == before.to, f"{info.id}: {before} -> {after}"
    assert events[-1].to == state == info.state
    first = events[0]
    assert first.origin.startswith(f"{jobs_topic}/"), "the Kafka hop: topic/partition/offset"
    assert 0 < first.accepted_at <= first.at, "accepted by the gateway before the relay wrote it"
    assert all(e.worker for e in events if e.to == "running"), "every claim names its worker"
    story = STORIES[state if state in ("canceled", "expired") else str(info.kind)]
    if state == "expired" and len(events) == 1:
        story = ["expired"]  # expired on its way through Kafka: ended by the enqueue itself
    assert [e.to for e in events] == story, info.id
    failures = [e for e in events if e.from_state == "running" and e.to in ("delayed", "errored")]
    if info.kind == "ev.flaky":
        arg = orjson.loads(info.envelope or b"{}")["args"]["i"]
        assert [(e.error, e.message) for e in failures] == [("ValueError", f"first try of {arg}")]
    if info.kind == "ev.dead":
        assert [e.error for e in failures] == ["KeyError", "KeyError"]
        assert len({e.digest for e in failures}) == 1, "the same error, the same digest"
