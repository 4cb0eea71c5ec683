"""A pool's concurrency changed while it runs (SIGHUP re-reading its settings file, or ``set_concurrency``),
against the real Redis: raised, more jobs run at once; lowered, the running ones finish and fewer are
claimed; no job is dropped or run twice."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path

import redis.asyncio as aioredis

from jobq import Registry, current_job
from jqcore.envelope import new_envelope
from jqcore.testsignal import enable_all
from jqengine import Engine
from worker.main import reload_on_sighup
from worker.pool import Pool, PoolConfig


async def test_concurrency_changes_while_the_pool_runs(
    engine: Engine, redis: aioredis.Redis, prefix: str, tmp_path: Path
) -> None:
    q, reg = f"{prefix}.live", Registry()
    gate, three = asyncio.Event(), asyncio.Event()
    started: asyncio.Queue[str] = asyncio.Queue()  # phase 2: each job held until the test lets it end
    ends: dict[str, asyncio.Event] = {}
    runs: Counter[str] = Counter()
    peaks = {1: 0, 2: 0}
    running = 0

    @reg.job("work", queue=q)
    async def work(phase: int) -> None:
        nonlocal running
        runs[current_job().id] += 1
        running += 1
        peaks[phase] = max(peaks[phase], running)
        if running == 3:
            three.set()
        try:
            if phase == 1:
                await gate.wait()
            else:
                job_id = current_job().id
                ends[job_id] = asyncio.Event()
                started.put_nowait(job_id)
                await ends[job_id].wait()
        finally:
            running -= 1

    settings = tmp_path / "worker.env"
    loop = asyncio.get_running_loop()
    async with Pool(reg, engine, PoolConfig([q], concurrency=1, idle_wait_s=5), redis=redis) as pool:
        enable_all(pool.signals)
        reload_on_sighup(pool, settings)
        try:
            settings.write_text("JOBQ_WORKER_CONCURRENCY=3\n")
            os.kill(os.getpid(), signal.SIGHUP)  # the idle pool, blocked in Redis, re-claims at once
            first = [new_envelope(q, "work", [1]) for _ in range(3)]
            await engine.enqueue_batch(first)
            await asyncio.wait_for(three.wait(), 30)  # three at once: the raise took
            assert pool.concurrency == 3

            pool.set_concurrency(1)  # the admin call: the three running jobs finish, one at a time follows
            second = [new_envelope(q, "work", [2]) for _ in range(3)]
            await engine.enqueue_batch(second)
            assert (await engine.reads.depth(q)).pending == 3  # a full pool claims none of them
            gate.set()
            for _ in second:  # one at a time: each held while running, so a second one would show
                ends[await asyncio.wait_for(started.get(), 30)].set()
            for env in first + second:
                await pool.signals.finished.wait_for(lambda f, i=env.id: f == (i, "succeeded"), 30)
        finally:
            loop.remove_signal_handler(signal.SIGHUP)
    assert peaks == {1: 3, 2: 1}
    assert runs == Counter({env.id: 1 for env in first + second})  # none dropped, none run twice
