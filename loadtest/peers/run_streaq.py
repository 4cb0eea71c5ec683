"""streaq (Redis streams, one consumer group): one worker process per run (`python -m streaq run`, one
process) with Worker(concurrency=50, or the one shape's slots) and the default prefetch (= concurrency),
plain asyncio (no
uvloop, as for the other asyncio peers); the task is registered silent (no INFO log line per task: the
others log at WARNING) with ttl=0 (results not stored, as celery's are ignored); enqueue via
Worker.enqueue_many (one pipeline per 1,000, its bulk API); delays native (start(schedule=datetime)),
moved to the stream by each worker's own scheduler loop, which runs every 0.5 s (fixed in streaq)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import UTC, datetime

import common
from streaq import Worker

worker = Worker(redis_url=common.QUEUE_REDIS, queue_name="bench", concurrency=common.slots(50))


@worker.task(silent=True, ttl=0)
async def noop(due: float) -> None:
    await common.arecord(due)


def enqueue(n: float) -> None:
    async def go() -> None:
        async with worker:
            for i in range(0, int(n), 1000):
                await worker.enqueue_many([noop.enqueue(0) for _ in range(min(1000, int(n) - i))])

    asyncio.run(go())


def rate(r: float, s: float) -> None:
    async def go() -> None:
        async with worker:
            await common.async_open_loop(r, s, lambda due: noop.enqueue(due).start())

    asyncio.run(go())


def delayed(n: float, d: float) -> None:
    async def go() -> None:
        async with worker:
            due = time.time() + d
            at = datetime.fromtimestamp(due, UTC)
            for _ in range(int(n)):
                await noop.enqueue(due * 1000).start(schedule=at)

    asyncio.run(go())


def worker_process() -> None:
    os.execvp(sys.executable, [sys.executable, "-m", "streaq", "run", "run_streaq:worker"])


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "delayed": delayed, "worker": worker_process})
