"""jobq's Redis stage (runs in jobq's own .venv): enqueue_batch as the relay writes (1,000 per call for
the bulk enqueue, one per call at a fixed rate), workers `python -m worker` (JOBQ_WORKER_CONCURRENCY=50),
each with a scheduler instance `python -m jqsched` in its process group (delayed jobs need one; its CPU
counts with the worker's, as rq's and huey's in-worker schedulers do)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import common
import redis.asyncio as aioredis

from jqcore.envelope import new_envelope
from jqengine import Engine

QUEUE = "bench"


def _engine() -> Engine:
    return Engine(aioredis.Redis.from_url(common.QUEUE_REDIS))


def enqueue(n: float) -> None:
    async def go() -> None:
        engine = _engine()
        for i in range(0, int(n), 1000):
            batch = [new_envelope(QUEUE, "bench.noop", {"due": 0}) for _ in range(min(1000, int(n) - i))]
            await engine.enqueue_batch(batch)
        await engine.aclose()

    asyncio.run(go())


def rate(r: float, s: float) -> None:
    async def go() -> None:
        engine = _engine()
        await common.async_open_loop(
            r, s, lambda due: engine.enqueue_batch([new_envelope(QUEUE, "bench.noop", {"due": due})])
        )
        await engine.aclose()

    asyncio.run(go())


def delayed(n: float, d: float) -> None:
    async def go() -> None:
        engine = _engine()
        due = int((time.time() + d) * 1000)
        batch = [new_envelope(QUEUE, "bench.noop", {"due": due}, run_at=due) for _ in range(int(n))]
        await engine.enqueue_batch(batch)
        await engine.aclose()

    asyncio.run(go())


def worker() -> None:
    env = {
        **os.environ,
        "JOBQ_REDIS_URL": common.QUEUE_REDIS,
        "JOBQ_LOG_LEVEL": "warning",
        "JOBQ_WORKER_QUEUES": QUEUE,
        "JOBQ_WORKER_CONCURRENCY": str(common.slots(50)),
        "JOBQ_WORKER_APP": "jobq_app:registry",
    }
    # the scheduler stays in this process group, so stopping the worker's group stops it too
    # timers only, as the peers' schedulers: no Kafka or Consul here, so no events, far tier or cron (a
    # scheduler with them checks their topics and Consul at start and stops when they do not answer)
    timers_only = {
        "JOBQ_SCHEDULER_EVENTS": "false",
        "JOBQ_SCHEDULER_FAR": "false",
        "JOBQ_SCHEDULER_CRON": "false",
    }
    subprocess.Popen(
        [sys.executable, "-m", "jqsched"], env={**env, "JOBQ_SCHEDULER_QUEUES": QUEUE, **timers_only}
    )
    os.execve(sys.executable, [sys.executable, "-m", "worker"], env)


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "delayed": delayed, "worker": worker})
