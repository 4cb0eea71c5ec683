"""saq: one worker process per run with concurrency 50; enqueue via Queue.enqueue (bulk: map/batch is
for waiting on results, so plain enqueues); delays native (scheduled=epoch seconds)."""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from typing import Any

import common
from saq import Queue

queue = Queue.from_url(common.QUEUE_REDIS, name="bench")


async def noop(ctx: dict[str, Any], *, due: float) -> None:
    await common.arecord(due)


settings = {"queue": queue, "functions": [noop], "concurrency": common.slots(50)}


def enqueue(n: float) -> None:
    async def go() -> None:
        await queue.connect()
        for _ in range(int(n)):
            await queue.enqueue("noop", due=0)
        await queue.disconnect()

    asyncio.run(go())


def rate(r: float, s: float) -> None:
    async def go() -> None:
        await queue.connect()
        await common.async_open_loop(r, s, lambda due: queue.enqueue("noop", due=due))
        await queue.disconnect()

    asyncio.run(go())


def delayed(n: float, d: float) -> None:
    async def go() -> None:
        await queue.connect()
        due = math.ceil(time.time() + d)  # saq schedules in whole seconds
        for _ in range(int(n)):
            await queue.enqueue("noop", due=due * 1000, scheduled=due)
        await queue.disconnect()

    asyncio.run(go())


def worker() -> None:
    os.execvp(sys.executable, [sys.executable, "-m", "saq", "run_saq.settings", "--workers", "1"])


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "delayed": delayed, "worker": worker})
