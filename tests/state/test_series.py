"""The rate history the dashboard charts: claims count their start latency, samples turn into rates."""

from __future__ import annotations

from collections.abc import Callable

from jqcore.envelope import Envelope
from jqengine import Engine
from jqruntime.stores import series
from jqweb import series as rates_read

Job = Callable[..., Envelope]


async def test_claims_count_their_start_latency(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.enqueue_batch([job(q, id="a"), job(q, id="b")], now_ms=t0)
    await engine.enqueue_batch([job(q, id="later", run_at=t0 + 2000)], now_ms=t0)
    await engine.jobs.claim(q, 2, now_ms=t0 + 500)
    stats = await engine.reads.queue_stats(q)
    assert stats["claimed"] == 2
    assert stats["wait_ms"] == 1000  # 500 ms each, from enqueue to claim
    await engine.timers.promote_due(q, now_ms=t0 + 2000)
    await engine.jobs.claim(q, 1, now_ms=t0 + 2300)  # a delayed job waits from its run_at, not its enqueue
    assert (await engine.reads.queue_stats(q))["wait_ms"] == 1300


async def test_samples_become_per_second_rates(engine: Engine, q: str, job: Job, t0: int) -> None:
    await series.record(engine._client, [q], {q: await engine.reads.queue_stats(q)}, t0)
    await engine.enqueue_batch([job(q, id=f"j{i}") for i in range(6)], now_ms=t0 + 1000)
    claimed = await engine.jobs.claim(q, 4, now_ms=t0 + 3000)
    for c in claimed:
        await engine.jobs.complete(q, (c.id, c.attempt, c.token), now_ms=t0 + 3100)
    second = {q: await engine.reads.queue_stats(q)}
    await series.record(engine._client, [q], second, t0 + 60_000)
    await series.record(engine._client, [q], second, t0 + 60_000)  # the same bucket again: one sample
    assert len(await rates_read.samples(engine._client, q, t0)) == 2
    rates = await rates_read.read(engine._client, [q], t0)
    assert rates.at_ms == [t0 + 60_000]
    assert rates.enqueued == [0.1]  # 6 jobs over 60 s
    assert rates.completed == [round(4 / 60, 3)]
    assert rates.failed == [0.0]
    assert rates.wait_ms == [2000.0]  # each claimed job waited 2 s
    grown = await rates_read.growth(engine._client, [q], "completed", t0)
    assert grown == {q: 4}
