"""The worker's floor: the least a Python asyncio worker can do and keep a lease queue's promise.

``python -m loadtest.floors.worker REDIS_URL QUEUE [--slots N] [--lease-ms MS] [--burst]``

The promise kept (with :mod:`loadtest.floors.lease`): a job is run only under a lease — claimed with a
deadline and a token —, completed only by its token, and claimed again once its lease ran out (a worker
that died, or one that was too slow, loses the job to the next claim). Each round is one Lua call that
settles the jobs finished since the last round and claims as many as the round frees; up to ``slots``
jobs run at once, each its own task. The job is the benchmark's no-op: one Redis round trip (``INCR``)
that counts it. SIGTERM: no more claims, the running jobs finish and are settled, then the process exits.

Left out, against ``jobq worker``: several kinds and their handlers, the envelope's decode and checks,
arguments, results, retries with backoff and dead letters (a failing job is simply settled), timeouts,
lease renewal for long jobs, hand-off claims and prefetch, waking on a new job (an idle worker polls
every 5 ms), priorities, fair queues, rate limits, graphs, lifecycle events, metrics, logs, presence
heartbeats, several queues and processes, the release of unfinished jobs at a stop.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from loadtest.floors.lease import SETTLE_CLAIM, count_key, keys

__all__ = ["main", "serve"]

IDLE_POLL_S = 0.005
Job = Callable[[bytes], Awaitable[None]]


async def serve(url: str, queue: str, slots: int, lease_ms: int, burst: bool, job: Job | None = None) -> None:
    """Run the queue's jobs until SIGTERM (``burst``: until none is pending or running); ``job``: what
    runs a job's payload (default: the benchmark's no-op, one ``INCR`` of :func:`count_key`)."""
    client = aioredis.Redis.from_url(url)
    settle_claim = client.register_script(SETTLE_CLAIM)
    counter = count_key(queue)

    async def count(_payload: bytes) -> None:
        await client.incr(counter)

    work = job or count
    finished: list[bytes] = []  # id, token of each job run since the last round
    running: set[asyncio.Task[None]] = set()
    wake = asyncio.Event()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def run(job_id: bytes, token: bytes, payload: bytes) -> None:
        try:
            await work(payload)  # the benchmark's job: one round trip that counts it
        finally:
            finished.extend((job_id, token))
            wake.set()

    while True:
        wake.clear()  # before taking the finished jobs: a job finishing from here on sets it again
        free = 0 if stop.is_set() else slots - len(running)
        done, finished[:] = list(finished), []
        reply = await settle_claim(keys(queue), [int(time.time() * 1000), lease_ms, free, *done])
        for i in range(1, len(reply), 3):
            task = asyncio.create_task(run(reply[i], reply[i + 1], reply[i + 2]))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:  # the next round when a job has finished (at once if one did meanwhile)
            await wake.wait()
            await asyncio.sleep(0)  # let the jobs that finish in the same turn join the round
        elif stop.is_set() or (burst and len(reply) == 1):
            break
        else:  # idle: poll
            await asyncio.sleep(IDLE_POLL_S)
    await client.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.floors.worker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("url")
    parser.add_argument("queue")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument("--burst", action="store_true", help="exit once no job is pending or running")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.url, args.queue, args.slots, args.lease_ms, args.burst))


if __name__ == "__main__":
    main()
