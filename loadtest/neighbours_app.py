"""The handlers of ``./run bench neighbours`` (the worker processes import this module): a no-op for the
neighbour queue, and for the held queues one that records each run — its job id pushed on the list
:func:`ran_key` of its queue in Redis — so the bench can check that every held job ran once, and in order
per exclusivity key (an exclusive queue runs one job of a key at a time, so a key's jobs are pushed in the
order they ran)."""

from __future__ import annotations

from jqcore.settings.common import load
from jqcore.settings.servers import RedisSettings
from jqengine import RedisClient, connect
from worker.registry import Registry, current_job

__all__ = ["NOOP", "RECORDED", "ran_key", "registry"]

NOOP = "bench.noop"
RECORDED = "bench.recorded"
registry = Registry()
_client: list[RedisClient] = []


def ran_key(queue: str) -> str:
    """The list of a queue's job ids, one per run, in the order they ran."""
    return f"bench:neighbours:ran:{{{queue}}}"


@registry.job(NOOP)
async def noop() -> None:
    """Does nothing (the bench measures the neighbour's wait, not its work)."""


@registry.job(RECORDED)
async def recorded() -> None:
    if not _client:
        _client.append(connect(load(RedisSettings)))
    job = current_job()
    await _client[0].rpush(ran_key(job.queue), job.id)
