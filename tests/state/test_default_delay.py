"""A queue's ``default_delay_ms`` (Timestone's default invisibility), where every producer's jobs enter
Redis (``enqueue_batch``): a job without ``run_at``/``delay_ms`` is visible that long after it was
accepted and never earlier; an explicit time wins, ``delay_ms: 0`` included."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jqcore.envelope import Envelope
from jqengine import Engine, QueueConfig, QueueConfigInvalid

Job = Callable[..., Envelope]
DELAY = 60_000


async def test_jobs_without_a_time_wait_the_default_delay_from_their_acceptance(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.configure_queue(q, QueueConfig(default_delay_ms=DELAY))
    assert (await engine.reads.queue_config(q)).default_delay_ms == DELAY
    written = t0 + 5_000  # the relay writes 5 s after the gateway accepted them
    jobs = [
        job(q, id="plain"),
        job(q, id="now", delay_ms=0),
        job(q, id="at", run_at=t0 + 1_000),
        job(q, id="later", delay_ms=2 * DELAY),
        job(q, id="old", at_ms=t0 - 2 * DELAY),  # accepted long ago (a replay, a relay far behind)
    ]
    result = await engine.enqueue_batch(jobs, now_ms=written)
    outcomes = {o.id: o.outcome for o in result.outcomes}
    assert outcomes == {
        "plain": "delayed",
        "now": "stored",
        "at": "stored",
        "later": "delayed",
        "old": "stored",
    }
    for job_id, run_at in (("plain", t0 + DELAY), ("later", t0 + 2 * DELAY)):
        info = await engine.reads.get_job(q, job_id)
        assert info is not None
        assert (info.state, info.run_at) == ("delayed", run_at)

    claimed = await engine.jobs.claim(q, 10, now_ms=t0 + DELAY - 1)
    assert sorted(c.id for c in claimed) == ["at", "now", "old"]
    assert (await engine.timers.promote_due(q, now_ms=t0 + DELAY - 1)).promoted == 0, "never early"
    assert (await engine.timers.promote_due(q, now_ms=t0 + DELAY)).promoted == 1
    assert [c.id for c in await engine.jobs.claim(q, 10, now_ms=t0 + DELAY)] == ["plain"]

    await engine.admin.configure_queue(q, QueueConfig())  # off again: the next job is ready at once
    (outcome,) = (await engine.enqueue_batch([job(q, id="after")], now_ms=written)).outcomes
    assert outcome.outcome == "stored"


@pytest.mark.parametrize("bad", [-1, QueueConfig.MAX_DEFAULT_DELAY_MS + 1])
async def test_a_default_delay_out_of_range_is_refused(engine: Engine, q: str, bad: int) -> None:
    with pytest.raises(QueueConfigInvalid, match="default_delay_ms"):
        await engine.admin.configure_queue(q, QueueConfig(default_delay_ms=bad))
    assert (await engine.reads.queue_config(q)).default_delay_ms == 0
