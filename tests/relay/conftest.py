"""Relays against the real Kafka, Redis and Consul of the session stack."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from jqcore.envelope import encode, new_envelope, record_key
from jqengine import Engine
from jqruntime.kafka import AsyncProducer, Record
from jqstack.manager import Endpoints
from jqstack.procs import free_port
from jqstack.supervise import Child, ChildExited, Children, http_ok, python_m

Offsets = Callable[..., Awaitable[tuple[int, int]]]
"""``await offsets(topic, group=the relay's)``: (sum of the group's committed offsets, sum of end offsets)."""

RelayProcess = tuple[Child, int]
"""A ``python -m jqrelay`` process and the port of its ``/metrics``."""


Produce = Callable[..., Awaitable[list[str]]]
"""``await produce_jobs(topic, queue, n_or_ids, **envelope options)``: jobs into Kafka; their ids."""

Pending = Callable[[str], Awaitable[int]]
"""``await pending(queue)``: how many jobs of the queue are pending in Redis."""


@pytest.fixture
def produce_jobs(producer: AsyncProducer) -> Produce:
    """Jobs of kind ``k`` produced as the gateway would: ``n`` new ones (args ``{"i": i}``), or one per
    id of a list (no args)."""

    async def produce(topic: str, queue: str, jobs: int | list[str], **kw: Any) -> list[str]:
        if isinstance(jobs, int):
            envs = [new_envelope(queue, "k", {"i": i}, **kw) for i in range(jobs)]
        else:
            envs = [new_envelope(queue, "k", None, id=job_id, **kw) for job_id in jobs]
        await producer.produce_many([Record(topic, encode(e), record_key(e)) for e in envs])
        return [e.id for e in envs]

    return produce


@pytest.fixture
def pending(engine: Engine) -> Pending:
    async def depth(queue: str) -> int:
        return (await engine.reads.depth(queue)).pending

    return depth


def _offsets(endpoints: Endpoints, group: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": group, "log_level": 0})
    try:
        parts = [TopicPartition(topic, p) for p in c.list_topics(topic, timeout=10).topics[topic].partitions]
        done = sum(max(0, tp.offset) for tp in c.committed(parts, timeout=10))
        ends = sum(c.get_watermark_offsets(tp, timeout=10)[1] for tp in parts)
        return done, ends
    finally:
        c.close()


@pytest.fixture
def offsets(endpoints: Endpoints, prefix: str) -> Offsets:
    """Committed and end offsets of a consumer group over a topic (read in a thread); the group is the
    relay's of this test (``make_relay``, ``relay_process``) unless named."""

    async def read(topic: str, group: str | None = None) -> tuple[int, int]:
        return await asyncio.to_thread(_offsets, endpoints, group or f"{prefix}-relay.{topic}", topic)

    return read


@pytest.fixture
def relay_process(endpoints: Endpoints, prefix: str) -> Iterator[Callable[..., Awaitable[RelayProcess]]]:
    """``await start(holder, topics, **env)``: a relay process of this test's prefix, returned once it
    serves ``/metrics``; stopped by the supervisor (SIGCONT, SIGTERM, then SIGKILL if slow) at the end.

    Its metrics port is free when picked but not reserved: on a shared machine something else can take
    it before the relay binds it, and the relay then exits at start. An exit before serving is retried
    with a fresh port (three times at most); a relay that never answers fails the test."""
    children = Children(grace_s=60.0)

    async def start(holder: str, topics: list[str], **extra: str) -> RelayProcess:
        env = {
            **os.environ,
            "JOBQ_RELAY_TOPICS": ",".join(topics),
            "JOBQ_RELAY_HOLDER": holder,
            "JOBQ_RELAY_KV_PREFIX": f"jobq-test/{prefix}",
            "JOBQ_RELAY_GROUP_PREFIX": f"{prefix}-relay",
            "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
            "JOBQ_REDIS_URL": endpoints.redis_url or "",
            "CONSUL_HTTP_ADDR": endpoints.consul_addr,
            **extra,
        }
        codes: list[int | None] = []
        for _ in range(3):
            port = free_port()
            metrics = {"JOBQ_RELAY_METRICS_PORT": str(port)}
            # stderr (its log) is the test's, as before: pytest shows it when the test fails
            relay = children.start(holder, python_m("jqrelay"), output="inherit", env=env | metrics)
            try:
                await relay.wait_ready_async(http_ok(f"http://127.0.0.1:{port}/metrics"), timeout_s=120)
            except ChildExited as exc:
                codes.append(exc.returncode)
                continue
            return relay, port
        raise AssertionError(f"the relay exited before serving /metrics, three times (exit codes {codes})")

    with children:
        yield start
