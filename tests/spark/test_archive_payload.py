"""Rickover's archive keeps the payload: jobs run through gateway → Kafka → relay → Redis → workers, the
scheduler ships their events (the endings with each job's args, meta, result and replay fields, cut to
``JOBQ_EVENTS_PAYLOAD_MAX_BYTES``), the PySpark history indexes them; once GC removed the jobs from Redis,
``GET`` shows their payload from the archive and a replay from there runs the job again with its
priority and lease, while a job whose ``expires_at`` has passed is archived as expired without running."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from pyspark.sql import SparkSession

from jqcore.routing import Route, RoutingSettings
from jqcore.settings.pipeline import EventSettings, HistorySettings
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.client import ApiRefused, JobqClient
from jqsched.service import SchedulerService
from jqspark.history import start_history
from jqstack.manager import Endpoints
from kafkagate.main import GateService
from tests.conftest import TopicEvents
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

pytestmark = pytest.mark.spark

Eventually = Callable[..., Awaitable[Any]]
CAP = 1024


async def test_the_archive_shows_the_payload_and_replays_it_after_gc(
    spark: SparkSession,
    endpoints: Endpoints,
    prefix: str,
    tmp_path: Path,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    make_scheduler: Callable[..., SchedulerService],
    engine: Engine,
    redis: aioredis.Redis,
    token: str,
    eventually: Eventually,
    topic_events: TopicEvents,
) -> None:
    jobs_topic, events_topic = make_topic("jobs", partitions=1), make_topic("events", partitions=1)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=jobs_topic)], default_topic="")
    root = tmp_path / "history"
    q = f"{prefix}.q"
    registry = Registry()
    ran: list[str] = []
    release = asyncio.Event()
    release.set()

    @registry.job("arch.echo", queue=q)
    async def echo(text: str) -> dict[str, str]:
        ran.append(current_job().id)
        await release.wait()
        return {"echo": text}

    now = int(time.time() * 1000)
    soon = now + 1000
    jobs = [
        {
            "kind": "arch.echo",
            "args": {"text": "a"},
            "meta": {"tenant": "t1"},
            "priority": 5,
            "lease_ms": 7000,
            "expires_at": now + 3_600_000,
        },
        {"kind": "arch.echo", "args": {"text": "b"}, "expires_at": soon},
        {"kind": "arch.echo", "args": {"text": "x" * (2 * CAP)}},  # args and result longer than the cap
    ]
    async with (
        make_gate(routing, history=HistorySettings(path=str(root))) as gate,
        make_relay(jobs_topic),
        make_scheduler(f"{prefix}-s0", events=EventSettings(topic=events_topic, payload_max_bytes=CAP)),
        JobqClient([gate.url], token) as client,
        Pool(registry, engine, PoolConfig([q], concurrency=3), redis=redis),
    ):
        a, b, c = await client.enqueue(q, jobs)
        infos = await eventually(
            lambda: engine.reads.get_jobs(q, [a, b, c]),
            lambda got: all(i and i.state in ("completed", "expired") for i in got),  # b may expire first
            60,
        )
        n_events = sum(i.version for i in infos)
        await eventually(lambda: engine.events.backlog([q]), lambda backlog: backlog[q] == 0, 60)
        await eventually(
            lambda: asyncio.to_thread(topic_events, events_topic), lambda e: len(e) >= n_events, 60
        )
        query = start_history(
            spark,
            bootstrap=endpoints.kafka_bootstrap,
            topic=events_topic,
            root=root,
            trigger_s=1.0,
            retention_days=30,
            available_now=True,
        )
        await asyncio.to_thread(query.awaitTermination)
        assert await engine.timers.gc(q, now_ms=int(time.time() * 1000) + 2 * 86_400_000) == 3
        assert await engine.reads.get_job(q, a) is None

        # GET from the archive: args, meta, result and the envelope fields a replay keeps
        old = await client.get_job(q, a)
        assert old is not None
        assert (old["source"], old["state"], old["args"], old["meta"]) == (
            "archive",
            "completed",
            {"text": "a"},
            {"tenant": "t1"},
        )
        assert orjson.loads(old["result"]) == {"echo": "a"}
        assert (old["priority"], old["lease_ms"], old["expires_at"]) == (5, 7000, now + 3_600_000)
        assert old["truncated"] == []
        # longer than the cap: the start is kept, and said to be only the start
        big = await client.get_job(q, c)
        assert big is not None
        assert big["truncated"] == ["args", "result"]
        assert len(big["args"].encode()) == CAP
        assert big["args"].startswith('{"text":"xxx')
        assert len(big["result"].encode()) == CAP
        with pytest.raises(ApiRefused) as refused:
            await client.request("POST", f"/v1/queues/{q}/jobs/{c}/replay")
        assert (refused.value.status, refused.value.code) == (409, "payload_truncated")

        # a replay from the archive runs the job again, with its priority and lease
        release.clear()
        made = await client.request("POST", f"/v1/queues/{q}/jobs/{a}/replay")
        assert (made["source"], made["replay_of"]) == ("archive", a)
        (again,) = made["ids"]
        running = await eventually(
            lambda: engine.reads.get_job(q, again), lambda i: i and i.state == "running", 30
        )
        assert running.priority == 5
        assert 0 < running.lease_deadline - await engine.now() <= 7000  # the queue's default is 30 s
        release.set()
        done = await eventually(
            lambda: engine.reads.get_job(q, again), lambda i: i and i.state == "completed", 30
        )
        assert orjson.loads(done.result) == {"echo": "a"}
        assert again in ran

        # a job whose expires_at has passed, replayed: archived as expired at once, never run
        assert int(time.time() * 1000) > soon
        made = await client.request("POST", f"/v1/queues/{q}/jobs/{b}/replay")
        (late,) = made["ids"]
        ended = await eventually(lambda: engine.reads.get_job(q, late), lambda i: i is not None, 30)
        assert (ended.state, ended.attempt, ended.started_at) == ("expired", 0, None)
        assert late not in ran
