"""Spark writing jobs into the real Kafka of the session stack: a batch backfill read back record by record,
and a Structured Streaming query feeding the relay and a worker pool, stopped and replayed from its
checkpoint without any job running twice."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.streaming.query import StreamingQuery

from jqcore.envelope import decode, record_key
from jqcore.routing import Route, RoutingSettings
from jqengine import Engine, QueueConfig
from jqrelay.main import RelayService
from jqspark import write_batch, write_stream
from jqspark.records import to_kafka_records
from jqstack.manager import Endpoints
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

pytestmark = pytest.mark.spark

Eventually = Callable[..., Awaitable[Any]]


def test_batch_backfill_writes_every_row_as_a_valid_job_and_a_rerun_repeats_the_same_ids(
    spark: SparkSession,
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    topic_reader: Callable[..., list[Any]],
) -> None:
    n = 1000
    mail, img = make_topic("mail"), make_topic("img")
    routing = RoutingSettings(
        routes=[Route(queues=f"{prefix}.mail*", topic=mail), Route(queues=f"{prefix}.img", topic=img)],
        default_topic="",
    )
    queues = [f"{prefix}.mail", f"{prefix}.mail.eu", f"{prefix}.img"]
    df = (
        spark.range(n)
        .withColumn(
            "queue", sf.element_at(sf.array(*[sf.lit(q) for q in queues]), (sf.col("id") % 3 + 1).cast("int"))
        )
        .withColumn("account", sf.when(sf.col("id") % 4 == 0, sf.concat(sf.lit("acct-"), sf.col("id") % 7)))
        .withColumn("region", sf.when(sf.col("id") % 2 == 0, sf.lit("eu")))
    )
    records = to_kafka_records(
        df,
        routing=routing,
        queue_col="queue",
        queues=queues,
        kind="backfill.item",
        args_cols=["id"],
        meta_cols=["region"],
        excl_col="account",
    )
    write_batch(records, bootstrap=endpoints.kafka_bootstrap)
    got = topic_reader(mail, 2 * n // 3 + 1) + topic_reader(img, n // 3)
    assert len(got) == n
    envs = []
    for msg in got:
        env = decode(msg.value())  # every record is a valid envelope v1
        envs.append(env)
        assert msg.key() == record_key(env), "key = excl when set, else the id"
        assert msg.topic() == routing.route(env.queue)[0]
        assert msg.headers() == [("jobq-queue", env.queue.encode()), ("jobq-kind", b"backfill.item")]
        assert (env.excl is not None) == (env.args["id"] % 4 == 0)
        assert env.meta == ({"region": "eu"} if env.args["id"] % 2 == 0 else {})
    assert sorted(e.args["id"] for e in envs) == list(range(n))
    assert len({e.id for e in envs}) == n

    # a backfill run again writes again (Kafka is at-least-once) but with the very same job ids
    write_batch(records, bootstrap=endpoints.kafka_bootstrap)
    again = topic_reader(mail, 2 * (2 * n // 3 + 1)) + topic_reader(img, 2 * (n // 3))
    assert len(again) == 2 * n
    ids = Counter(decode(m.value()).id for m in again)
    assert set(ids) == {e.id for e in envs}
    assert set(ids.values()) == {2}


# --- streaming end to end ------------------------------------------------------------------------------


def drop_file(src: Path, index: int, rows: range) -> None:
    """Publish one JSON-lines file atomically (written beside, renamed in: the file source never sees
    half a file)."""
    tmp = src.parent / f".part-{index}.json"
    tmp.write_text("".join(json.dumps({"n": i}) + "\n" for i in rows))
    os.replace(tmp, src / f"part-{index:03d}.json")


def latest_commit(checkpoint: Path) -> Path:
    commits = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    return max(commits, key=lambda p: int(p.name))


async def stop(query: StreamingQuery) -> None:
    await asyncio.to_thread(query.stop)
    assert query.exception() is None


async def test_streaming_jobs_run_once_through_relay_and_workers_even_when_a_batch_is_replayed(
    spark: SparkSession,
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    redis: aioredis.Redis,
    eventually: Eventually,
    topic_end: Callable[[str], int],
    tmp_path: Path,
) -> None:
    topic, queue = make_topic("jobs", partitions=3), f"{prefix}.q"
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    src, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    src.mkdir()
    per_file, files = 50, 4
    total = per_file * files
    # the replayed batch arrives after its jobs finished: Spark-fed queues use the 'finished' dedup policy
    await engine.admin.configure_queue(queue, QueueConfig(dedup="finished"))

    registry = Registry()
    runs: Counter[str] = Counter()
    args_seen: list[int] = []

    @registry.job("spark.e2e", queue=queue)
    async def handle(n: int) -> None:
        runs[current_job().id] += 1
        args_seen.append(n)

    def start() -> StreamingQuery:
        rows: DataFrame = spark.readStream.schema("n LONG").option("maxFilesPerTrigger", 1).json(str(src))
        records = to_kafka_records(rows, routing=routing, queue=queue, kind="spark.e2e", args_cols=["n"])
        return write_stream(records, checkpoint=checkpoint, bootstrap=endpoints.kafka_bootstrap)

    async with (
        make_relay(topic) as relay,
        Pool(registry, engine, PoolConfig([queue], concurrency=20), redis=redis),
    ):
        counts = relay.relays[0].counts
        for i in range(2):
            drop_file(src, i, range(i * per_file, (i + 1) * per_file))
        query = await asyncio.to_thread(start)
        await asyncio.to_thread(query.processAllAvailable)  # two micro-batches, one per file
        await eventually(lambda: len(runs), lambda k: k == 2 * per_file)
        await stop(query)  # mid-way: half of the input is still to come

        # The crash window of an at-least-once sink: the last batch reached Kafka but its commit did not
        # reach the checkpoint. Removing that commit makes the restarted query write the batch again.
        last = latest_commit(checkpoint)
        last.unlink()
        (last.parent / f".{last.name}.crc").unlink(missing_ok=True)

        for i in range(2, files):
            drop_file(src, i, range(i * per_file, (i + 1) * per_file))
        query = await asyncio.to_thread(start)
        try:
            await asyncio.to_thread(query.processAllAvailable)
            written = await asyncio.to_thread(topic_end, topic)
            assert written == total + per_file, "the replayed batch reached Kafka a second time"
            await eventually(
                lambda: sum(counts.get(k, 0) for k in ("written", "duplicate", "dead")),
                lambda k: k == written,
            )
            await eventually(lambda: len(runs), lambda k: k == total)
            await eventually(lambda: engine.reads.depth(queue), lambda d: d.finished == total)
        finally:
            await stop(query)

    assert (counts.get("written"), counts.get("duplicate"), counts.get("dead", 0)) == (total, per_file, 0)
    assert set(runs.values()) == {1}, "each job id executed exactly once"
    assert sorted(args_seen) == list(range(total))
