"""jobq's side of the floors' worker hop: the same no-op job as :mod:`loadtest.floors.worker` runs, one
Redis round trip (``INCR``) that counts it, as a jobq handler (``--app loadtest.floors.jobq_app:registry``).

The count goes to the queue's Redis (``JOBQ_REDIS_URL``), under :func:`loadtest.floors.lease.count_key`
of the job's queue, where the benchmark reads it."""

from __future__ import annotations

import os

import redis.asyncio as aioredis

from loadtest.floors.lease import count_key
from worker.registry import Registry, current_job

__all__ = ["KIND", "registry"]

KIND = "floor.noop"
registry = Registry()
_clients: dict[int, aioredis.Redis] = {}


@registry.job(KIND)
async def noop() -> None:
    """One round trip: count the job."""
    client = _clients.get(os.getpid())
    if client is None:
        client = _clients[os.getpid()] = aioredis.Redis.from_url(os.environ["JOBQ_REDIS_URL"])
    await client.incr(count_key(current_job().queue))


@registry.job("demo.noop")
async def warm_up() -> None:
    """The job ``loadtest.e2e_bench.pipeline`` sends through a new pipeline before the clock starts."""
