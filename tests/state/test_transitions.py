"""Worker and admin transitions: extend, complete, fail, snooze, release, cancel, reap, promote, GC, dead."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jqcore.envelope import Envelope
from jqengine import CancelOutcome, CancelResult, ClaimedJob, Engine, JobNotFound, QueueConfig, StaleLease
from jqengine.keys import KINDS_KEY

Job = Callable[..., Envelope]


def own(c: ClaimedJob) -> tuple[str, int, str]:
    return (c.id, c.attempt, c.token)


async def one(engine: Engine, q: str, now: int) -> ClaimedJob:
    [claimed] = await engine.jobs.claim(q, 1, now_ms=now)
    return claimed


async def state(engine: Engine, q: str, job_id: str) -> str:
    info = await engine.reads.get_job(q, job_id)
    assert info is not None
    return info.state


async def test_complete_keeps_result_and_rejects_stale_writes(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.enqueue_batch([job(q, id="a")], now_ms=t0)
    c = await one(engine, q, t0)
    with pytest.raises(StaleLease):
        await engine.jobs.complete(q, (c.id, c.attempt, "not-the-token"), now_ms=t0)
    with pytest.raises(StaleLease):
        await engine.jobs.complete(q, (c.id, c.attempt + 1, c.token), now_ms=t0)
    with pytest.raises(JobNotFound):
        await engine.jobs.complete(q, ("nope", 1, "x"), now_ms=t0)
    await engine.jobs.complete(q, own(c), b'{"ok":true}', now_ms=t0 + 5)
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert (info.state, info.result, info.finished_at) == ("completed", '{"ok":true}', t0 + 5)
    assert info.version > 1
    await engine.jobs.complete(q, own(c), now_ms=t0 + 6)  # retried after a lost answer: the same success
    again = await engine.reads.get_job(q, "a")
    assert again is not None
    assert (again.version, again.finished_at) == (info.version, t0 + 5), "a retried complete changes nothing"
    dup = await engine.enqueue_batch([job(q, id="a")], now_ms=t0 + 7)
    assert dup.outcomes[0].outcome == "duplicate"


async def test_extend_moves_the_deadline_and_rejects_stale(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.enqueue_batch([job(q, id="a")], now_ms=t0)
    c = await one(engine, q, t0)
    got = await engine.jobs.extend(q, [own(c), ("ghost", 1, "x")], 10_000, now_ms=t0 + 100)
    assert got == {"a": t0 + 10_100, "ghost": "missing"}
    assert await engine.jobs.extend(q, [(c.id, c.attempt, "bad")], 10_000, now_ms=t0 + 100) == {"a": "stale"}
    assert (await engine.reads.get_job(q, "a")).lease_deadline == t0 + 10_100  # type: ignore[union-attr]


async def test_fail_retries_with_delay_then_dead_letters(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.enqueue_batch([job(q, id="a", max_attempts=2)], now_ms=t0)
    c1 = await one(engine, q, t0)
    assert await engine.jobs.fail(q, own(c1), "boom 1", retry_delay_ms=500, now_ms=t0) == "retry"
    assert await state(engine, q, "a") == "delayed"
    assert await engine.timers.promote_due(q, now_ms=t0 + 499) == (0, t0 + 500, ())
    assert await engine.jobs.claim(q, 1, now_ms=t0 + 499) == []
    assert (await engine.timers.promote_due(q, now_ms=t0 + 500))[0] == 1
    c2 = await one(engine, q, t0 + 500)
    assert c2.attempt == 2
    with pytest.raises(StaleLease):  # a late write from attempt 1 never lands on attempt 2
        await engine.jobs.complete(q, own(c1), now_ms=t0 + 501)
    # attempt 1's own fail sent again (its answer was lost) gets its first answer; attempt 2 is untouched
    assert await engine.jobs.fail(q, own(c1), "boom 1", retry_delay_ms=500, now_ms=t0 + 501) == "retry"
    assert await state(engine, q, "a") == "running"
    assert await engine.jobs.fail(q, own(c2), "boom 2", now_ms=t0 + 600) == "errored"
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert (info.state, info.last_error, info.reason) == ("errored", "boom 2", "attempts exhausted")
    assert [h["error"] for h in info.history] == ["boom 1", "boom 2"]
    assert [j.id for j in await engine.reads.dead_list(q)] == ["a"]
    assert await engine.admin.dead_retry(q, now_ms=t0 + 700) == 1
    c3 = await one(engine, q, t0 + 700)
    assert c3.attempt == 1
    assert await engine.jobs.fail(q, own(c3), "bad input", permanent=True, now_ms=t0 + 800) == "errored"
    assert await engine.admin.dead_purge(q) == 1
    assert await engine.reads.get_job(q, "a") is None


async def test_snooze_spends_no_attempt_and_release_refunds(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.enqueue_batch([job(q, id="a"), job(q, id="b")], now_ms=t0)
    a = await one(engine, q, t0)
    assert await engine.jobs.snooze(q, own(a), 1000, now_ms=t0) == t0 + 1000
    assert (await engine.reads.get_job(q, "a")).attempt == 0  # type: ignore[union-attr]
    await engine.timers.promote_due(q, now_ms=t0 + 1000)
    a, b = await engine.jobs.claim(q, 2, now_ms=t0 + 1000)
    assert (a.id, a.attempt, b.id) == ("a", 1, "b")
    released = await engine.jobs.release(q, [(*own(a), True), (*own(b), False)], now_ms=t0 + 1000)
    assert released == {"a": "released", "b": "released"}
    assert await engine.jobs.release(q, [(*own(a), True)], now_ms=t0 + 1000) == {"a": "stale"}
    again = await engine.jobs.claim(q, 2, now_ms=t0 + 1001)
    assert sorted((c.id, c.attempt) for c in again) == [("a", 1), ("b", 1)]


async def test_cancel_in_every_state(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.enqueue_batch(
        [job(q, id="pending"), job(q, id="delayed", run_at=t0 + 60_000), job(q, id="running")], now_ms=t0
    )
    assert await engine.admin.cancel(q, "pending", now_ms=t0) == CancelResult(
        CancelOutcome.CANCELED, "pending"
    )
    assert await engine.admin.cancel(q, "delayed", now_ms=t0) == CancelResult(
        CancelOutcome.CANCELED, "delayed"
    )
    r = await one(engine, q, t0)
    assert r.id == "running"
    assert await engine.admin.cancel(q, "running", now_ms=t0) == CancelResult(
        CancelOutcome.FLAGGED, "running"
    )
    assert (await engine.jobs.extend(q, [own(r)], 1000, now_ms=t0 + 1))["running"] == "canceled"
    assert await state(engine, q, "running") == "canceled"
    final = await engine.admin.cancel(q, "running", now_ms=t0)
    assert (final, str(final), final.changed) == (
        CancelResult(CancelOutcome.FINAL, "canceled"),
        "already canceled",
        False,
    )
    # unschedule a job still in Kafka: the tombstone refuses it when the relay delivers it
    assert (await engine.admin.cancel(q, "in-kafka", now_ms=t0)).outcome == CancelOutcome.TOMBSTONED
    out = await engine.enqueue_batch([job(q, id="in-kafka")], now_ms=t0 + 2)
    assert out.outcomes[0].outcome == "canceled"
    assert await engine.jobs.claim(q, 5, now_ms=t0 + 120_000) == []


async def test_running_job_canceled_meanwhile_is_not_retried(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.enqueue_batch([job(q, id="a")], now_ms=t0)
    c = await one(engine, q, t0)
    await engine.admin.cancel(q, "a", now_ms=t0)
    assert await engine.jobs.fail(q, own(c), "interrupted", retry_delay_ms=0, now_ms=t0) == "canceled"


async def test_a_handler_cancel_is_one_transition_that_frees_the_next_job(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await engine.admin.configure_queue(q, QueueConfig(mode="exclusive", excl_key="account"))
    await engine.admin.configure_kind("noop", queues=[q], concurrency=1)
    await engine.enqueue_batch([job(q, id="a", excl="x"), job(q, id="b", excl="x")], now_ms=t0)
    a = await one(engine, q, t0)
    assert a.id == "a"
    with pytest.raises(StaleLease):
        await engine.jobs.cancel_running(q, (a.id, a.attempt, "forged"), "no", now_ms=t0 + 1)
    with pytest.raises(JobNotFound):
        await engine.jobs.cancel_running(q, ("ghost", 1, "x"), "no", now_ms=t0 + 1)
    await engine.jobs.cancel_running(q, own(a), "not today", now_ms=t0 + 2)
    await engine.jobs.cancel_running(q, own(a), "not today", now_ms=t0 + 3)  # retried after a lost answer
    info = await engine.reads.get_job(q, "a")
    assert info is not None
    assert (info.state, info.reason, info.last_error, info.finished_at) == (
        "canceled",
        "not today",
        "not today",
        t0 + 2,
    )
    assert await engine.jobs.fail(q, own(a), "late", now_ms=t0 + 4) == "canceled", (
        "the same answer, not stale"
    )
    # the exclusivity value and the kind's only slot are free: the next job runs
    [b] = await engine.jobs.claim(q, 5, now_ms=t0 + 5)
    assert b.id == "b"
    assert (await engine.reads.depth(q)).blocked == 0


async def test_an_exclusive_keys_jobs_of_one_batch_run_in_the_batchs_order(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """One request's jobs share one stamp (their default priority); their default ids increase in the
    order they were made, so the key's waiting jobs (taken by priority, then id) keep the batch's order."""
    await engine.admin.configure_queue(q, QueueConfig(mode="exclusive", excl_key="account"))
    batch = [job(q, excl="x") for _ in range(12)]
    assert len({e.priority for e in batch}) == 1
    await engine.enqueue_batch(batch, now_ms=t0)
    ran = []
    for i in range(12):
        [c] = await engine.jobs.claim(q, 5, now_ms=t0 + i)  # one at a time: the key's head only
        await engine.jobs.complete(q, own(c), now_ms=t0 + i)
        ran.append(c.id)
    assert ran == [e.id for e in batch]


async def test_reaper_at_least_once_vs_at_most_once(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_kind("risky", queues=[q], delivery="at_most_once")
    await engine.enqueue_batch([job(q, "safe", id="s"), job(q, "risky", id="r")], now_ms=t0)
    claimed = await engine.jobs.claim(q, 2, lease_ms=1000, now_ms=t0)
    assert len(claimed) == 2
    assert await engine.timers.reap_expired(q, now_ms=t0 + 1000) == (0, t0 + 1000)
    assert (await engine.timers.reap_expired(q, now_ms=t0 + 1001))[0] == 2
    assert await state(engine, q, "s") == "pending"
    info = await engine.reads.get_job(q, "r")
    assert info is not None
    assert (info.state, info.reason) == ("errored", "lease expired (at_most_once)")
    again = await one(engine, q, t0 + 1002)
    assert (again.id, again.attempt) == ("s", 2)
    stale = next(c for c in claimed if c.id == "s")
    with pytest.raises(StaleLease):
        await engine.jobs.complete(q, own(stale), now_ms=t0 + 1003)


async def test_exclusive_queue_runs_one_job_per_value(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(mode="exclusive", excl_key="account"))
    out = await engine.enqueue_batch(
        [
            job(q, id="a1", excl="acct-a"),
            job(q, id="a2", meta={"account": "acct-a"}),
            job(q, id="b1", excl="acct-b"),
            job(q, id="none"),
        ],
        now_ms=t0,
    )
    assert [o.outcome for o in out.outcomes] == ["stored", "stored", "stored", "refused"]
    assert "exclusivity" in (out.outcomes[3].reason or "")
    claimed = await engine.jobs.claim(q, 10, now_ms=t0)
    assert sorted(c.id for c in claimed) == ["a1", "b1"]
    assert (await engine.reads.depth(q)).blocked == 1
    a1 = next(c for c in claimed if c.id == "a1")
    assert await engine.jobs.fail(q, own(a1), "retry me", retry_delay_ms=0, now_ms=t0) == "retry"
    await engine.timers.promote_due(q, now_ms=t0)
    [again] = await engine.jobs.claim(q, 10, now_ms=t0)
    assert again.id == "a1", "a retried head keeps its value; a2 still waits"
    await engine.jobs.complete(q, own(again), now_ms=t0)
    [a2] = await engine.jobs.claim(q, 10, now_ms=t0)
    assert a2.id == "a2"


async def test_kind_concurrency_limit_parks_and_unparks(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_kind("heavy", queues=[q], concurrency=1)
    await engine.enqueue_batch(
        [job(q, "heavy", id="h1"), job(q, "heavy", id="h2"), job(q, id="light")], now_ms=t0
    )
    first = await engine.jobs.claim(q, 10, now_ms=t0)
    assert sorted(c.id for c in first) == ["h1", "light"]
    assert await state(engine, q, "h2") == "parked"
    h1 = next(c for c in first if c.id == "h1")
    await engine.jobs.complete(q, own(h1), now_ms=t0)
    [h2] = await engine.jobs.claim(q, 10, now_ms=t0)
    assert h2.id == "h2"
    await engine.admin.configure_kind("heavy", queues=[q], concurrency=None)


async def test_gc_removes_finished_jobs_after_retention(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_queue(q, QueueConfig(retention_ms=1000))
    await engine.enqueue_batch([job(q, id="a"), job(q, id="b")], now_ms=t0)
    a = await one(engine, q, t0)
    await engine.jobs.complete(q, own(a), now_ms=t0)
    assert await engine.timers.gc(q, now_ms=t0 + 999) == 0
    assert await engine.timers.gc(q, now_ms=t0 + 1000) == 1
    assert await engine.reads.get_job(q, "a") is None
    assert await engine.reads.get_job(q, "b") is not None
    again = await engine.enqueue_batch([job(q, id="a")], now_ms=t0 + 2000)
    assert again.outcomes[0].outcome == "stored", "the dedup window closes with the retention"


async def test_a_queue_keeps_its_own_kind_options_over_the_defaults_on_its_first_job(
    engine: Engine, q: str, job: Job, t0: int, prefix: str
) -> None:
    kind = f"{prefix}.kind"
    await engine.admin.configure_kind(
        kind, delivery="at_least_once", max_attempts=7
    )  # a default for every queue
    try:
        await engine.admin.configure_kind(
            kind, queues=[q], delivery="at_most_once"
        )  # before the queue has a job
        await engine.enqueue_batch([job(q, kind, id="a")], now_ms=t0)  # creates the queue's configuration
        assert (await engine.reads.kinds([q]))[kind]["queues"][q]["delivery"] == "at_most_once"
    finally:  # the shared Redis: no default left behind for other tests' new queues
        await engine._client.hdel(KINDS_KEY, kind)
