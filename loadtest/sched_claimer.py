"""A claimer process of the scheduler bench (``loadtest.scheduler_bench``): claims every job of its queues
as soon as it is claimable (batched claims, batched completions), and records each job's start minus its
``run_at`` (ms). At the end it writes the lateness values (``array('q')``) and its counts to files the
bench reads."""

from __future__ import annotations

import asyncio
import json
import multiprocessing.synchronize
from array import array
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from jqcore.clock import now_ms
from jqengine import Engine

__all__ = ["claim_process"]

CLAIM = 500


async def _claim(
    url: str, queues: list[str], stop: multiprocessing.synchronize.Event, progress: Any, out: Path
) -> None:
    client = aioredis.Redis.from_url(url, socket_timeout=90)
    engine = Engine(client)
    lateness = array("q")
    seen: set[str] = set()
    again = 0
    while not stop.is_set():
        got = 0
        for queue in queues:
            claimed = await engine.jobs.claim(queue, CLAIM, worker="bench")
            now = now_ms()
            for c in claimed:
                if c.id in seen:
                    again += 1
                    continue
                seen.add(c.id)
                lateness.append(now - (c.envelope.run_at or 0))
            if claimed:
                await engine.jobs.complete_many(queue, [((c.id, c.attempt, c.token), None) for c in claimed])
            got += len(claimed)
        if got:
            with progress.get_lock():
                progress.value += got
        else:
            await engine.jobs.wait_for_work(queues, timeout_s=1)
    await client.aclose()
    with (out.with_suffix(".lat")).open("wb") as f:
        lateness.tofile(f)
    out.with_suffix(".json").write_text(json.dumps({"claimed": len(seen), "again": again}))


def claim_process(
    url: str, queues: list[str], stop: multiprocessing.synchronize.Event, progress: Any, out: str
) -> None:
    """The process's target (``multiprocessing``, spawn)."""
    asyncio.run(_claim(url, queues, stop, progress, Path(out)))
