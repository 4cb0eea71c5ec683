"""A relay process paused (SIGSTOP) past its Consul session and then resumed gets not one job accepted;
the relay that took over writes everything exactly once."""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import consul
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jqrelay.elector import Role
from jqrelay.main import RelayService
from jqstack.manager import Endpoints
from jqstack.supervise import Child

pytestmark = pytest.mark.faults


def relay_metrics(port: int, topic: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("topic") != topic:
                continue
            if s.name == "jobq_relay_records_total":
                out[s.labels["stage"]] = s.value
            elif s.name == "jobq_relay_leader":
                out["leader"] = s.value
    return out


async def test_sigstopped_relay_gets_nothing_accepted_after_resume(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    relay_process: Callable[..., Awaitable[tuple[Child, int]]],
    produce_jobs: Callable[..., Awaitable[list[str]]],
    pending: Callable[[str], Awaitable[int]],
    eventually: Callable[..., Awaitable[Any]],
    offsets: Callable[..., Any],
) -> None:
    topic, queue = make_topic("jobs"), f"{prefix}.q"
    proc, port = await relay_process(
        "relay-paused", [topic], JOBQ_RELAY_SESSION_TTL_S="10", JOBQ_RELAY_LOCK_DELAY_S="0"
    )
    host, cport = endpoints.consul_addr.rsplit(":", 1)
    kv = consul.Consul(host=host, port=int(cport)).kv
    lock_key = f"jobq-test/{prefix}/locks/{topic}"
    try:
        # the paused relay is another process: its lock, its writes and its metrics are watched
        await eventually(
            lambda: asyncio.to_thread(kv.get, lock_key), lambda r: r[1] and r[1].get("Session"), 120
        )
        await produce_jobs(topic, queue, 50)
        await eventually(lambda: pending(queue), lambda n: n == 50)
        # The relay counts a write after Redis answered and commits after that, asynchronously: wait for
        # both (pausing it before its commit reached Kafka would make the next holder re-read the 50).
        before = await eventually(
            lambda: asyncio.to_thread(relay_metrics, port, topic),
            lambda m: m.get("written") == 50 and m.get("leader") == 1,
        )
        await eventually(lambda: offsets(topic), lambda c: c[0] == 50)
        assert before["written"] == 50

        proc.signal(signal.SIGSTOP)
        await produce_jobs(topic, queue, 50)  # fetched by nobody yet; the paused relay may hold some
        async with make_relay(topic, "relay-new") as other:
            # Consul ends the paused holder's session after its TTL (up to twice it), then the lock moves
            await other.relays[0].elector.wait_role(Role.LEADER, timeout_s=120)
            await other.signals[topic].batch.wait_for(lambda c: c.get("written", 0) >= 50)
            assert await pending(queue) == 100
            proc.signal(signal.SIGCONT)
            after = await eventually(
                lambda: asyncio.to_thread(relay_metrics, port, topic), lambda m: m.get("leader") == 0, 120
            )
            assert after.get("written", 0) == 50, "the resumed relay got nothing accepted"
            assert other.relays[0].counts.get("written") == 50
            assert other.relays[0].counts.get("duplicate", 0) == 0
            assert await pending(queue) == 100
    finally:
        proc.signal(signal.SIGCONT)  # the fixture stops it
