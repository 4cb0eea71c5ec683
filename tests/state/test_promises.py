"""The engine's API promises: retried worker writes are idempotent, the dedup policies, unknown kinds
handed back without spending an attempt, lease defaults, and claims by a key the queue does not index."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from jqcore.envelope import Envelope
from jqengine import ClaimedJob, Engine, FilterInvalid, QueueConfig, StaleLease, reads

Job = Callable[..., Envelope]


def own(c: ClaimedJob) -> tuple[str, int, str]:
    return (c.id, c.attempt, c.token)


async def claim_one(engine: Engine, q: str, now: int, **kw: object) -> ClaimedJob:
    [claimed] = await engine.jobs.claim(q, 1, now_ms=now, **kw)  # type: ignore[arg-type]
    return claimed


async def info(engine: Engine, q: str, job_id: str) -> reads.JobInfo:
    found = await engine.reads.get_job(q, job_id)
    assert found is not None
    return found


# ---- retried worker writes ---------------------------------------------------------------------------
async def test_fail_retried_gets_its_first_answer_even_after_the_next_attempt_began(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.enqueue_batch([job(q, id="a", max_attempts=3)], now_ms=t0)
    first = await claim_one(engine, q, t0)
    assert await engine.jobs.fail(q, own(first), "boom", retry_delay_ms=0, now_ms=t0 + 1) == "retry"
    version = (await info(engine, q, "a")).version
    # the answer was lost; the worker sends the same write again: same outcome, nothing changes
    assert await engine.jobs.fail(q, own(first), "boom", retry_delay_ms=0, now_ms=t0 + 2) == "retry"
    assert (await info(engine, q, "a")).version == version
    await engine.timers.promote_due(q, now_ms=t0 + 3)
    second = await claim_one(engine, q, t0 + 3)
    assert second.attempt == 2
    # attempt 1's retried fail still answers what it did; it never touches attempt 2
    assert await engine.jobs.fail(q, own(first), "boom", retry_delay_ms=0, now_ms=t0 + 4) == "retry"
    assert (await info(engine, q, "a")).state == "running"
    with pytest.raises(StaleLease):  # a different pair is still refused
        await engine.jobs.fail(q, (first.id, first.attempt, "forged"), "x", now_ms=t0 + 5)
    with pytest.raises(StaleLease):  # a complete for the attempt that failed is not the same write
        await engine.jobs.complete(q, own(first), now_ms=t0 + 5)
    assert await engine.jobs.fail(q, own(second), "boom", permanent=True, now_ms=t0 + 6) == "errored"
    assert await engine.jobs.fail(q, own(second), "boom", permanent=True, now_ms=t0 + 7) == "errored"
    [history] = [(await info(engine, q, "a")).history]
    assert all("token" not in h for h in history), "lease tokens are never shown to readers"


# ---- dedup policies ------------------------------------------------------------------------------------
async def finish(engine: Engine, q: str, job_id: str, now: int) -> None:
    c = await claim_one(engine, q, now)
    assert c.id == job_id
    await engine.jobs.complete(q, own(c), now_ms=now + 1)


async def test_default_policy_runs_a_finished_id_again_from_a_new_record(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    r1 = await engine.enqueue_batch([job(q, id="a")], origins={"a": "T/0/1"}, now_ms=t0)
    assert r1.outcomes[0].outcome == "stored"
    again = await engine.enqueue_batch([job(q, id="a")], origins={"a": "T/0/2"}, now_ms=t0 + 1)
    assert again.outcomes[0].outcome == "duplicate", "still queued: a duplicate"
    seen = await info(engine, q, "a")
    assert (seen.duplicates, seen.last_duplicate_at) == (1, t0 + 1)
    await finish(engine, q, "a", t0 + 2)
    reread = await engine.enqueue_batch([job(q, id="a")], origins={"a": "T/0/1"}, now_ms=t0 + 5)
    assert reread.outcomes[0].outcome == "duplicate", "the same record read again never runs twice"
    unknown = await engine.enqueue_batch([job(q, id="a")], now_ms=t0 + 5)
    assert unknown.outcomes[0].outcome == "duplicate", "an unknown origin counts as a re-read"
    new = await engine.enqueue_batch([job(q, id="a")], origins={"a": "T/1/7"}, now_ms=t0 + 6)
    assert new.outcomes[0].outcome == "stored", "a new record of a finished id is a new run"
    reopened = await info(engine, q, "a")
    assert (reopened.state, reopened.attempt, reopened.finished_at) == ("pending", 0, None)
    assert reopened.version > seen.version, "versions only grow"
    assert reopened.origin == "T/1/7"
    await finish(engine, q, "a", t0 + 7)
    assert (await engine.reads.queue_stats(q))["completed"] == 2


async def test_finished_policy_drops_visible_duplicates_within_its_window(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.configure_queue(q, QueueConfig(dedup="finished", dedup_window_ms=1000))
    await engine.enqueue_batch([job(q, id="a")], origins={"a": "T/0/1"}, now_ms=t0)
    await finish(engine, q, "a", t0)
    within = await engine.enqueue_batch([job(q, id="a")], origins={"a": "T/0/9"}, now_ms=t0 + 500)
    assert within.outcomes[0].outcome == "duplicate"
    dropped = await info(engine, q, "a")
    assert (dropped.state, dropped.duplicates, dropped.last_duplicate_at) == ("completed", 1, t0 + 500)
    after = await engine.enqueue_batch([job(q, id="a")], origins={"a": "T/0/10"}, now_ms=t0 + 1002)
    assert after.outcomes[0].outcome == "stored"


async def test_dedup_settings_are_validated(engine: Engine, q: str) -> None:
    from jqengine import QueueConfigInvalid

    with pytest.raises(QueueConfigInvalid):
        await engine.admin.configure_queue(q, replace(QueueConfig(), dedup="forever"))  # type: ignore[arg-type]
    with pytest.raises(QueueConfigInvalid):
        await engine.admin.configure_queue(q, QueueConfig(dedup_window_ms=-1))


# ---- unknown kinds (rolling deploys) --------------------------------------------------------------------
async def test_hand_back_refunds_the_attempt_and_dead_letters_only_after_the_limit(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.enqueue_batch([job(q, "new.kind", id="a", max_attempts=1)], now_ms=t0)
    c = await claim_one(engine, q, t0)
    assert await engine.jobs.hand_back(q, own(c), 1000, 60_000, now_ms=t0 + 1) == "handed_back"
    back = await info(engine, q, "a")
    assert (back.state, back.attempt, back.run_at, back.handed_back_since) == (
        "delayed",
        0,
        t0 + 1001,
        t0 + 1,
    )
    await engine.timers.promote_due(q, now_ms=t0 + 1001)
    c2 = await claim_one(engine, q, t0 + 1001)
    assert c2.attempt == 1, "no attempt was spent by the hand-back"
    assert await engine.jobs.hand_back(q, own(c2), 1000, 60_000, now_ms=t0 + 60_001) == "errored"
    dead = await info(engine, q, "a")
    assert dead.state == "errored"
    assert dead.reason is not None
    assert "new.kind" in dead.reason
    stats = await engine.reads.queue_stats(q)
    assert stats["handed_back"] == 2


async def test_a_run_in_between_restarts_the_hand_back_clock(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.enqueue_batch([job(q, "k", id="a")], now_ms=t0)
    c = await claim_one(engine, q, t0)
    await engine.jobs.hand_back(q, own(c), 0, 10_000, now_ms=t0)
    await engine.timers.promote_due(q, now_ms=t0)
    c = await claim_one(engine, q, t0)
    await engine.jobs.fail(q, own(c), "a pool that knows the kind ran it", retry_delay_ms=0, now_ms=t0 + 1)
    await engine.timers.promote_due(q, now_ms=t0 + 20_000)
    c = await claim_one(engine, q, t0 + 20_000)
    assert await engine.jobs.hand_back(q, own(c), 0, 10_000, now_ms=t0 + 20_000) == "handed_back"


# ---- leases and filters -------------------------------------------------------------------------------
async def test_claims_use_the_jobs_lease_else_the_queues(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(lease_ms=7_000))
    await engine.enqueue_batch(
        [job(q, id="own", lease_ms=2_000, priority=1), job(q, id="dflt", priority=2)], now_ms=t0
    )
    a = await claim_one(engine, q, t0)
    b = await claim_one(engine, q, t0)
    assert (a.id, a.lease_ms, a.lease_deadline_ms) == ("own", 2_000, t0 + 2_000)
    assert (b.id, b.lease_ms, b.lease_deadline_ms) == ("dflt", 7_000, t0 + 7_000)
    assert await engine.jobs.extend(q, [own(a), own(b)], 0, now_ms=t0 + 100) == {
        "own": t0 + 2_100,
        "dflt": t0 + 7_100,
    }
    await engine.enqueue_batch([job(q, id="asked", lease_ms=2_000)], now_ms=t0)
    c = await claim_one(engine, q, t0, lease_ms=500)
    assert c.lease_ms == 500, "a claimer that asks for a lease gets it"


async def test_a_filter_on_a_key_the_queue_does_not_index_is_refused(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.configure_queue(q, QueueConfig(filter_keys=("region",)))
    await engine.enqueue_batch([job(q, id="a", meta={"region": "eu", "tier": "gold"})], now_ms=t0)
    with pytest.raises(FilterInvalid, match="tier"):
        await engine.jobs.claim(q, 1, filter={"tier": "gold"}, now_ms=t0)
    with pytest.raises(FilterInvalid):
        await engine.jobs.claim(q, 1, filter={"region": "eu", "tier": "gold"}, now_ms=t0)
    [c] = await engine.jobs.claim(q, 1, filter={"region": "eu"}, now_ms=t0)
    assert c.id == "a"
