"""``./run bench stack``: the physical floor every later figure is compared with.

* cold start (fresh data folder: Kafka formats its storage) and warm start (data kept) of each server,
  from spawn to its first real answer (Kafka metadata, Consul leader, Redis PING);
* a bare confluent-kafka loop: produce N records (idempotent, ``acks=all``) and consume them back;
* a bare redis-py (asyncio) pipeline: RPUSH N items, then LPOP them back in batches.

It runs on its own throw-away stack (free ports), so it never disturbs a running ``jobq stack``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis.asyncio as aioredis
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from jqstack.manager import Stack, StackSpec
from loadtest.report import Report, repeat
from loadtest.stacks import up_timed

__all__ = ["run"]

RECORD_BYTES = 256
BATCH = 1000


def _start_times(stack: Stack) -> dict[str, float]:
    stack.down(purge=True)
    fresh = Stack(stack.spec)
    out = {f"cold start {k}": v for k, v in up_timed(fresh).items()}
    fresh.down()
    warm = Stack(stack.spec)
    out |= {f"warm start {k}": v for k, v in up_timed(warm).items()}
    return out


def _kafka_round(bootstrap: str, n: int) -> dict[str, float]:
    topic = f"bench.stack.{os.getpid()}.{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "log_level": 0,
        }
    )
    payload = b"x" * RECORD_BYTES
    errors: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    started = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, payload, str(i).encode(), on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) or errors:
        raise KafkaException(f"{len(errors)} delivery errors; first: {errors[:1]}")
    produce_s = time.perf_counter() - started
    consume_s = _consume_all(bootstrap, topic, n)
    admin.delete_topics([topic])
    return {"kafka produce": n / produce_s, "kafka consume": n / consume_s}


def _consume_all(bootstrap: str, topic: str, n: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    # assign (no group join) so the figure is the fetch rate, not the rebalance delay
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    seen, started, deadline = 0, time.perf_counter(), time.monotonic() + 120
    while seen < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumed {seen} of {n} records in 120 s")
        seen += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


async def _redis_round(url: str, n: int) -> dict[str, float]:
    client = aioredis.Redis.from_url(url)
    key = f"bench:stack:{os.getpid()}"
    payload = b"x" * RECORD_BYTES
    try:
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(BATCH, n - start)):
                pipe.rpush(key, payload)
            await pipe.execute()
        push_s = time.perf_counter() - started
        started, got = time.perf_counter(), 0
        while got < n:
            items = await client.lpop(key, BATCH)
            got += len(items or [])
        pop_s = time.perf_counter() - started
    finally:
        await client.delete(key)
        await client.aclose()
    return {"redis pipelined push": n / push_s, "redis batched pop": n / pop_s}


def run(quick: bool = False) -> Report:
    """Measure and return the report (not yet saved)."""
    reps = 1 if quick else 3
    n_kafka, n_redis = (5_000, 10_000) if quick else (200_000, 500_000)
    report = Report(
        "stack", {"reps": reps, "kafka_records": n_kafka, "redis_items": n_redis, "bytes": RECORD_BYTES}
    )
    stack = Stack(StackSpec(name=f"bench-{os.getpid()}", redis_mode="single", fixed_ports=False))
    try:
        for name, samples in repeat(lambda: _start_times(stack), reps).items():
            report.add(name, "s", samples)
        stack = Stack(stack.spec)
        endpoints = stack.up()
        assert endpoints.redis_url is not None
        url = endpoints.redis_url
        rates = repeat(lambda: _kafka_round(endpoints.kafka_bootstrap, n_kafka), reps)
        rates |= repeat(lambda: asyncio.run(_redis_round(url, n_redis)), reps)
        for name, samples in rates.items():
            report.add(name, "records/s", samples)
    finally:
        Stack(stack.spec).down(purge=True)
    report.notes.append("cold = empty data folder (Kafka formats storage); warm = restart with data kept")
    report.notes.append("provisioning (Maven, Go build, apt) is cached and not part of these start times")
    return report
