"""The signals users feel, read at O(1) a queue (``jqengine/signals.py``) and exported by the scheduler
that keeps the queue: depth per state, the head's wait since it was due, pause, outcome counters."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import REGISTRY

from jqcore.clock import now_ms
from jqcore.envelope import Envelope
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings, EventSettings, FarSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqengine import Engine
from jqsched.service import SchedulerService
from jqsched.settings import SchedulerSettings

Job = Callable[..., Envelope]


async def test_a_queue_signals_its_depth_its_oldest_wait_and_its_outcomes(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    empty = f"{q}.empty"
    [nothing] = await engine.reads.queue_signals([empty], now=t0)
    assert (nothing.pending, nothing.oldest_pending_age_ms, nothing.paused) == (0, 0, False)
    assert nothing.outcomes == {"completed": 0, "retried": 0, "errored": 0, "canceled": 0}

    await engine.enqueue_batch([job(q, id=f"j{i}") for i in range(4)], now_ms=t0)
    await engine.enqueue_batch([job(q, id="later", run_at=t0 + 60_000)], now_ms=t0)
    claimed = await engine.jobs.claim(q, 3, now_ms=t0 + 1_000)
    await engine.jobs.complete(q, (claimed[0].id, claimed[0].attempt, claimed[0].token), now_ms=t0 + 1_100)
    triple = (claimed[1].id, claimed[1].attempt, claimed[1].token)
    await engine.jobs.fail(q, triple, "boom", retry_delay_ms=10_000, now_ms=t0 + 1_200)
    await engine.jobs.fail(
        q, (claimed[2].id, claimed[2].attempt, claimed[2].token), "bad", permanent=True, now_ms=t0 + 1_300
    )

    signals, again = await engine.reads.queue_signals([q, empty], now=t0 + 5_000)
    assert again.queue == empty
    assert (signals.pending, signals.delayed, signals.running, signals.dead) == (1, 2, 0, 1)
    assert signals.oldest_pending_age_ms == 5_000  # j3 has waited since its enqueue
    assert signals.outcomes == {"completed": 1, "retried": 1, "errored": 1, "canceled": 0}

    # a retried job waits from its retry's run_at (t0 + 11.2 s), not from its first enqueue
    await engine.jobs.claim(q, 1, now_ms=t0 + 6_000)  # j3 leaves: only delayed jobs remain
    await engine.timers.promote_due(q, now_ms=t0 + 11_200)
    [after] = await engine.reads.queue_signals([q], now=t0 + 13_700)
    assert (after.pending, after.oldest_pending_age_ms) == (1, 2_500)
    assert (
        await engine.reads.depth(q, now=t0 + 13_700)
    ).oldest_pending_age_ms == 2_500  # `jobq status` agrees

    await engine.admin.pause(q)
    [paused] = await engine.reads.queue_signals([q], now=t0 + 13_700)
    assert paused.paused


def _sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def test_the_scheduler_exports_the_queues_it_keeps_and_forgets_the_others(
    engine: Engine, q: str, job: Job
) -> None:
    settings = SchedulerSettings(name=f"{q}-sched", cron=False, far=False, events=False)
    svc = SchedulerService(
        settings,
        RedisSettings(),
        ConsulSettings(),
        CronSettings(),
        KafkaSettings(),
        FarSettings(),
        EventSettings(),
        client=engine._client,
    )
    svc._connect()
    await engine.enqueue_batch([job(q, id="a", at_ms=now_ms()), job(q, id="b", at_ms=now_ms())])
    await asyncio.sleep(0.05)
    svc.timers.set_queues([q])
    await svc.sample_signals()
    assert _sample("jobq_queue_depth_jobs", queue=q, state="pending") == 2
    assert (_sample("jobq_queue_oldest_pending_age_seconds", queue=q) or 0) >= 0.05
    assert _sample("jobq_queue_paused", queue=q) == 0
    assert _sample("jobq_queue_attempts_total", queue=q, outcome="completed") == 0  # the past is not ours

    claimed = await engine.jobs.claim(q, 2)
    for c in claimed:
        await engine.jobs.complete(q, (c.id, c.attempt, c.token))
    await svc.sample_signals()
    assert _sample("jobq_queue_attempts_total", queue=q, outcome="completed") == 2
    assert _sample("jobq_queue_depth_jobs", queue=q, state="pending") == 0
    assert _sample("jobq_queue_oldest_pending_age_seconds", queue=q) == 0

    svc.timers.set_queues([])  # another instance keeps it now: no stale series of it here
    await svc.sample_signals()
    assert _sample("jobq_queue_depth_jobs", queue=q, state="pending") is None
    assert _sample("jobq_queue_attempts_total", queue=q, outcome="completed") is None

    svc.timers.set_queues([q])  # back: live series again, counting from here
    await svc.sample_signals()
    assert _sample("jobq_queue_depth_jobs", queue=q, state="pending") == 0
    assert _sample("jobq_queue_attempts_total", queue=q, outcome="completed") == 0
