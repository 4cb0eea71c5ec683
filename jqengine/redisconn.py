"""Connecting to Redis: the client type every Redis user names, and the one place that turns
:class:`~jqcore.settings.servers.RedisSettings` into a client (asyncio or sync, single node or Cluster;
TLS, ACL user). It imports no other module of the engine; the facade (:mod:`jqengine`) re-exports
:data:`RedisClient`, :func:`connect` and :func:`memory_info` for every Redis user outside it (the stores,
the services, the relay's memory guard)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import urlsplit

import hiredis
import redis
import redis.asyncio as aioredis
import redis.cluster
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    BlockingConnectionPool,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, MaxConnectionsError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry as SyncRetry

from jqcore.settings.servers import RedisSettings

__all__ = [
    "POOL_HOLDER",
    "Cluster",
    "FastConnection",
    "RedisClient",
    "SyncRedisClient",
    "WaitingPool",
    "connect",
    "connect_sync",
    "memory_info",
    "pack_command",
    "text",
]

RedisClient = aioredis.Redis | RedisCluster
"""A single-node or Cluster client (both speak the commands jobq uses)."""
SyncRedisClient = redis.Redis | redis.cluster.RedisCluster
"""The same for code without an event loop."""


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


class _Fast(AbstractConnection):
    """Packs with hiredis and sends without a task."""

    def pack_command(self, *args: Any) -> list[bytes]:
        return pack_command(*args)

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        """redis-py's, without its ``asyncio.wait_for`` around the write. On Python 3.11 that call swallows
        a cancellation arriving as the write ends (gh-86296): the cancelled task went on to read the reply,
        of a blocking command for its whole timeout, and returned it as though never cancelled (half of the
        cancellations of a ``BLPOP`` in a loop; a scheduler's stop waited out its idle wait). It also made a
        task for every command. The write waits, within ``socket_timeout``, only while the socket's buffer
        is full (a slow reader); no timer is set for a write the kernel took whole."""
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call]
        writer = self._writer
        try:
            if writer is None:
                raise OSError("not connected")
            if isinstance(command, str):
                command = command.encode()
            writer.writelines([command] if isinstance(command, bytes) else command)
            if writer.transport.get_write_buffer_size():
                async with asyncio.timeout(self.socket_timeout or None):
                    await writer.drain()
            else:
                await writer.drain()  # does not wait; raises for a lost connection
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as e:
            await self.disconnect(nowait=True)
            raise RedisConnectionError(f"Error while writing to socket: {e}.") from e
        except BaseException:  # a write cut short leaves the stream unusable, as redis-py's does
            await self.disconnect(nowait=True)
            raise


class FastConnection(_Fast, Connection):
    """A TCP connection whose commands are packed by hiredis and sent without a task."""


class _FastSSLConnection(_Fast, SSLConnection):
    pass


class _FastUnixConnection(_Fast, UnixDomainSocketConnection):
    pass


_BY_SCHEME: dict[str, type[AbstractConnection]] = {
    "redis": FastConnection,
    "rediss": _FastSSLConnection,
    "unix": _FastUnixConnection,
}


POOL_HOLDER: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobq_pool_holder", default=None)
"""Who the current task's Redis commands are for (a gateway request: its token's name), for
:class:`WaitingPool`'s share per holder; None: nobody in particular (not limited)."""


class WaitingPool(BlockingConnectionPool):
    """A pool of at most ``max_connections`` where a command waits up to ``timeout`` seconds for a free
    connection; then :class:`~redis.exceptions.MaxConnectionsError` (the process's own pool is
    exhausted: not a Redis failure, and never reported as one).

    With ``holder_max``, one holder (:data:`POOL_HOLDER` of the task asking) holds at most that many
    connections at once: past it its command waits, up to the same ``timeout``, for one of its own to come
    back, then :class:`~redis.exceptions.MaxConnectionsError` — while other holders still get connections."""

    def __init__(self, *args: Any, holder_max: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holder_max = holder_max
        self._shares: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}
        """Tasks holding or waiting for a connection of each holder (its semaphore goes with the last)."""
        self._held: dict[str, int] = {}
        self._holder_of: dict[int, str] = {}

    def held_by(self, holder: str) -> int:
        """Connections ``holder`` holds now."""
        return self._held.get(holder, 0)

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        holder = POOL_HOLDER.get() if self.holder_max is not None else None
        if holder is not None:
            await self._reserve(holder)
        try:
            try:
                connection = cast("AbstractConnection", await super().get_connection(*args, **kwargs))  # type: ignore[no-untyped-call]
            except RedisConnectionError as exc:
                if not isinstance(exc.__cause__, TimeoutError):
                    raise
                message = (
                    f"no free connection among this process's {self.max_connections} in {self.timeout} s"
                )
                raise MaxConnectionsError(message) from exc
        except BaseException:
            if holder is not None:
                self._unreserve(holder)
            raise
        if holder is not None:
            self._holder_of[id(connection)] = holder
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        holder = self._holder_of.pop(id(connection), None)
        if holder is not None:  # first, and synchronously: a cancelled release cannot leak a share
            self._unreserve(holder)
        await super().release(connection)

    async def _reserve(self, holder: str) -> None:
        assert self.holder_max is not None
        share = self._shares.get(holder)
        if share is None:
            share = self._shares[holder] = asyncio.Semaphore(self.holder_max)
        self._users[holder] = self._users.get(holder, 0) + 1
        try:
            async with asyncio.timeout(self.timeout):
                await share.acquire()
        except TimeoutError:
            self._leave(holder)
            message = (
                f"no free connection for one client in {self.timeout} s: it holds its share of "
                f"{self.holder_max} of this process's {self.max_connections}"
            )
            raise MaxConnectionsError(message) from None
        except BaseException:
            self._leave(holder)
            raise
        self._held[holder] = self._held.get(holder, 0) + 1

    def _unreserve(self, holder: str) -> None:
        self._shares[holder].release()
        left = self._held.get(holder, 0) - 1
        if left > 0:
            self._held[holder] = left
        else:
            self._held.pop(holder, None)
        self._leave(holder)

    def _leave(self, holder: str) -> None:
        left = self._users[holder] - 1
        if left:
            self._users[holder] = left
        else:
            del self._users[holder], self._shares[holder]


class Cluster(RedisCluster):
    """redis-py's asyncio Cluster client, routing ``FCALL``/``FCALL_RO`` as it routes ``EVALSHA``: by the
    keys the call names (``FCALL <function> <numkeys> <keys...>``). redis-py's own asks the server (a
    ``COMMAND GETKEYS`` round trip) for every call of a command whose keys it cannot place, as FCALL's.
    Its nodes' connections are ours (:class:`FastConnection` or its TLS twin), which redis-py's cluster
    client does not let a caller choose."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fast = _FastSSLConnection if kwargs.get("ssl") else FastConnection
        self.connection_kwargs["connection_class"] = fast  # the nodes it learns of later (a shared dict)
        for node in self.startup_nodes:
            node.connection_class = fast

    async def _determine_slot(self, command: str, *args: Any) -> int:
        if command.upper() in ("FCALL", "FCALL_RO") and len(args) >= 2 and int(args[1]) > 0:
            return await super()._determine_slot("EVALSHA", *args)
        return await super()._determine_slot(command, *args)


_DRIVER = DriverInfo(lib_version=redis.__version__)
"""What every connection tells Redis of its library (``CLIENT SETINFO``): redis-py's version as its package
states it, given once. Left to redis-py, each new connection reads it from the installed distribution's
metadata (``importlib.metadata.version``: ~2.5 ms of CPU a connection; a worker opens two before its first
claim)."""


def _stale_once() -> dict[str, Any]:
    """A command whose pooled connection the server closed (Redis restarted, failed over, or dropped an
    idle client) is sent once more on a new connection before its error reaches the caller: without it the
    first command on each pooled connection after a restart fails although Redis answers. Only a broken
    connection is retried, at once (a Redis still down refuses the new one and the caller sees the outage);
    never a timeout, whose command may have run."""
    return {"retry": Retry(NoBackoff(), 1, (RedisConnectionError,))}


def connect(
    settings: RedisSettings,
    *,
    max_connections: int | None = None,
    wait_s: float | None = None,
    holder_max: int | None = None,
) -> RedisClient:
    """An asyncio client for ``settings``; with ``cluster`` the URL names any one node of the cluster.
    TLS comes from the URL's scheme (:meth:`RedisSettings.client_url`: ``rediss://`` when
    ``JOBQ_REDIS_TLS`` is on), the files, user and password from :meth:`RedisSettings.client_kwargs`.
    Commands are packed by hiredis and sent without a task (:class:`FastConnection` and its TLS and unix
    twins).

    ``max_connections`` caps the pool (per node on a Cluster; redis-py's default: 100); with ``wait_s``
    a single node's command waits that long for a free connection (:class:`WaitingPool`) instead of
    failing at once with ``Too many connections``, and with ``holder_max`` one :data:`POOL_HOLDER` holds at
    most that many of them (a single node only: a Cluster's pools are per node, not shared out)."""
    url, kwargs = settings.client_url(), {**settings.client_kwargs(), "driver_info": _DRIVER}
    if settings.cluster:  # rediss:// makes redis-py's cluster client use TLS (ssl=True) with the ssl_* files
        if max_connections is not None:
            return Cluster.from_url(url, max_connections=max_connections, **kwargs)
        return Cluster.from_url(url, **kwargs)
    options = dict(parse_url(url))  # what Redis.from_url does, with our connection classes
    default = options.pop("connection_class", Connection)
    connection_class = _BY_SCHEME.get(urlsplit(url).scheme, cast("type[AbstractConnection]", default))
    if max_connections is not None:
        options["max_connections"] = max_connections
    options |= _stale_once()
    pool: ConnectionPool
    if wait_s is not None:
        pool = WaitingPool(
            connection_class=connection_class, timeout=wait_s, holder_max=holder_max, **{**kwargs, **options}
        )
    else:
        pool = ConnectionPool(connection_class=connection_class, **{**kwargs, **options})
    return aioredis.Redis.from_pool(pool)


def connect_sync(settings: RedisSettings) -> SyncRedisClient:
    """A synchronous client for ``settings``, configured exactly as :func:`connect`'s (redis-py's own
    connection classes: its synchronous ones already pack with hiredis; a broken pooled connection retried
    once at once, as there, instead of redis-py's default three times with backoff)."""
    url, kwargs = settings.client_url(), {**settings.client_kwargs(), "driver_info": _DRIVER}
    if settings.cluster:
        return redis.cluster.RedisCluster.from_url(url, **kwargs)
    return redis.Redis.from_url(url, retry=SyncRetry(NoBackoff(), 1, (RedisConnectionError,)), **kwargs)


def text(value: object) -> str:
    """A Redis reply (bytes, or a number or text) as text: the one decoding every reader of Redis uses."""
    return value.decode() if isinstance(value, bytes) else str(value)


async def memory_info(client: RedisClient) -> dict[str, Any]:
    """``INFO memory`` (``used_memory``, ``maxmemory``, ``maxmemory_policy``...); on a Cluster that
    answers per node, the node fullest relative to its ``maxmemory`` (the one that refuses first)."""
    info: dict[str, Any] = await client.info("memory")
    nodes = [v for v in info.values() if isinstance(v, dict)]
    if nodes and len(nodes) == len(info):
        return max(nodes, key=lambda n: int(n.get("used_memory", 0)) / max(1, int(n.get("maxmemory", 0))))
    return info
