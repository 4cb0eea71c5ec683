"""A silent worker is found, and a stuck one lets its jobs go (issue 57, item 4), on the real stack.

* A pool whose event loop is blocked by a handler's synchronous work (in a thread of its own here, with
  its own loop and Redis client: a process of its own to the pool) stops beating, claiming and renewing
  its leases at once: it is judged silent on its waiting queue — by ``jobq status``'s rows, the dashboard's
  judgment and the scheduler's ``jobq_worker_silent_seconds`` — and its job is reaped at its lease's end
  and finished by another pool while it is still blocked.
* A pool whose Redis connection is half-open (toxiproxy's black hole: connections stay open, no byte
  passes) gives its job up when the lease ends without an acknowledged extend, whatever the socket
  timeout (35 s by default); another pool finishes the job; the cut pool stops beating (seen gone) and says
  it is not ready.

The thresholds are cut for the test (``presence.BEAT_S``, ``ALIVE_S``, ``SILENT_AFTER_S``); leases are the
pools' own ``lease_ms``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from jqcore.clock import now_ms
from jqcore.envelope import new_envelope
from jqcore.settings.servers import RedisSettings
from jqcore.testsignal import enable_all
from jqengine import Engine, connect
from jqruntime.stores import presence
from jqsched.service import SchedulerService
from jqstack.manager import Endpoints
from jqstack.testing.faultproxy import FaultProxy
from jqweb.overview import alerts, claimer_rows, queue_row, redis_state
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

LEASE_MS = 3000
"""Longer than the silence threshold below: the stuck pool is flagged before its job moves on."""


@pytest.fixture(autouse=True)
def _short_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presence, "BEAT_S", 0.1)
    monkeypatch.setattr(presence, "ALIVE_S", 0.6)
    monkeypatch.setattr(presence, "SILENT_AFTER_S", 1.0)


async def enqueue(engine: Engine, queue: str, kind: str) -> str:
    env = new_envelope(queue, kind, None)
    await engine.enqueue_batch([env])
    return env.id


async def judged(redis: Any, engine: Engine, queue: str, name: str) -> dict[str, Any] | None:
    """``name``'s row as ``jobq status`` judges it (:func:`jqweb.overview.claimer_rows` over the queue's
    row), None while it has no record."""
    rows = claimer_rows(await presence.claimers(redis), now_ms(), [await queue_row(engine, queue)])
    return next((r for r in rows if r["name"] == name), None)


def helper(queue: str) -> tuple[Registry, dict[str, str]]:
    """The handlers of the pool that takes over (it serves one more queue, so its name, ``host:pid:queues``,
    is not the stuck pool's in this one process)."""
    reg, ran = Registry(), {}

    @reg.job("hold", queue=queue)
    async def hold() -> str:
        ran[current_job().id] = "helper"
        return "helper"

    @reg.job("plain", queue=queue)
    async def plain() -> None:
        return None

    return reg, ran


class LoopThread:
    """An event loop in a thread: what a blocked handler blocks is this loop, not the test's."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="stuck-pool", daemon=True)
        self._thread.start()

    async def run(self, coro: Any) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def test_a_pool_whose_loop_is_blocked_is_flagged_and_its_job_moves_on_within_its_lease(
    engine: Engine,
    redis: aioredis.Redis,
    endpoints: Endpoints,
    prefix: str,
    scheduler: SchedulerService,
    eventually: Any,
) -> None:
    q, other = f"{prefix}.w", f"{prefix}.other"
    stuck_job = await enqueue(engine, q, "hold")
    waiting = await enqueue(engine, q, "plain")  # what the stuck pool would claim next: its queue waits
    entered, release = asyncio.Event(), threading.Event()
    test_loop = asyncio.get_running_loop()

    stuck_reg = Registry()

    @stuck_reg.job("hold", queue=q)
    async def hold() -> str:
        test_loop.call_soon_threadsafe(entered.set)
        release.wait()  # synchronous work in an async handler: the pool's whole loop stands still
        return "stuck pool"

    side = LoopThread()
    stuck: Pool | None = None

    async def start_stuck() -> Pool:
        client = aioredis.Redis.from_url(endpoints.redis_url or "")
        pool = Pool(
            stuck_reg, Engine(client), PoolConfig([q], concurrency=1, lease_ms=LEASE_MS), redis=client
        )
        await pool.start()
        return pool

    async def stop_stuck(pool: Pool) -> None:
        await pool.stop()
        await pool.engine._client.aclose()

    try:
        stuck = await side.run(start_stuck())
        await asyncio.wait_for(entered.wait(), 30)
        claimed = await engine.reads.get_job(q, stuck_job)
        assert claimed is not None
        assert claimed.worker == stuck._presence.name
        assert claimed.lease_deadline is not None

        # flagged: no claim for the threshold while its queue's next job waited as long, and no heartbeat
        row = await eventually(
            lambda: judged(redis, engine, q, stuck._presence.name), lambda r: r and r["silent"]
        )
        assert (row["silent"], row["alive"], row["slots"]) == ([q], False, 1)
        status = await redis_state(redis)  # what `jobq status` reads, and its overview's alerts
        assert [c["silent"] for c in status["claimers"] if c["name"] == stuck._presence.name] == [[q]]
        raised = [a for a in alerts({"redis": status}) if stuck._presence.name in a.what]
        assert [a.rule for a in raised] == ["JobqWorkerSilent"]
        assert not release.is_set()
        await scheduler.sample_signals()  # the metric the alert reads, by the same judgment
        labels = {"queue": q, "role": "worker", "worker": stuck._presence.name}
        assert (REGISTRY.get_sample_value("jobq_worker_silent_seconds", labels) or 0) >= 1.0

        # another pool takes the waiting job at once and the stuck one's when its lease ends
        reg, ran = helper(q)
        took = Pool(reg, engine, PoolConfig([q, other], concurrency=2), redis=redis)
        enable_all(took.signals)
        async with took:
            await took.signals.finished.wait_for(lambda done: done[0] == waiting)
            await took.signals.finished.wait_for(lambda done: done[0] == stuck_job, timeout_s=30)
            assert not release.is_set(), "moved on while the stuck pool still runs it"
            done = await engine.reads.get_job(q, stuck_job)
            assert done is not None
            assert (done.state, done.attempt, done.result, done.worker) == (
                "completed",
                2,
                '"helper"',
                took._presence.name,
            )
            assert done.history[0]["outcome"] == "lease_expired", "reaped: the stuck pool never renewed"
            started = done.started_at or 0
            assert claimed.lease_deadline <= started < claimed.lease_deadline + LEASE_MS, (
                "claimed elsewhere once its lease ended, within a lease: its loop renewed nothing"
            )
            await scheduler.sample_signals()
            assert REGISTRY.get_sample_value("jobq_worker_silent_seconds", labels) is None, (
                "nothing waits now"
            )

            release.set()  # the stuck pool's loop runs again: its late outcome is refused, nothing rewritten
            await eventually(lambda: len(stuck.in_flight), lambda n: n == 0, timeout_s=30)
        after = await engine.reads.get_job(q, stuck_job)
        assert after is not None
        assert (after.result, after.attempt) == ('"helper"', 2)
        assert ran == {stuck_job: "helper"}
    finally:
        release.set()
        if stuck is not None:
            await side.run(stop_stuck(stuck))
        side.close()


@pytest.fixture(scope="module")
def fault_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    with FaultProxy(tmp_path_factory.mktemp("toxiproxy")) as proxy:
        yield proxy


@pytest.fixture
async def cut_off(
    fault_proxy: FaultProxy, endpoints: Endpoints, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[FaultProxy, str, Any]]:
    """(the proxy, its link's name, a Redis client through it with the default settings: 35 s socket
    timeout)."""
    at = urlsplit(endpoints.redis_url or "")
    name = f"redis-{request.node.name}"
    port = fault_proxy.add(name, f"{at.hostname}:{at.port}")
    client = connect(RedisSettings(url=f"redis://127.0.0.1:{port}"))
    try:
        yield fault_proxy, name, client
    finally:
        fault_proxy.restore(name)
        await client.aclose()
        fault_proxy.remove(name)


async def test_a_pool_on_a_half_open_redis_connection_gives_its_job_up_and_is_seen_gone(
    engine: Engine,
    redis: aioredis.Redis,
    prefix: str,
    scheduler: SchedulerService,
    cut_off: tuple[FaultProxy, str, Any],
    eventually: Any,
) -> None:
    proxy, link, through = cut_off
    q, other = f"{prefix}.w", f"{prefix}.other"
    job_id = await enqueue(engine, q, "hold")
    started, given_up = asyncio.Event(), asyncio.Event()
    cut_reg = Registry()

    @cut_reg.job("hold", queue=q)
    async def hold() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            given_up.set()
            raise

    cut = Pool(cut_reg, Engine(through), PoolConfig([q], concurrency=1, lease_ms=2000), redis=through)
    await cut.start()
    try:
        await asyncio.wait_for(started.wait(), 30)
        proxy.blackhole(link)  # open connections stay open; nothing passes either way

        reg, ran = helper(q)
        took = Pool(reg, engine, PoolConfig([q, other]), redis=redis)
        enable_all(took.signals)
        async with took:
            await asyncio.wait_for(given_up.wait(), 30)  # its lease ended without an extend: let go
            assert cut.in_flight == {}
            await took.signals.finished.wait_for(lambda done: done[0] == job_id, timeout_s=30)
            got = await engine.reads.get_job(q, job_id)
            assert got is not None
            assert (got.state, got.attempt, got.worker) == ("completed", 2, took._presence.name)
            assert got.history[0]["outcome"] == "lease_expired"
            assert ran == {job_id: "helper"}

            row = await eventually(
                lambda: judged(redis, engine, q, cut._presence.name), lambda r: r and not r["alive"]
            )
            assert row["beat_age_s"] >= presence.ALIVE_S, "seen gone: no heartbeat gets through"
            found = await cut.readiness()
            assert "redis_unreachable" in [p.code for p in found.problems], found
    finally:
        proxy.restore(link)  # toxiproxy closes the connections it held: the cut pool's calls fail, then work
        await cut.stop()
