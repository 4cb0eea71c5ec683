"""Fair queues (``fair_key``): claims deal round-robin across a meta key's values, weighted, with
per-value concurrency limits — one tenant's backlog no longer delays every other tenant behind it."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio.cluster import RedisCluster

from jqcore.envelope import Envelope
from jqengine import Engine, QueueConfig, QueueConfigInvalid
from jqengine.keys import QueueKeys

from .conftest import lose_queue

Job = Callable[..., Envelope]


@pytest.fixture
async def dropped(engine: Engine, q: str) -> AsyncIterator[None]:
    """The queue's keys are deleted after the test (its backlog would weigh on the session's Redis)."""
    yield
    await lose_queue(engine, q)


async def _enqueue(engine: Engine, jobs: list[Envelope], t0: int) -> None:
    for i in range(0, len(jobs), 2000):
        await engine.enqueue_batch(jobs[i : i + 2000], now_ms=t0)


def _tenant(j: object) -> str:
    return j.envelope.meta["tenant"]  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("fair", [True, False])
async def test_one_tenants_backlog_does_not_delay_the_others(
    engine: Engine, q: str, job: Job, t0: int, fair: bool, dropped: None
) -> None:
    # The ring makes this independent of the backlog's size (run at 100,000 once: 23 s on a loaded machine,
    # too dear for every CI run); the order without fair_key needs no big backlog to show.
    big = 20_000 if fair and not isinstance(engine._client, RedisCluster) else 2_000
    if fair:
        await engine.admin.configure_queue(q, QueueConfig(fair_key="tenant"))
    backlog = [job(q, id=f"a{i:06d}", meta={"tenant": "a"}) for i in range(big)]
    small = [job(q, id=f"t{i:02d}", meta={"tenant": f"t{i:02d}"}) for i in range(1, 100)]
    await _enqueue(engine, backlog + small, t0)

    first = await engine.jobs.claim(q, 100, now_ms=t0 + 1)
    tenants = Counter(_tenant(j) for j in first)
    if fair:
        assert set(tenants) == {"a"} | {f"t{i:02d}" for i in range(1, 100)}  # every tenant within 100 claims
        assert tenants["a"] == 1
    else:
        assert tenants == {"a": 100}, "without fair_key the backlog goes first"


async def test_weights_share_claims_and_priority_orders_each_tenant(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.configure_queue(q, QueueConfig(fair_key="tenant", fair_weights={"gold": 3}))
    jobs = [job(q, id=f"g{i:02d}", priority=50 - i, meta={"tenant": "gold"}) for i in range(40)]
    jobs += [job(q, id=f"s{i:02d}", meta={"tenant": "std"}) for i in range(40)]
    await engine.enqueue_batch(jobs, now_ms=t0)
    claimed = await engine.jobs.claim(q, 20, now_ms=t0 + 1)
    assert Counter(_tenant(j) for j in claimed) == {"gold": 15, "std": 5}
    gold = [j.id for j in claimed if _tenant(j) == "gold"]
    assert gold == [f"g{i:02d}" for i in range(39, 24, -1)], "a tenant's own jobs go by priority"


async def test_a_tenant_at_its_limit_waits_for_its_own_jobs_to_finish(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.configure_queue(q, QueueConfig(fair_key="tenant", fair_limits={"noisy": 2}))
    jobs = [job(q, id=f"n{i}", meta={"tenant": "noisy"}) for i in range(10)]
    jobs += [job(q, id=f"q{i}", meta={"tenant": "quiet"}) for i in range(10)]
    await engine.enqueue_batch(jobs, now_ms=t0)
    claimed = await engine.jobs.claim(q, 8, now_ms=t0 + 1)
    assert Counter(_tenant(j) for j in claimed) == {"noisy": 2, "quiet": 6}
    noisy = next(j for j in claimed if _tenant(j) == "noisy")
    await engine.jobs.complete(q, (noisy.id, noisy.attempt, noisy.token), now_ms=t0 + 2)
    more = await engine.jobs.claim(q, 8, now_ms=t0 + 3)
    assert Counter(_tenant(j) for j in more) == {"noisy": 1, "quiet": 4}
    assert await engine.jobs.claim(q, 8, now_ms=t0 + 4) == [], "noisy is at its limit again, quiet is done"


async def test_turning_fairness_on_reindexes_the_backlog(engine: Engine, q: str, job: Job, t0: int) -> None:
    jobs = [job(q, id=f"a{i:03d}", meta={"tenant": "a"}) for i in range(50)] + [job(q, id="b", meta={})]
    await engine.enqueue_batch(jobs, now_ms=t0)
    await engine.admin.configure_queue(q, QueueConfig(fair_key="tenant"))
    assert {j.id for j in await engine.jobs.claim(q, 2, now_ms=t0 + 1)} == {"a000", "b"}  # '' is a value too
    await engine.admin.configure_queue(q, QueueConfig())  # off again: priority order
    assert [j.id for j in await engine.jobs.claim(q, 2, now_ms=t0 + 2)] == ["a001", "a002"]


def test_fairness_settings_are_checked() -> None:
    from jqengine.admin import _config_fields

    with pytest.raises(QueueConfigInvalid, match="fair_key"):
        _config_fields(QueueConfig(fair_key="Bad-Key"))
    with pytest.raises(QueueConfigInvalid, match="fair_weights"):
        _config_fields(QueueConfig(fair_key="t", fair_weights={"x": 0}))
    with pytest.raises(QueueConfigInvalid, match="need a fair_key"):
        _config_fields(QueueConfig(fair_limits={"x": 1}))


async def test_the_ring_keeps_its_order_across_claims_smaller_than_the_ring(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """A claim reads the ring once and writes the passes back: the next claim goes on where it stopped."""
    await engine.admin.configure_queue(q, QueueConfig(fair_key="tenant"))
    tenants = [f"t{i}" for i in range(10)]
    await engine.enqueue_batch(
        [job(q, id=f"{t}-{n}", meta={"tenant": t}) for t in tenants for n in range(3)], now_ms=t0
    )
    first = {_tenant(j) for j in await engine.jobs.claim(q, 4, now_ms=t0 + 1)}
    second = {_tenant(j) for j in await engine.jobs.claim(q, 6, now_ms=t0 + 2)}
    assert (len(first), len(second)) == (4, 6), (first, second)
    assert first | second == set(tenants), "the second claim went on with the tenants the first left"
    third = [_tenant(j) for j in await engine.jobs.claim(q, 10, now_ms=t0 + 3)]
    assert sorted(third) == tenants, "a second round: each tenant once more"


async def test_a_tenant_over_its_rate_sits_out_until_its_next_job_may_start(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """fair_rates: 2 jobs/s (a burst of 2): GCRA, exactly; the others keep the slots it may not use, and
    the scheduler's step (promote_due) learns when the value may start again."""
    await engine.admin.configure_queue(q, QueueConfig(fair_key="tenant", fair_rates={"noisy": 2}))
    jobs = [job(q, id=f"n{i:02d}", meta={"tenant": "noisy"}) for i in range(30)]
    jobs += [job(q, id=f"q{i:03d}", meta={"tenant": "quiet"}) for i in range(200)]
    await engine.enqueue_batch(jobs, now_ms=t0)
    first = await engine.jobs.claim(q, 8, now_ms=t0)
    assert Counter(_tenant(j) for j in first) == {"noisy": 2, "quiet": 6}, "the burst, then it sits out"
    assert Counter(_tenant(j) for j in await engine.jobs.claim(q, 4, now_ms=t0 + 1)) == {"quiet": 4}
    promoted = await engine.timers.promote_due(q, now_ms=t0 + 2)
    assert promoted.next_run_at == t0 + 500, "the scheduler steps the queue when noisy may start again"
    noisy = 2
    for step in range(1, 51):  # a claim every 100 ms for 5 s: one more noisy job each 500 ms
        claimed = await engine.jobs.claim(q, 3, now_ms=t0 + step * 100)
        noisy += sum(_tenant(j) == "noisy" for j in claimed)
    assert noisy == 12, "2 (burst) + 5 s x 2/s"


async def test_the_scheduler_step_hands_a_rated_tenants_next_job_to_a_waiting_pool(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """A pool waiting for a hand-off gets the rated tenant's next job from promote_due (no poll), and
    lifting the rate lets the tenant in at once."""
    await engine.admin.configure_queue(q, QueueConfig(fair_key="tenant", fair_rates={"slow": 1}))
    await engine.enqueue_batch([job(q, id=f"s{i}", meta={"tenant": "slow"}) for i in range(5)], now_ms=t0)
    assert [j.id for j in await engine.jobs.claim(q, 5, now_ms=t0)] == ["s0"]
    assert await engine.jobs.claim(q, 5, waiter="pool-a", wait_ms=60_000, now_ms=t0 + 1) == []
    assert (await engine.timers.promote_due(q, now_ms=t0 + 999)).next_run_at == t0 + 1000, "not yet"
    assert (await engine.timers.promote_due(q, now_ms=t0 + 1000)).next_run_at == t0 + 2000
    handed = await engine.jobs.wait_for_handoff(q, "pool-a", 5)
    assert [j.id for j in handed or []] == ["s1"], "woken by the scheduler's step, handed to the pool"
    wake = QueueKeys(q).wake
    await engine._client.delete(wake)
    await engine.timers.promote_due(q, now_ms=t0 + 2000)
    handed = await engine.jobs.wait_for_handoff(q, "pool-a", 5)
    assert [j.id for j in handed or []] == ["s2"], "the rest of its slots stayed registered"
    assert await engine._client.llen(wake) == 0
    assert await engine.jobs.unwait(q, "pool-a") == []
    await engine.timers.promote_due(q, now_ms=t0 + 3000)
    assert await engine._client.llen(wake) == 1, "no pool registered: the step wakes the waiting workers"
    assert [j.id for j in await engine.jobs.claim(q, 5, now_ms=t0 + 3000)] == ["s3"]
    await engine.admin.configure_queue(
        q, QueueConfig(fair_key="tenant")
    )  # the rate lifted: it enters at once
    assert [j.id for j in await engine.jobs.claim(q, 5, now_ms=t0 + 3001)] == ["s4"]
