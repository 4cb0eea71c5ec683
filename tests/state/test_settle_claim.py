"""settle_claim: a pool's round in one call — outcomes written as settle writes them, then a claim."""

from __future__ import annotations

from collections.abc import Callable

from jqcore.envelope import Envelope
from jqengine import Code, Engine, Settle


async def test_completes_then_claims_the_next_jobs_in_priority_order(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    await engine.enqueue_batch([job(q, priority=p) for p in (5, 1, 3, 4)])
    [first] = await engine.jobs.claim(q, 1, lease_ms=30_000)
    forged = Settle(("nope", 1, "x"))
    answers, claimed = await engine.jobs.settle_claim(
        q, [Settle((first.id, first.attempt, first.token), b'"r"'), forged], 2, worker="w1"
    )
    assert [code for code, _ in answers] == [Code.OK, Code.MISSING]
    assert [c.envelope.priority for c in claimed] == [3, 4]
    assert all(c.attempt == 1 and c.lease_ms > 0 for c in claimed)
    done = await engine.reads.get_job(q, first.id)
    assert done is not None
    assert (done.state, done.result) == ("completed", '"r"')
    again, more = await engine.jobs.settle_claim(q, [Settle((first.id, first.attempt, first.token))], 0)
    assert (again, more) == ([(Code.OK, 0)], []), "a completion sent again gets its first answer"


async def test_a_kind_slot_freed_by_the_outcome_is_claimed_by_the_same_call(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    await engine.admin.configure_kind("limited", queues=[q], concurrency=1)
    await engine.enqueue_batch([job(q, "limited") for _ in range(2)])
    [running] = await engine.jobs.claim(q, 2, lease_ms=30_000)
    assert (await engine.reads.depth(q)).blocked == 1, "the second waits for the kind's slot"
    _, claimed = await engine.jobs.settle_claim(q, [Settle((running.id, running.attempt, running.token))], 1)
    assert len(claimed) == 1
    assert claimed[0].id != running.id


async def test_a_paused_queue_takes_the_outcomes_and_hands_out_nothing(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    await engine.enqueue_batch([job(q) for _ in range(3)])
    [running] = await engine.jobs.claim(q, 1, lease_ms=30_000)
    await engine.admin.pause(q, True)
    owner = (running.id, running.attempt, running.token)
    answers, claimed = await engine.jobs.settle_claim(q, [Settle(owner, error="boom", delay_ms=0)], 2)
    assert (answers[0][0], claimed) == (Code.RETRY, [])
    depth = await engine.reads.depth(q)
    assert (depth.running, depth.pending + depth.delayed) == (0, 3)


async def test_a_kind_without_a_limit_counts_its_running_jobs_and_a_limit_set_later_starts_from_them(
    engine: Engine, q: str, job: Callable[..., Envelope]
) -> None:
    async def running() -> int:
        return int((await engine.reads.kinds([q]))["free"]["queues"][q]["running"])

    await engine.admin.configure_kind("free", queues=[q], max_attempts=3)  # listed, without a limit
    await engine.enqueue_batch([job(q, "free") for _ in range(6)])
    _, claimed = await engine.jobs.settle_claim(q, [], 3)
    assert await running() == 3
    _, more = await engine.jobs.settle_claim(q, [Settle((c.id, c.attempt, c.token)) for c in claimed[:2]], 1)
    assert (len(more), await running()) == (1, 2), "counted once per call, the outcomes and the claims"
    await engine.admin.configure_kind("free", queues=[q], concurrency=2)
    _, none = await engine.jobs.settle_claim(q, [], 2)
    assert none == [], "the limit counts the jobs claimed before it was set"
    assert (await engine.reads.depth(q)).blocked == 2
    _, freed = await engine.jobs.settle_claim(
        q, [Settle((claimed[2].id, claimed[2].attempt, claimed[2].token))], 2
    )
    assert (len(freed), await running()) == (1, 2), "the slot it freed, and only that one, is taken"
