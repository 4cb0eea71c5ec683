"""One place that turns :class:`~jqcore.settings.RedisSettings` into a client (single node or Cluster)."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from jqcore.settings import RedisSettings
from jqcore.state.engine import RedisClient

__all__ = ["connect"]


def connect(settings: RedisSettings) -> RedisClient:
    """A client for ``settings.url``; with ``cluster`` the URL names any one node of the cluster."""
    kwargs = settings.client_kwargs()
    if settings.cluster:
        return RedisCluster.from_url(settings.url, **kwargs)
    return aioredis.Redis.from_url(settings.url, **kwargs)
