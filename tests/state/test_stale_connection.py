"""A pooled connection the server closed (a Redis restart, a failover, an idle client dropped) costs the
next command nothing: it is sent once more on a new connection (:func:`jqengine.redisconn.connect`); a
command's task cancelled is cancelled."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from jqcore.settings.servers import RedisSettings
from jqengine.redisconn import connect, connect_sync
from jqstack.manager import Endpoints


async def test_a_command_on_a_connection_the_server_closed_is_sent_again(
    endpoints: Endpoints, redis: aioredis.Redis
) -> None:
    assert endpoints.redis_url
    client = connect(RedisSettings(url=endpoints.redis_url))
    try:
        before = await client.client_id()
        assert await redis.client_kill_filter(_id=before) == 1
        assert await client.ping()
        assert await client.client_id() != before
    finally:
        await client.aclose()


async def test_the_synchronous_client_too(endpoints: Endpoints, redis: aioredis.Redis) -> None:
    assert endpoints.redis_url
    client = connect_sync(RedisSettings(url=endpoints.redis_url))
    try:
        before = await asyncio.to_thread(client.client_id)
        assert await redis.client_kill_filter(_id=before) == 1
        assert await asyncio.to_thread(client.ping)
        assert await asyncio.to_thread(client.client_id) != before
    finally:
        client.close()


@pytest.mark.parametrize("cluster", [False, True], ids=["node", "cluster"])
async def test_a_cancelled_blocking_command_is_cancelled(
    endpoints: Endpoints, prefix: str, cluster: bool
) -> None:
    """A task cancelled while its command is being sent ends cancelled at once. redis-py sent through
    Python 3.11's ``asyncio.wait_for``, which swallows a cancellation arriving as the write ends: half of
    these tasks read on and returned their ``BLPOP``'s empty reply after its whole timeout, not cancelled
    (a scheduler stopping waited out its idle wait). Cancelled after 0 to 11 turns of the loop, to cover
    every step of the send."""
    url = f"redis://{endpoints.redis_cluster_nodes[0]}" if cluster else endpoints.redis_url
    assert url
    client = connect(RedisSettings(url=url, cluster=cluster))
    try:
        await client.ping()
        for turns in range(12):
            task = asyncio.create_task(client.blpop([f"{prefix}:never"], timeout=2))
            for _ in range(turns):
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        await client.aclose()
