"""Connecting to Redis: the client type every Redis user names, and the one place that turns
:class:`~jqcore.settings.RedisSettings` into a client (single node or Cluster). It imports no engine, so
anything that only needs a connection (presence, stage counters, the relay's memory guard) stays light."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import DataError

from jqcore.settings import RedisSettings

__all__ = ["FastConnection", "RedisClient", "connect", "memory_info", "pack_command"]

RedisClient = aioredis.Redis | RedisCluster
"""A single-node or Cluster client (both speak the commands jobq uses)."""


def pack_command(*args: Any) -> list[bytes]:
    """One command in the Redis protocol, packed by hiredis's C encoder (what redis-py's synchronous
    client does when hiredis is installed; its asyncio connections pack in Python, ~10x slower: every
    script call of every job spent most of its client CPU there)."""
    first = args[0]  # "CONFIG GET": Redis wants the words as separate arguments
    if " " in first if isinstance(first, str) else b" " in first:
        args = (*first.split(), *args[1:])
    try:
        return [hiredis.pack_command(cast("Any", args))]
    except TypeError:  # a bytearray or memoryview: hiredis takes bytes
        pass
    parts = tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a for a in args)
    try:
        return [hiredis.pack_command(cast("Any", parts))]
    except TypeError as exc:
        raise DataError(str(exc)) from exc


class _HiredisPacking:
    def pack_command(self, *args: Any) -> list[bytes]:
        return pack_command(*args)


class FastConnection(_HiredisPacking, Connection):
    """A TCP connection whose commands are packed by hiredis."""


class _FastSSLConnection(_HiredisPacking, SSLConnection):
    pass


class _FastUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    pass


_BY_SCHEME: dict[str, type[AbstractConnection]] = {
    "redis": FastConnection,
    "rediss": _FastSSLConnection,
    "unix": _FastUnixConnection,
}


def connect(settings: RedisSettings) -> RedisClient:
    """A client for ``settings.url``; with ``cluster`` the URL names any one node of the cluster.
    Commands are packed by hiredis (:class:`FastConnection`)."""
    kwargs = settings.client_kwargs()
    scheme = urlsplit(settings.url).scheme
    if settings.cluster:
        if scheme == "redis":
            kwargs["connection_class"] = FastConnection
        return RedisCluster.from_url(settings.url, **kwargs)
    if scheme in _BY_SCHEME:
        kwargs["connection_class"] = _BY_SCHEME[scheme]
    return aioredis.Redis.from_url(settings.url, **kwargs)


async def memory_info(client: RedisClient) -> dict[str, Any]:
    """``INFO memory`` (``used_memory``, ``maxmemory``, ``maxmemory_policy``...); on a Cluster that
    answers per node, the node fullest relative to its ``maxmemory`` (the one that refuses first)."""
    info: dict[str, Any] = await client.info("memory")
    nodes = [v for v in info.values() if isinstance(v, dict)]
    if nodes and len(nodes) == len(info):
        return max(nodes, key=lambda n: int(n.get("used_memory", 0)) / max(1, int(n.get("maxmemory", 0))))
    return info
