"""Heartbeat canaries (Slack): every interval, one heartbeat job through the gateway to **every partition
of every topic**; workers run the built-in ``jobq.canary`` handler; the monitor times each hop and flags
a partition whose heartbeat is late or missing.

Hops, from the probe's own timestamps and the job's: ``gate`` (request sent → Kafka's ack, the 202),
``relay`` (ack → stored in Redis), ``worker`` (stored → started by a worker), ``total`` (sent → done).
Heartbeats travel in queues ``canary.<topic>`` (routed to ``<topic>``), so they never count as user jobs
in any user queue's metrics. Each partition's last result is kept in Redis for ``jobq status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import orjson

from jqcore import keys, metrics
from jqcore.aio import cancel_and_wait
from jqcore.clock import now_ms
from jqcore.errors import JobqError
from jqcore.log import get_logger
from jqcore.routing import CANARY_KIND, CANARY_PREFIX
from jqengine import RedisClient
from jqruntime.client import JobqClient
from jqruntime.health import Readiness, ping
from jqruntime.lifecycle import Service
from jqruntime.stores.presence import Presence, process_name

__all__ = ["Canary", "Probe"]

log = get_logger("canary")


@dataclass
class Probe:
    topic: str
    partition: int
    id: str
    sent_at: int
    acked_at: int


class Canary(Service):
    health_name = "canary"

    def __init__(
        self,
        client: JobqClient,
        redis: RedisClient,
        partitions: dict[str, list[int]],
        *,
        interval_s: float = 60.0,
        late_after_s: float = 30.0,
    ) -> None:
        super().__init__()
        self.client, self.redis, self.partitions = client, redis, partitions
        self.interval_s, self.late_after_s = interval_s, late_after_s
        self.outstanding: dict[tuple[str, int], Probe] = {}
        self.health: dict[tuple[str, int], dict[str, Any]] = {}
        self.rounds = 0
        self.sent_at: float | None = None
        """When the last round of heartbeats was sent (monotonic seconds; None before the first)."""
        self._round_done = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._presence = Presence(redis, "canary", process_name(), facts=self._facts)

    def _facts(self) -> dict[str, Any]:
        """What its presence record says (the dashboard's Workers page): the partitions it probes, how
        many are healthy, the rounds it sent."""
        topics = sorted(self.partitions)
        return {
            "kind": "canary",
            "topics": topics,
            "partitions": sum(len(p) for p in self.partitions.values()),
            "healthy": sum(1 for h in self.health.values() if h.get("ok")),
            "processed": self.rounds,
            "interval_s": self.interval_s,
            "state": "running" if self.sent_at is not None else "waiting for a gateway",
        }

    async def _start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._send_loop(), name="canary:send"),
            asyncio.create_task(self._check_loop(), name="canary:check"),
        ]
        await self._presence.start()

    async def _stop(self) -> None:
        await self._presence.stop()
        for t in self._tasks:
            await cancel_and_wait(t)  # repeated: a cancel redis-py swallowed must not keep a loop alive

    async def _readiness(self, found: Readiness) -> None:
        """Ready: beating — a round of heartbeats went out within two intervals (plus the lateness
        allowance: a round waits for slow gateways), and Redis (where results are kept) answers."""
        await ping("Redis", self.redis.ping(), found, code="redis_unreachable")
        window = 2 * self.interval_s + self.late_after_s
        if self.sent_at is None:
            found.add("not_beating", "no heartbeat round sent yet (waiting for a gateway to be ready)")
        elif (age := time.monotonic() - self.sent_at) > window:
            found.add(
                "not_beating", f"the last heartbeat round went out {age:.0f} s ago (limit {window:g} s)"
            )
        found.facts.update(rounds=self.rounds, partitions=sum(len(p) for p in self.partitions.values()))

    async def wait_round(self, timeout_s: float) -> None:
        """Wait until every partition's heartbeat of a round came back (or was flagged)."""
        self._round_done.clear()
        async with asyncio.timeout(timeout_s):
            await self._round_done.wait()

    async def one_round(self, gateway_wait_s: float = 60.0) -> dict[tuple[str, int], dict[str, Any]]:
        """One round on its own (``jobq canary --once``, the Helm chart's test): wait for a gateway, send a
        heartbeat to every partition, and check until each arrived or was flagged late; a heartbeat still
        unanswered ``late_after_s`` plus 10 s after it left (the gateway's reads failing) is flagged too.
        Returns each partition's result (``ok``, ``problem``, ``ms``), also recorded as a round of the
        running canary's is."""
        await self._gateways_ready(gateway_wait_s)
        await self.send_round()
        self.sent_at = time.monotonic()
        deadline = self.sent_at + self.late_after_s + 10
        while self.outstanding and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            with contextlib.suppress(JobqError, OSError):
                await self.check_once()
        for (topic, partition), _probe in list(self.outstanding.items()):
            del self.outstanding[(topic, partition)]
            await self._record(topic, partition, {"ok": False, "problem": "late: no answer", "at": now_ms()})
        return dict(self.health)

    async def _send_loop(self) -> None:
        await self._gateways_ready()
        while True:
            started = time.monotonic()
            await self.send_round()
            self.sent_at = time.monotonic()
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    async def _gateways_ready(self, timeout_s: float = 60.0) -> None:
        """At start, wait (bounded) for a gateway to answer /readyz, so a fleet starting together does
        not flag every partition in its first round."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            try:
                await self.client.request("GET", "/readyz")
                return
            except (JobqError, OSError):
                await asyncio.sleep(0.5)

    async def send_round(self) -> None:
        for topic, parts in self.partitions.items():
            for p in parts:
                if (topic, p) in self.outstanding:  # the previous one is still out: it will be flagged
                    continue
                sent = now_ms()
                try:
                    ans = await self.client.enqueue_one(
                        CANARY_PREFIX + topic, CANARY_KIND, {"sent_at": sent}, partition=p, canary=True
                    )
                except (JobqError, OSError) as exc:
                    problem = f"gateway: {getattr(exc, 'code', type(exc).__name__)}"
                    await self._record(topic, p, {"ok": False, "problem": problem, "at": sent})
                    continue
                acked = now_ms()
                metrics.CANARY_SENT.labels(topic, str(p)).inc()
                metrics.CANARY_LATENCY.labels(topic, str(p), "gate").observe((acked - sent) / 1000)
                self.outstanding[(topic, p)] = Probe(topic, p, ans["id"], sent, acked)

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            with contextlib.suppress(Exception):
                await self.check_once()

    async def check_once(self) -> None:
        for key, probe in list(self.outstanding.items()):
            info = await self.client.get_job(CANARY_PREFIX + probe.topic, probe.id)
            now = now_ms()
            if info is not None and info.get("state") == "completed":
                del self.outstanding[key]
                await self._arrived(probe, info)
            elif now - probe.sent_at > self.late_after_s * 1000:
                del self.outstanding[key]
                where = f"in Redis, {info.get('state')}" if info else "not in Redis (not relayed)"
                await self._record(
                    probe.topic, probe.partition, {"ok": False, "problem": f"late: {where}", "at": now}
                )
        if not self.outstanding:
            self.rounds += 1
            self._round_done.set()

    async def _arrived(self, probe: Probe, info: dict[str, Any]) -> None:
        stored, started, done = info.get("enqueued_at"), info.get("started_at"), info.get("finished_at")
        stages = {
            "gate": probe.acked_at - probe.sent_at,
            "relay": max(0, (stored or probe.acked_at) - probe.acked_at),
            "worker": max(0, (started or 0) - (stored or 0)) if started and stored else None,
            "total": (done or now_ms()) - probe.sent_at,
        }
        for stage, ms in stages.items():
            if ms is not None and stage != "gate":
                metrics.CANARY_LATENCY.labels(probe.topic, str(probe.partition), stage).observe(ms / 1000)
        await self._record(probe.topic, probe.partition, {"ok": True, "ms": stages, "at": now_ms()})

    async def _record(self, topic: str, partition: int, result: dict[str, Any]) -> None:
        self.health[(topic, partition)] = result
        metrics.CANARY_HEALTHY.labels(topic, str(partition)).set(1 if result["ok"] else 0)
        if not result["ok"]:
            log.warning(
                "canary flagged a partition", topic=topic, partition=partition, problem=result["problem"]
            )
        with contextlib.suppress(Exception):
            await self.redis.hset(keys.CANARY_HEALTH_KEY, f"{topic}/{partition}", orjson.dumps(result))
