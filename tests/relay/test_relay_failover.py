"""Two relay processes, four topics: each topic held by exactly one; kill -9 one relay and its topics move
to the other within TTL + lock-delay; no acknowledged job lost, duplicates absorbed (and counted)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import consul
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobq.stack.manager import Endpoints
from jobq.stack.procs import free_port
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.kafka import AsyncProducer, Record
from jqcore.state import Engine, reads

pytestmark = pytest.mark.faults

TTL_S, LOCK_DELAY_S = 10, 1


def stage_totals(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "jobq_relay_records_total":
                out[s.labels["stage"]] = out.get(s.labels["stage"], 0) + s.value
    return out


@pytest.fixture
def relays(endpoints: Endpoints, prefix: str) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], int]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(holder: str, topics: list[str]) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        env = {
            **os.environ,
            "JOBQ_RELAY_TOPICS": ",".join(topics),
            "JOBQ_RELAY_HOLDER": holder,
            "JOBQ_RELAY_KV_PREFIX": f"jobq-test/{prefix}",
            "JOBQ_RELAY_GROUP_PREFIX": f"{prefix}-relay",
            "JOBQ_RELAY_SESSION_TTL_S": str(TTL_S),
            "JOBQ_RELAY_LOCK_DELAY_S": str(LOCK_DELAY_S),
            "JOBQ_RELAY_METRICS_PORT": str(port),
            "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
            "JOBQ_REDIS_URL": endpoints.redis_url or "",
            "CONSUL_HTTP_ADDR": endpoints.consul_addr,
        }
        proc = subprocess.Popen([sys.executable, "-m", "jqrelay"], env=env, stdout=subprocess.DEVNULL)
        procs.append(proc)
        return proc, port

    yield start
    for p in procs:
        if p.poll() is None:
            p.terminate()
            p.wait(30)


async def test_kill_9_moves_the_topics_and_loses_nothing(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    relays: Callable[..., tuple[subprocess.Popen[bytes], int]],
    producer: AsyncProducer,
    engine: Engine,
    eventually: Callable[..., Awaitable[Any]],
) -> None:
    topics = [make_topic(f"t{i}") for i in range(4)]
    host, cport = endpoints.consul_addr.rsplit(":", 1)
    kv = consul.Consul(host=host, port=int(cport)).kv

    def holders() -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for t in topics:
            _, entry = kv.get(f"jobq-test/{prefix}/locks/{t}")
            live = entry is not None and entry.get("Session")
            out[t] = orjson.loads(entry["Value"])["holder"] if live and entry else None
        return out

    (a, a_port), (b, b_port) = relays("relay-a", topics), relays("relay-b", topics)
    held = await eventually(lambda: asyncio.to_thread(holders), lambda h: all(h.values()))
    assert set(held.values()) <= {"relay-a", "relay-b"}, "each topic has exactly one holder"

    async def produce(round_: int) -> None:
        records = []
        for i, t in enumerate(topics):
            for j in range(100):
                env = new_envelope(f"{prefix}.q{i}", "k", j, id=f"r{round_}-{i}-{j}")
                records.append(Record(t, encode(env), record_key(env)))
        await producer.produce_many(records)

    async def total() -> int:
        return sum([(await reads.depth(engine.client, f"{prefix}.q{i}")).pending for i in range(4)])

    await produce(1)
    await eventually(total, lambda n: n == 400)
    victim, survivor, survivor_port = (a, b, b_port) if "relay-a" in held.values() else (b, a, a_port)
    victim_name = "relay-a" if victim is a else "relay-b"
    await produce(2)  # some of these may be in the victim's hands, written but not committed
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert survivor.poll() is None
    # Consul invalidates the dead session after its TTL (up to twice it in practice), then lock-delay
    moved = await eventually(
        lambda: asyncio.to_thread(holders),
        lambda h: all(v not in (None, victim_name) for v in h.values()),
        2 * TTL_S + LOCK_DELAY_S + 15,
    )
    assert set(moved.values()) == {"relay-a" if victim_name == "relay-b" else "relay-b"}
    await eventually(total, lambda n: n == 800, 60)
    stages = await eventually(
        lambda: asyncio.to_thread(stage_totals, survivor_port), lambda s: s.get("read", 0) > 0
    )
    assert await total() == 800, "nothing lost, nothing stored twice"
    print(f"survivor stages after takeover: {stages}")  # duplicates = re-read uncommitted batches
