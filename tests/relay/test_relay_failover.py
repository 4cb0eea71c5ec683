"""Two relay processes, four topics: each topic held by exactly one; kill -9 one relay and its topics move
to the other within TTL + lock-delay; no acknowledged job lost, duplicates absorbed (and counted)."""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import consul
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jqcore.envelope import encode, new_envelope, record_key
from jqengine import Engine
from jqruntime.kafka import AsyncProducer, Record
from jqstack.manager import Endpoints
from jqstack.supervise import Child

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


async def test_kill_9_moves_the_topics_and_loses_nothing(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    relay_process: Callable[..., Awaitable[tuple[Child, int]]],
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

    timing = {"JOBQ_RELAY_SESSION_TTL_S": str(TTL_S), "JOBQ_RELAY_LOCK_DELAY_S": str(LOCK_DELAY_S)}
    (a, a_port), (b, b_port) = await asyncio.gather(
        relay_process("relay-a", topics, **timing), relay_process("relay-b", topics, **timing)
    )
    # both relays are processes: nothing in this one signals their steps, so what they leave is watched
    held = await eventually(lambda: asyncio.to_thread(holders), lambda h: all(h.values()), 120)
    assert set(held.values()) <= {"relay-a", "relay-b"}, "each topic has exactly one holder"

    async def produce(round_: int) -> None:
        records = []
        for i, t in enumerate(topics):
            for j in range(100):
                env = new_envelope(f"{prefix}.q{i}", "k", j, id=f"r{round_}-{i}-{j}")
                records.append(Record(t, encode(env), record_key(env)))
        await producer.produce_many(records)

    async def total() -> int:
        return sum([(await engine.reads.depth(f"{prefix}.q{i}")).pending for i in range(4)])

    await produce(1)
    await eventually(total, lambda n: n == 400, 120)
    victim, survivor, survivor_port = (a, b, b_port) if "relay-a" in held.values() else (b, a, a_port)
    victim_name = "relay-a" if victim is a else "relay-b"
    await produce(2)  # some of these may be in the victim's hands, written but not committed
    victim.signal(signal.SIGKILL)  # the crash under test
    await victim.exited(60)
    assert survivor.running()
    # Consul invalidates the dead session after its TTL (up to twice it in practice), then lock-delay;
    # the rest of the bound is slack for a loaded machine (this waits for the event, not the bound)
    moved = await eventually(
        lambda: asyncio.to_thread(holders),
        lambda h: all(v not in (None, victim_name) for v in h.values()),
        2 * TTL_S + LOCK_DELAY_S + 90,
    )
    assert set(moved.values()) == {"relay-a" if victim_name == "relay-b" else "relay-b"}
    await eventually(total, lambda n: n == 800, 120)
    stages = await eventually(
        lambda: asyncio.to_thread(stage_totals, survivor_port), lambda s: s.get("read", 0) > 0
    )
    assert await total() == 800, "nothing lost, nothing stored twice"
    print(f"survivor stages after takeover: {stages}")  # duplicates = re-read uncommitted batches
