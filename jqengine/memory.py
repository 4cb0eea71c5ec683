"""A queue's share of Redis memory, estimated cheaply enough to ask every couple of seconds (the relay's
per-queue memory budgets, ``jobq status``).

Exact accounting would need a ``MEMORY USAGE`` of every job hash, or a byte counter kept by every Lua
transition. Instead: the job records a queue holds (pending, delayed, running, blocked, finished until GC,
dead), each state's at the mean ``MEMORY USAGE`` (every field counted) of a few of its own job hashes drawn
at random (``ZRANDMEMBER``: a finished job, with its result and attempts, is often larger than a pending
one), plus the queue's index and event keys (``MEMORY USAGE ... SAMPLES 5``). Two pipelined round trips on the
queue's slot, whatever its size; ``tests/state/test_memory.py`` holds it within 20 % of the sum over the
keys on a queue of similar jobs in mixed states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jqengine.codes import QueueConfigInvalid
from jqengine.keys import QueueKeys
from jqengine.redisconn import RedisClient, memory_info

if TYPE_CHECKING:
    from jqcore.settings.pipeline import QueueBounds

__all__ = ["QueueMemory", "check_bounds", "queue_memory"]

SAMPLED_JOBS = 3
"""Job hashes drawn from each non-empty job set for the mean size."""
KEY_SAMPLES = 5
"""``MEMORY USAGE`` samples of an index key's elements (Redis's own default)."""
JOB_SETS = ("ready", "delayed", "running", "done")
"""The ZSETs whose members are job hashes of this queue (``dead`` is a subset of ``done``)."""
INDEX_KEYS = ("ready", "delayed", "far", "running", "done", "dead", "events")


@dataclass(frozen=True, slots=True)
class QueueMemory:
    queue: str
    jobs: int
    """Job records held in Redis (pending, delayed, running, blocked, finished until GC)."""
    bytes: int
    """Estimated bytes of the queue's keys (job hashes and indexes)."""
    budget: int
    """The queue's configured ``memory_budget`` (0: none of its own)."""
    retained: int = 0
    """Of ``bytes``, what no worker drains: the finished jobs (kept until GC, ``retention_ms``) with their
    indexes, and the lifecycle events waiting to be shipped (at most ``events_cap``). A memory budget does
    not count it: holding the queue would not free it."""
    finished_jobs: int = 0


def _int(value: Any) -> int:
    return int(value) if value not in (None, b"", "") else 0


async def queue_memory(client: RedisClient, queue: str) -> QueueMemory:
    keys = QueueKeys(queue)
    pipe = client.pipeline(transaction=False)
    for name in JOB_SETS:
        pipe.zcard(getattr(keys, name))
        pipe.zrandmember(getattr(keys, name), SAMPLED_JOBS)
    pipe.hget(keys.counts, "blocked")
    pipe.hget(keys.config, "memory_budget")
    *sets, blocked, budget = await pipe.execute()
    counts = [_int(n) for n in sets[0::2]]
    samples = [[i.decode() if isinstance(i, bytes) else str(i) for i in ids or ()] for ids in sets[1::2]]
    pipe = client.pipeline(transaction=False)
    for name in INDEX_KEYS:
        pipe.memory_usage(getattr(keys, name), samples=KEY_SAMPLES)
    for ids in samples:
        for job_id in ids:
            pipe.memory_usage(keys.job(job_id), samples=0)  # every field: a sample of 5 of a job's ~16
            # extrapolates the envelope's bytes (one field) to none or to three times the hash
    sizes = iter(await pipe.execute())
    indexes = {name: _int(next(sizes)) for name in INDEX_KEYS}
    # stratified: each set's jobs at the mean size of its own sample (a finished job, with its result and
    # attempts, is often larger than a pending one); blocked jobs at the mean of all
    total, means, retained = 0.0, [], float(indexes["done"] + indexes["dead"] + indexes["events"])
    for name, n, ids in zip(JOB_SETS, counts, samples, strict=True):
        found = [_int(size) for size in (next(sizes) for _ in ids) if size is not None]  # GC may take one
        if found:
            means.append(sum(found) / len(found))
            total += n * means[-1]
            retained += n * means[-1] if name == "done" else 0
    jobs = sum(counts) + max(0, _int(blocked))
    if means:
        total += max(0, _int(blocked)) * sum(means) / len(means)
    done = counts[JOB_SETS.index("done")]
    return QueueMemory(queue, jobs, sum(indexes.values()) + round(total), _int(budget), round(retained), done)


async def check_bounds(client: RedisClient, bounds: QueueBounds, changes: Mapping[str, Any]) -> None:
    """:class:`~jqengine.codes.QueueConfigInvalid` naming each value of a queue configuration's
    ``changes`` past the operator's bounds (``jqcore.settings.pipeline.QueueBounds``; a memory budget
    against this Redis's ``maxmemory``)."""
    maxmemory = int((await memory_info(client)).get("maxmemory", 0)) if "memory_budget" in changes else 0
    problems = bounds.problems(changes, maxmemory)
    if problems:
        raise QueueConfigInvalid("; ".join(f"{name}: {why}" for name, why in problems))
