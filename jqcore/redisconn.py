"""Connecting to Redis: the client type every Redis user names, and the one place that turns
:class:`~jqcore.settings.RedisSettings` into a client (single node or Cluster). It imports no engine, so
anything that only needs a connection (presence, stage counters, the relay's memory guard) stays light."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from jqcore.settings import RedisSettings

__all__ = ["RedisClient", "connect"]

RedisClient = aioredis.Redis | RedisCluster
"""A single-node or Cluster client (both speak the commands jobq uses)."""


def connect(settings: RedisSettings) -> RedisClient:
    """A client for ``settings.url``; with ``cluster`` the URL names any one node of the cluster."""
    kwargs = settings.client_kwargs()
    if settings.cluster:
        return RedisCluster.from_url(settings.url, **kwargs)
    return aioredis.Redis.from_url(settings.url, **kwargs)
