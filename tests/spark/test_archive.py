"""The history built from the real pipeline's events: jobs run through gateway → Kafka → relay → Redis →
workers, the scheduler ships their events, the PySpark history indexes them; once GC removed the jobs from
Redis, ``GET`` answers from the archive and ``jobq history JOB_ID`` prints the whole timeline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from jobq.cli import app
from jqcore.backoff import Backoff
from jqcore.routing import Route, RoutingSettings
from jqcore.settings.pipeline import EventSettings, HistorySettings
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.client import ApiRefused, JobqClient
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
FAST = Backoff(base_s=0.05, factor=1.0, cap_s=0.05, jitter=False)


async def test_a_job_gone_from_redis_answers_from_the_archive(
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
    jobs_topic, events_topic = make_topic("jobs", partitions=2), make_topic("events", partitions=2)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=jobs_topic)], default_topic="")
    root = tmp_path / "history"
    q = f"{prefix}.q"
    registry = Registry()

    @registry.job("arch.flaky", queue=q, backoff=FAST)
    async def flaky(i: int) -> int:
        if current_job().attempt == 1:
            raise ValueError(f"first try of {i}")
        return i

    async with (
        make_gate(routing, history=HistorySettings(path=str(root))) as gate,
        make_relay(jobs_topic),
        make_scheduler(f"{prefix}-s0", events=EventSettings(topic=events_topic)),
        JobqClient([gate.url], token) as client,
    ):
        ids = await client.enqueue(q, [{"kind": "arch.flaky", "args": {"i": i}} for i in range(20)])
        async with Pool(registry, engine, PoolConfig([q], concurrency=5), redis=redis):
            await eventually(
                lambda: engine.reads.get_jobs(q, ids),
                lambda infos: all(i and i.state == "completed" for i in infos),
                120,
            )
        infos = [i for i in await engine.reads.get_jobs(q, ids) if i is not None]
        n_events = sum(i.version for i in infos)
        await eventually(lambda: engine.events.backlog([q]), lambda b: b[q] == 0, 60)
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
        store = HistoryStore(root)
        assert len(store.timeline(ids[3], q)) == 6

        live = await client.get_job(q, ids[3])
        assert live is not None
        assert live["source"] == "redis"
        gone = await engine.timers.gc(
            q, now_ms=int(time.time() * 1000) + 2 * 86_400_000
        )  # past the retention
        assert gone == len(ids)
        assert await engine.reads.get_job(q, ids[3]) is None
        old = await client.get_job(q, ids[3])
        assert old is not None
        assert (old["source"], old["state"], old["version"], old["kind"]) == (
            "archive",
            "completed",
            6,
            "arch.flaky",
        )
        assert old["worker"], "the worker that ran it last"
        assert await client.get_job(q, "never-enqueued") is None

        # the search over the history: every job of the queue, page by page, newest change first
        found: list[str] = []
        after = ""
        while True:
            page = await client.request("GET", "/v1/jobs", params={"queue": q, "limit": 7, "after": after})
            assert len(page["jobs"]) <= 7
            assert all(j["source"] == "archive" and j["state"] == "completed" for j in page["jobs"])
            found += [j["id"] for j in page["jobs"]]
            if page["next"] is None:
                break
            after = page["next"]
        assert sorted(found) == sorted(ids)
        assert len(found) == len(set(found)), "no job on two pages"
        one = await client.request(
            "GET", "/v1/jobs", params={"queue": q, "id_prefix": ids[3], "state": "completed"}
        )
        assert [j["id"] for j in one["jobs"]] == [ids[3]]
        none = await client.request("GET", "/v1/jobs", params={"queue": q, "state": "errored"})
        assert none == {"jobs": [], "next": None}
        for bad in ({"limit": "0"}, {"since": "yesterday"}, {"after": "not-a-cursor"}):
            with pytest.raises(ApiRefused) as refused:
                await client.request("GET", "/v1/jobs", params=bad)
            assert refused.value.status == 400, bad

    result = CliRunner().invoke(
        app, ["history", ids[3]], env={"JOBQ_HISTORY_PATH": str(root)}, terminal_width=200
    )
    assert result.exit_code == 0, result.output
    for words in (
        "accepted by the gateway",
        f"Kafka {jobs_topic}/",
        "claimed by",
        "ValueError: first try of 3",
    ):
        assert words in result.output
    assert result.output.count("claimed by") == 2
