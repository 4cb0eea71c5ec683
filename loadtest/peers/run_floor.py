"""The worker's floor (:mod:`loadtest.floors.worker`, the least lease worker: one Lua call per round) as a
system of the peer comparison, in jobq's own environment: enqueue writes the lease queue as the relay's
floor does (two commands per 1,000 jobs), the worker runs ``common.slots(50)`` jobs at once, each job the
same task as every peer's (``common.arecord``). No delayed jobs (the floor has none): not measured. It is
a yardstick, not a peer: the report compares jobq with it apart from the peers."""

from __future__ import annotations

import asyncio
import time

import common
import orjson
import redis

from loadtest.floors import lease, worker

QUEUE = "bench"


def _rows(first: int, n: int, due: float) -> list[tuple[bytes, bytes]]:
    body = orjson.dumps({"due": due})
    return [(f"j{i}".encode(), body) for i in range(first, first + n)]


def enqueue(n: float) -> None:
    client = redis.Redis.from_url(common.QUEUE_REDIS)
    for i in range(0, int(n), 1000):
        pipe = client.pipeline(transaction=False)
        lease.write(pipe, QUEUE, _rows(i, min(1000, int(n) - i), 0), int(time.time() * 1000))
        pipe.execute()


def rate(r: float, s: float) -> None:
    client = redis.Redis.from_url(common.QUEUE_REDIS)
    sent = iter(range(int(r * s)))

    def send(due: float) -> None:
        pipe = client.pipeline(transaction=False)
        lease.write(pipe, QUEUE, _rows(next(sent), 1, due), int(time.time() * 1000))
        pipe.execute()

    common.open_loop(r, s, send)


async def _job(payload: bytes) -> None:
    await common.arecord(float(orjson.loads(payload)["due"]))


def run_worker() -> None:
    asyncio.run(worker.serve(common.QUEUE_REDIS, QUEUE, common.slots(50), 30_000, burst=False, job=_job))


if __name__ == "__main__":
    common.main({"enqueue": enqueue, "rate": rate, "worker": run_worker})
