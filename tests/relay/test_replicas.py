"""The relay commits a batch's offsets only once its writes are on a replica (``WAIT``,
``JOBQ_RELAY_WAIT_REPLICAS``): against a Redis of the test's own with one replica (paused with SIGSTOP:
the master keeps taking writes, the replica acknowledges none), and the check itself on the session's
Redis Cluster, whose masters have no replica."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from jqengine import ReplicaWait
from jqrelay.main import RelayService
from jqstack.supervise import Child

Produce = Callable[..., Any]
Offsets = Callable[..., Any]

WAIT_MS = 200


async def test_offsets_wait_for_the_replica_and_the_batch_is_written_again_meanwhile(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    produce_jobs: Produce,
    offsets: Offsets,
    replicated: tuple[str, Child],
) -> None:
    url, replica = replicated
    topic, queue = make_topic("jobs", partitions=1), f"{prefix}.q"
    await produce_jobs(topic, queue, 50)
    async with make_relay(topic, redis_url=url, wait_replicas_ms=WAIT_MS) as relay:  # auto: 1 replica here
        signals = relay.relays[0].signals
        await signals.committed.wait_for(lambda n: n >= 50)
        replica.signal(signal.SIGSTOP)  # connected, acknowledging nothing
        try:
            stalls = signals.stalled.mark()
            await produce_jobs(topic, queue, 50)
            await signals.stalled.wait_for(lambda why: why == "replicas", after=stalls)
            await signals.stalled.wait_for(lambda why: why == "replicas", after=signals.stalled.mark())
            assert await offsets(topic) == (50, 100), "nothing committed while the replica lags"
            # the stalled batch is on the master (written again at each try, once): all 50, or the part of
            # them its read had when it began (the rest waits behind it, unread)
            assert 50 < (await relay.engine.reads.depth(queue)).pending <= 100, "written to the master"
            async with aioredis.Redis.from_url(url) as other:  # a client that wrote none of it checks too
                why = await ReplicaWait(other, None, WAIT_MS).confirm([f"jobq:{{{queue}}}:ready"])
            assert why == f"redis: 0 of 1 replicas in {WAIT_MS} ms"
        finally:
            replica.signal(signal.SIGCONT)
        await signals.committed.wait_for(lambda n: n >= 100)
        assert await offsets(topic) == (100, 100)
        assert (await relay.engine.reads.depth(queue)).pending == 100
        counts = relay.relays[0].counts
        assert counts["written"] == 100, counts  # written again meanwhile: not counted twice


@pytest.mark.cluster
async def test_the_check_waits_on_each_master_written(redis_cluster: RedisCluster, prefix: str) -> None:
    await redis_cluster.initialize()
    keys = [f"jobq:{{{prefix}.q{i}}}:ready" for i in range(12)]  # spread over the three masters
    masters = {n.name for n in (redis_cluster.get_node_from_key(k) for k in keys) if n is not None}
    assert await ReplicaWait(redis_cluster, None, WAIT_MS).confirm(keys) is None, (
        "no replica: nothing to wait"
    )
    assert await ReplicaWait(redis_cluster, 0, WAIT_MS).confirm(keys) is None
    why = await ReplicaWait(redis_cluster, 1, WAIT_MS).confirm(keys)
    assert why is not None
    assert any(why == f"{m}: 0 of 1 replicas in {WAIT_MS} ms" for m in masters), why
