"""A Python pool claims by metadata filter, like the HTTP claim API, and refuses a key the queue does
not index instead of silently claiming nothing."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from jqcore.envelope import new_envelope
from jqengine import Engine, FilterInvalid, QueueConfig
from worker.pool import Pool, PoolConfig
from worker.registry import Registry
from worker.settings import parse_filter

pytestmark = pytest.mark.usefixtures("scheduler")  # pools run no timers: the service does


async def test_a_pool_with_a_filter_runs_only_matching_jobs(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q, reg = f"{prefix}.f", Registry()
    await engine.admin.configure_queue(q, QueueConfig(filter_keys=("region",)))
    ran: list[str] = []
    eu_done = asyncio.Event()

    @reg.job("where", queue=q)
    async def where(region: str) -> None:
        ran.append(region)
        if ran.count("eu") == 2:
            eu_done.set()

    envs = [new_envelope(q, "where", {"region": r}, meta={"region": r}) for r in ("eu", "us", "eu")]
    await engine.enqueue_batch(envs)
    async with Pool(reg, engine, PoolConfig([q], filter={"region": "eu"}), redis=redis):
        await asyncio.wait_for(eu_done.wait(), 30)
    assert sorted(ran) == ["eu", "eu"]
    assert (await engine.reads.depth(q)).pending == 1, "the us job waits for a pool that wants it"


async def test_a_filter_on_an_unindexed_key_is_refused(
    engine: Engine, redis: aioredis.Redis, prefix: str
) -> None:
    q = f"{prefix}.f"
    await engine.admin.configure_queue(q, QueueConfig(filter_keys=("region",)))
    with pytest.raises(FilterInvalid, match="tier"):
        await engine.jobs.claim(q, 1, filter={"tier": "gold"})
    with pytest.raises(FilterInvalid, match="tier"):  # a pool says so at start instead of idling forever
        async with Pool(Registry(), engine, PoolConfig([q], filter={"tier": "gold"}), redis=redis):
            pass


def test_filter_option_parsing() -> None:
    assert parse_filter(["region=eu", "tier=a=b"]) == {"region": "eu", "tier": "a=b"}
    with pytest.raises(Exception, match="KEY=VALUE"):
        parse_filter(["region"])
