"""A pooled connection the server closed (a Redis restart, a failover, an idle client dropped) costs the
next command nothing: it is sent once more on a new connection (:func:`jqengine.redisconn.connect`)."""

from __future__ import annotations

import asyncio

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
