"""taskiq with taskiq-redis: BROKER=list (ListQueueBroker, BRPOP) or stream (RedisStreamBroker, consumer
group); one worker process per run (--workers 1) with --max-async-tasks 50. Delays need taskiq's separate
scheduler process and a schedule source: not measured (n/a)."""

from __future__ import annotations

import asyncio
import os
import sys

import common
from taskiq_redis import ListQueueBroker, RedisStreamBroker

KIND = os.environ.get("TASKIQ_BROKER", "list")
broker = ListQueueBroker(common.QUEUE_REDIS) if KIND == "list" else RedisStreamBroker(common.QUEUE_REDIS)


@broker.task(task_name="noop")
async def noop(due: float) -> None:
    await common.arecord(due)


def enqueue(n: float) -> None:
    async def go() -> None:
        await broker.startup()
        for _ in range(int(n)):
            await noop.kiq(0)
        await broker.shutdown()

    asyncio.run(go())


def rate(r: float, s: float) -> None:
    async def go() -> None:
        await broker.startup()
        await common.async_open_loop(r, s, lambda due: noop.kiq(due))
        await broker.shutdown()

    asyncio.run(go())


def worker() -> None:
    os.execvp(
        sys.executable,
        [
            sys.executable,
            "-m",
            "taskiq",
            "worker",
            "run_taskiq:broker",
            "--workers",
            "1",
            "--max-async-tasks",
            str(common.slots(50)),
            "--log-level",
            "WARNING",
        ],
    )


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "worker": worker})
