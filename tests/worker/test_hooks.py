"""A pool's start-up and shut-down hooks (``worker.hooks``) against the real Redis."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from jobq import StartupFailed, WorkerContext
from jqcore.envelope import new_envelope
from jqengine import Engine
from worker.pool import Pool, PoolConfig
from worker.registry import Registry, current_job

pytestmark = pytest.mark.usefixtures("scheduler")


async def enqueue(engine: Engine, queue: str, kind: str, args: object = None) -> str:
    env = new_envelope(queue, kind, args)  # type: ignore[arg-type]
    await engine.enqueue_batch([env])
    return env.id


async def test_hooks_run_once_each_in_order_and_handlers_see_their_state(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.hooks", Registry()
    calls: list[str] = []
    seen: list[WorkerContext] = []

    @reg.on_startup
    async def open_session(ctx: WorkerContext) -> None:
        calls.append("startup 1")
        seen.append(ctx)
        ctx.state["greeting"] = "hello"

    @reg.on_startup
    def warm(ctx: WorkerContext) -> None:
        calls.append("startup 2")
        ctx.state["punct"] = "!"

    @reg.on_shutdown
    async def close_session(ctx: WorkerContext) -> None:
        calls.append(f"shutdown 1 {sorted(ctx.state)}")

    @reg.on_shutdown
    def last(_: WorkerContext) -> None:
        calls.append("shutdown 2")

    @reg.job("greet", queue=q)
    async def greet(name: str) -> str:
        calls.append("job")
        state = current_job().worker.state
        return f"{state['greeting']} {name}{state['punct']}"

    @reg.job("greet.sync", queue=q)
    def greet_sync(name: str) -> str:  # a thread handler sees the same context
        return f"{current_job().worker.state['greeting']} {name}"

    a, b = await enqueue(engine, q, "greet", ["ada"]), await enqueue(engine, q, "greet.sync", ["bob"])
    async with Pool(reg, engine, PoolConfig([q], burst=True), redis=redis) as pool:
        await asyncio.wait_for(pool.drained.wait(), 60)
        assert pool.context is seen[0]
    assert calls == ["startup 1", "startup 2", "job", "shutdown 1 ['greeting', 'punct']", "shutdown 2"]
    assert (seen[0].queues, seen[0].pool.endswith(f":{q}")) == ((q,), True)
    got_a, got_b = await engine.reads.get_job(q, a), await engine.reads.get_job(q, b)
    assert got_a is not None
    assert got_b is not None
    assert (got_a.result, got_b.result) == ('"hello ada!"', '"hello bob"')


async def test_a_failing_startup_hook_claims_nothing_and_still_runs_the_shutdown_hooks(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.hooks", Registry()
    calls: list[str] = []
    reg.on_startup(lambda ctx: ctx.state.update(opened=True))

    @reg.on_startup
    async def connect_db(_: WorkerContext) -> None:
        raise ConnectionRefusedError("no database")

    @reg.on_startup
    def never_reached(_: WorkerContext) -> None:
        calls.append("startup 3")

    @reg.on_shutdown
    def cleanup(ctx: WorkerContext) -> None:
        calls.append(f"shutdown {ctx.state}")

    @reg.job("work", queue=q)
    async def work() -> None:
        calls.append("job")

    job_id = await enqueue(engine, q, "work")
    pool = Pool(reg, engine, PoolConfig([q]), redis=redis)
    with pytest.raises(StartupFailed, match=r"connect_db failed: ConnectionRefusedError\('no database'\)"):
        await pool.start()
    assert not pool.running
    assert calls == ["shutdown {'opened': True}"], "the shut-down hooks ran once, after the failed start"
    await pool.stop()  # stopped already: nothing runs again
    assert calls == ["shutdown {'opened': True}"]
    got = await engine.reads.get_job(q, job_id)
    assert got is not None
    assert (got.state, got.attempt) == ("pending", 0), "nothing was claimed"
