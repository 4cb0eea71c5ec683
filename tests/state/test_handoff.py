"""Hand-off claims: an idle pool registered by its short claim is handed jobs by the transition that makes
them ready (enqueue, promotion), leased like any claim; a pool that never runs them loses nothing."""

from __future__ import annotations

from collections.abc import Callable

from jqcore.envelope import Envelope
from jqengine import Engine
from jqengine.keys import QueueKeys

Job = Callable[..., Envelope]
WAIT_MS = 60_000


async def _seed(engine: Engine, q: str, job: Job, t0: int) -> None:
    """Create the queue with one job run to its end, and no wake token left over."""
    await engine.enqueue_batch([job(q, id="seed")], now_ms=t0)
    [seed] = await engine.jobs.claim(q, 1, now_ms=t0)
    await engine.jobs.complete(q, (seed.id, seed.attempt, seed.token), now_ms=t0)
    await engine._client.delete(QueueKeys(q).wake)


async def _register(engine: Engine, q: str, t0: int, waiter: str = "pool-a", n: int = 5) -> None:
    assert await engine.jobs.claim(q, n, worker="w-a", waiter=waiter, wait_ms=WAIT_MS, now_ms=t0) == []
    assert await engine._client.hexists(QueueKeys(q).waiters, waiter)


async def test_an_enqueued_job_is_handed_to_the_waiting_pool_leased(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await _seed(engine, q, job, t0)
    await _register(engine, q, t0)

    await engine.enqueue_batch([job(q, id="a", priority=5), job(q, id="b", priority=1)], now_ms=t0 + 1)

    handed = await engine.jobs.wait_for_handoff(q, "pool-a", 5)
    assert handed is not None
    assert [(j.id, j.attempt) for j in handed] == [("b", 1), ("a", 1)]  # priority order kept
    info = await engine.reads.get_job(q, "b")
    assert info is not None
    assert (info.state, info.worker) == ("running", "w-a")
    assert await engine._client.llen(QueueKeys(q).wake) == 0  # nobody else was woken for them
    # the rest of its slots stay registered: the next job is handed to it too, with a token of its own
    raw = await engine._client.hget(QueueKeys(q).waiters, "pool-a")
    assert (raw.decode() if isinstance(raw, bytes) else str(raw)).startswith("3|")
    await engine.enqueue_batch([job(q, id="c")], now_ms=t0 + 1)
    [c] = await engine.jobs.wait_for_handoff(q, "pool-a", 5) or []
    assert c.id == "c"
    assert c.token not in {j.token for j in handed}
    handed.append(c)
    for j in handed:
        await engine.jobs.complete(q, (j.id, j.attempt, j.token), now_ms=t0 + 2)
    assert (await engine.reads.get_job(q, "a")).state == "completed"  # type: ignore[union-attr]


async def test_the_registration_holds_at_most_its_free_slots(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await _seed(engine, q, job, t0)
    await _register(engine, q, t0, n=2)
    await engine.enqueue_batch([job(q, id=f"j{i}") for i in range(5)], now_ms=t0 + 1)
    handed = await engine.jobs.wait_for_handoff(q, "pool-a", 5)
    assert handed is not None
    assert len(handed) == 2
    assert (await engine.reads.depth(q, now=t0 + 1)).pending == 3
    assert await engine._client.llen(QueueKeys(q).wake) == 3  # the rest wake other workers


async def test_a_pool_that_never_runs_its_handed_jobs_loses_nothing(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    """The crash under test: jobs handed to a pool that dies before it starts them (they sit in its
    inbox, leased). The reaper hands them out again when the leases expire; another worker runs them."""
    await _seed(engine, q, job, t0)
    await _register(engine, q, t0, waiter="doomed")
    await engine.enqueue_batch([job(q, id="x", lease_ms=1000)], now_ms=t0 + 10)
    assert await engine._client.llen(QueueKeys(q).inbox("doomed")) == 1  # handed, never read: the pool died
    assert (await engine.jobs.claim(q, 5, now_ms=t0 + 20)) == []  # leased: nobody else may take it

    reaped, _ = await engine.timers.reap_expired(q, now_ms=t0 + 10 + 1000 + 1)
    assert reaped >= 1
    [again] = await engine.jobs.claim(q, 5, worker="w-b", now_ms=t0 + 1100)
    assert (again.id, again.attempt) == ("x", 2)
    await engine.jobs.complete(q, (again.id, again.attempt, again.token), now_ms=t0 + 1101)
    info = await engine.reads.get_job(q, "x")
    assert info is not None
    assert (info.state, info.worker) == ("completed", "w-b")


async def test_an_expired_registration_is_dropped_and_the_job_waits_for_a_claim(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await _seed(engine, q, job, t0)
    await _register(engine, q, t0)
    await engine.enqueue_batch([job(q, id="late")], now_ms=t0 + WAIT_MS + 1)
    assert not await engine._client.hexists(QueueKeys(q).waiters, "pool-a")
    assert (await engine.reads.get_job(q, "late")).state == "pending"  # type: ignore[union-attr]
    assert await engine._client.llen(QueueKeys(q).wake) == 1


async def test_kind_limits_and_pauses_hold_for_hand_offs(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.admin.configure_kind("slow", queues=[q], concurrency=1)
    await engine.enqueue_batch([job(q, "slow", id="s1")], now_ms=t0)
    [running] = await engine.jobs.claim(q, 1, now_ms=t0)
    assert running.id == "s1"
    await _register(engine, q, t0)
    await engine.enqueue_batch([job(q, "slow", id="s2")], now_ms=t0 + 1)
    assert (await engine.reads.get_job(q, "s2")).state == "parked"  # type: ignore[union-attr]
    assert await engine._client.hexists(QueueKeys(q).waiters, "pool-a")  # nothing it may run: still waiting

    await engine.admin.pause(q)
    await engine.enqueue_batch([job(q, id="p")], now_ms=t0 + 2)
    assert (await engine.reads.get_job(q, "p")).state == "pending"  # type: ignore[union-attr]
    await engine.admin.pause(q, False)


async def test_a_promoted_delayed_job_is_handed_off(engine: Engine, q: str, job: Job, t0: int) -> None:
    await engine.enqueue_batch([job(q, id="later", run_at=t0 + 500)], now_ms=t0)
    await _register(engine, q, t0)
    promoted = await engine.timers.promote_due(q, now_ms=t0 + 500)
    assert promoted.promoted == 1
    handed = await engine.jobs.wait_for_handoff(q, "pool-a", 5)
    assert handed is not None
    assert [j.id for j in handed] == ["later"]


async def test_unwait_deregisters_and_returns_what_was_handed_meanwhile(
    engine: Engine, q: str, job: Job, t0: int
) -> None:
    await _seed(engine, q, job, t0)
    await _register(engine, q, t0)
    await engine.enqueue_batch([job(q, id="m")], now_ms=t0 + 1)
    [left] = await engine.jobs.unwait(q, "pool-a", now_ms=t0 + 2)
    assert (left.id, left.attempt) == ("m", 1)
    assert await engine._client.llen(QueueKeys(q).inbox("pool-a")) == 0
    assert await engine.jobs.unwait(q, "pool-a", now_ms=t0 + 3) == []
    await engine.enqueue_batch([job(q, id="n")], now_ms=t0 + 4)  # deregistered: a plain wake-up
    assert (await engine.reads.get_job(q, "n")).state == "pending"  # type: ignore[union-attr]


async def test_a_claim_that_fills_its_slots_deregisters(engine: Engine, q: str, job: Job, t0: int) -> None:
    await _seed(engine, q, job, t0)
    await _register(engine, q, t0)
    await engine._client.hdel(QueueKeys(q).waiters, "pool-a")  # (as if it was handed something)
    await engine.enqueue_batch([job(q, id="one"), job(q, id="two")], now_ms=t0 + 1)
    got = await engine.jobs.claim(q, 1, worker="w-a", waiter="pool-a", wait_ms=WAIT_MS, now_ms=t0 + 2)
    assert [j.id for j in got] == ["one"]
    assert not await engine._client.hexists(QueueKeys(q).waiters, "pool-a")  # full: not waiting
    got = await engine.jobs.claim(q, 3, worker="w-a", waiter="pool-a", wait_ms=WAIT_MS, now_ms=t0 + 3)
    assert [j.id for j in got] == ["two"]
    slots = await engine._client.hget(QueueKeys(q).waiters, "pool-a")
    assert slots is not None
    assert slots.split(b"|")[0] == b"2"  # short: waiting with its two free slots
