"""Per-kind defaults against the real Redis: a kind's ``priority`` for its jobs enqueued without one, and
``ignore_result`` (set by ``Engine.configure_kind``, ``PUT /v1/kinds/{kind}`` or ``@reg.job(...)``)."""

from __future__ import annotations

import redis.asyncio as aioredis

from jobq import Registry
from jqcore.envelope import new_envelope
from jqcore.testsignal import enable_all
from jqengine import Engine
from worker.pool import Pool, PoolConfig


async def test_a_kinds_default_priority_orders_its_jobs_enqueued_without_one(
    engine: Engine, prefix: str
) -> None:
    q = f"{prefix}.kprio"
    await engine.admin.configure_kind("urgent", queues=[q], priority=5)
    plain = new_envelope(q, "plain")
    urgent = new_envelope(q, "urgent")  # no priority: the kind's
    late = new_envelope(q, "urgent", priority=plain.priority + 10**9)  # its own priority wins
    await engine.enqueue_batch([plain, late, urgent])
    claimed = [j.id for j in await engine.jobs.claim(q, 3)]
    assert claimed == [urgent.id, plain.id, late.id]
    got = await engine.reads.get_job(q, urgent.id)
    assert got is not None
    assert got.priority == 5
    kinds = await engine.reads.kinds([q])
    assert kinds["urgent"]["queues"][q]["priority"] == 5


async def test_a_kind_with_ignore_result_keeps_no_result(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q = f"{prefix}.kquiet"
    reg = Registry()

    @reg.job("quiet", queue=q, ignore_result=True, priority=1)
    async def quiet() -> dict[str, str]:
        return {"big": "x" * 1000}

    @reg.job("loud", queue=q)
    async def loud() -> str:
        return "kept"

    a, b = new_envelope(q, "quiet"), new_envelope(q, "loud")
    async with Pool(
        reg, engine, PoolConfig([q], idle_wait_s=0.2), redis=redis
    ) as pool:  # registers the kinds' options
        enable_all(pool.signals)
        await engine.enqueue_batch([a, b])
        await pool.signals.finished.wait_for(lambda f: f == (a.id, "succeeded"))
        await pool.signals.finished.wait_for(lambda f: f == (b.id, "succeeded"))
    got_a, got_b = await engine.reads.get_job(q, a.id), await engine.reads.get_job(q, b.id)
    assert got_a is not None
    assert got_b is not None
    assert (got_a.state, got_a.result, got_a.priority) == ("completed", None, 1)
    assert got_b.result == '"kept"'
    # Redis drops it too, whoever completes the job (an HTTP worker sends whatever it likes)
    c = new_envelope(q, "quiet")
    assert (await engine.enqueue_batch([c])).outcomes[0].outcome == "stored"
    (job,) = await engine.jobs.claim(q, 1)
    await engine.jobs.complete(q, (job.id, job.attempt, job.token), b'"sent anyway"')
    got_c = await engine.reads.get_job(q, c.id)
    assert got_c is not None
    assert (got_c.state, got_c.result) == ("completed", None)
