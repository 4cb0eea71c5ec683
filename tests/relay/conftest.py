"""Relays against the real Kafka, Redis and Consul of the session stack."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import redis.asyncio as aioredis
from confluent_kafka import Consumer, TopicPartition

from jobq.stack.manager import Endpoints
from jobq.stack.procs import free_port
from jqcore.state import Engine

Offsets = Callable[[str, str], Awaitable[tuple[int, int]]]
"""``await offsets(group, topic)``: (sum of the group's committed offsets, sum of end offsets)."""

RelayProcess = tuple[subprocess.Popen[bytes], int]
"""A ``python -m jqrelay`` process and the port of its ``/metrics``."""


@pytest.fixture
async def engine(endpoints: Endpoints) -> AsyncIterator[Engine]:
    client = aioredis.Redis.from_url(endpoints.redis_url or "")
    yield Engine(client)
    await client.aclose()


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
def offsets(endpoints: Endpoints) -> Offsets:
    """Committed and end offsets of a consumer group over a topic (read in a thread)."""

    async def read(group: str, topic: str) -> tuple[int, int]:
        return await asyncio.to_thread(_offsets, endpoints, group, topic)

    return read


@pytest.fixture
def relay_process(endpoints: Endpoints, prefix: str) -> Iterator[Callable[..., Awaitable[RelayProcess]]]:
    """``await start(holder, topics, **env)``: a relay process of this test's prefix, returned once it
    serves ``/metrics``; stopped (SIGCONT, SIGTERM, then SIGKILL if slow) at the end of the test.

    Its metrics port is free when picked but not reserved: on a shared machine something else can take
    it before the relay binds it, and the relay then exits at start. An exit before serving is retried
    with a fresh port (three times at most); a relay that never answers fails the test."""
    procs: list[subprocess.Popen[bytes]] = []

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
        codes: list[int] = []
        for _ in range(3):
            port = free_port()
            proc = subprocess.Popen(  # noqa: ASYNC220 (starting it is instant; its readiness is awaited)
                [sys.executable, "-m", "jqrelay"],
                env={**env, "JOBQ_RELAY_METRICS_PORT": str(port)},
                stdout=subprocess.DEVNULL,
            )
            procs.append(proc)
            if await _serves_metrics(proc, port, 120):
                return proc, port
            codes.append(proc.returncode)
        raise AssertionError(f"the relay exited before serving /metrics, three times (exit codes {codes})")

    yield start
    for proc in procs:
        _stop(proc)


async def _serves_metrics(proc: subprocess.Popen[bytes], port: int, timeout_s: float) -> bool:
    """True once ``/metrics`` answers; False if the process exited first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while proc.poll() is None:
        try:
            await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
            return True
        except OSError:
            pass
        if loop.time() > deadline:
            raise AssertionError(f"the relay did not serve /metrics on port {port} within {timeout_s}s")
        await asyncio.sleep(0.1)
    return False


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)  # harmless when running; needed when the test paused it
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
