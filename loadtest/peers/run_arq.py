"""arq: poll_delay lowered to 0.01 s (default 0.5), max_jobs 50, results kept 1 s; delays native."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import timedelta
from typing import Any

import common
from arq import create_pool
from arq.connections import RedisSettings

REDIS = RedisSettings.from_dsn(common.QUEUE_REDIS)


async def noop(ctx: dict[str, Any], due: float) -> None:
    await common.arecord(due)


class WorkerSettings:
    functions = (noop,)
    redis_settings = REDIS
    poll_delay = 0.01
    max_jobs = common.slots(50)
    keep_result = 1
    handle_signals = True


def _run(coro_fn: Any) -> None:
    asyncio.run(coro_fn())


def enqueue(n: float) -> None:
    async def go() -> None:
        pool = await create_pool(REDIS)
        for _ in range(int(n)):
            await pool.enqueue_job("noop", 0)
        await pool.aclose()

    _run(go)


def rate(r: float, s: float) -> None:
    async def go() -> None:
        pool = await create_pool(REDIS)
        await common.async_open_loop(r, s, lambda due: pool.enqueue_job("noop", due))
        await pool.aclose()

    _run(go)


def delayed(n: float, d: float) -> None:
    async def go() -> None:
        pool = await create_pool(REDIS)
        due = time.time() + d
        for _ in range(int(n)):
            await pool.enqueue_job("noop", due * 1000, _defer_by=timedelta(seconds=due - time.time()))
        await pool.aclose()

    _run(go)


def worker() -> None:
    os.execvp(sys.executable, [sys.executable, "-m", "arq", "run_arq.WorkerSettings"])


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "delayed": delayed, "worker": worker})
