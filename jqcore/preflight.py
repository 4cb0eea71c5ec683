"""The start-up checks every service runs once, before it does its work (one function the services call).

- **Redis must not evict.** An LRU (or any evicting) ``maxmemory-policy`` would drop job hashes and queue
  keys silently, so a service refuses to start unless the policy is ``noeviction`` or
  ``JOBQ_REDIS_ALLOW_EVICTION=true``. A Redis that refuses ``CONFIG GET`` (an ACL without ``+config``, a
  managed Redis that renames it) cannot be checked: one warning per process, and the service goes on.
  A Redis that does not answer at start-up is not checked (the service waits for it as it always did).
- **Kafka topics hold to their declaration** (:func:`jqcore.topics.ensure`): the topics a service owns
  are created when missing (if ``JOBQ_KAFKA_CREATE_TOPICS`` allows it), every topic it uses is compared
  with the declaration, and any contradiction stops it with one line per problem naming the fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from jqcore.errors import BackendUnavailable, ConfigError
from jqcore.log import get_logger
from jqcore.redisconn import RedisClient
from jqcore.settings import KafkaSettings, RedisSettings
from jqcore.topics import TopicSpec, ensure

__all__ = ["EvictionRefused", "check_redis", "eviction_policies", "preflight"]

log = get_logger("jqcore.preflight")

OWNER_WAIT_S = 10.0
"""How long a service that owns topics waits for Kafka's metadata at start-up (then it stops: it cannot
work without them)."""
USER_WAIT_S = 2.0
"""How long a service that only uses topics (gateway, canary) waits for it before it starts unchecked."""

_warned: set[str] = set()
"""What this process already warned about (once each)."""


class EvictionRefused(ConfigError):
    """Redis may evict keys (``maxmemory-policy`` other than ``noeviction``): jobs would vanish silently."""

    code = "redis_evicts"


async def eviction_policies(client: RedisClient) -> list[str] | None:
    """Every node's ``maxmemory-policy`` (one for a single Redis); None when ``CONFIG GET`` is refused."""
    try:
        if isinstance(client, RedisCluster):  # every primary holds keys of its own
            got: Any = await client.config_get("maxmemory-policy", target_nodes=RedisCluster.PRIMARIES)
        else:
            got = await client.config_get("maxmemory-policy")
    except ResponseError:  # NOPERM (ACL), or CONFIG renamed away by a managed Redis
        return None
    answers = got.values() if got and all(isinstance(v, dict) for v in got.values()) else [got]
    out = []
    for answer in answers:
        for k, v in dict(answer).items():
            if _text(k) == "maxmemory-policy":
                out.append(_text(v))
    return out


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def check_redis(client: RedisClient, settings: RedisSettings) -> None:
    """Refuse an evicting Redis (see the module's docstring)."""
    try:
        policies = await eviction_policies(client)
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        log.warning("Redis did not answer at start-up: its maxmemory-policy is not checked", error=str(exc))
        return
    if policies is None:
        if "config" not in _warned:
            _warned.add("config")
            log.warning(
                "Redis refuses CONFIG GET: jobq cannot check that maxmemory-policy is noeviction "
                "(make sure it is: an evicting Redis loses jobs silently)"
            )
        return
    evicting = sorted({p for p in policies if p != "noeviction"})
    if not evicting or settings.allow_eviction:
        if evicting and "evict" not in _warned:
            _warned.add("evict")
            log.warning("Redis may evict keys; allowed by JOBQ_REDIS_ALLOW_EVICTION", policy=evicting)
        return
    raise EvictionRefused(
        f"Redis has maxmemory-policy {', '.join(evicting)}: it would evict jobs silently; set "
        f"`CONFIG SET maxmemory-policy noeviction` (and in redis.conf), or JOBQ_REDIS_ALLOW_EVICTION=true"
    )


async def preflight(
    *,
    redis: tuple[RedisClient, RedisSettings] | None = None,
    kafka: KafkaSettings | None = None,
    owns: Sequence[TopicSpec] = (),
    uses: Sequence[TopicSpec] = (),
) -> list[str]:
    """A service's start-up checks: Redis's eviction policy (``redis``: the service's client and
    settings), then the Kafka topics it ``owns`` (created when missing and allowed) and ``uses``
    (checked when present). Raises :class:`~jqcore.errors.ConfigError` (one line per problem); returns
    the topics created. A Kafka that does not answer stops only a service that owns topics (the others
    wait for Kafka as they always did)."""
    if redis is not None:
        await check_redis(*redis)
    if kafka is None or not (owns or uses):
        return []
    try:
        wait_s = OWNER_WAIT_S if owns else USER_WAIT_S
        # a thread of its own, ended here: a start-up leaves no executor thread behind
        with ThreadPoolExecutor(1, thread_name_prefix="jobq-preflight") as pool:
            created = await asyncio.get_running_loop().run_in_executor(
                pool, ensure, kafka, owns, uses, wait_s
            )
    except BackendUnavailable as exc:
        if owns:
            raise
        log.warning("Kafka did not answer at start-up: the topics are not checked", error=exc.message)
        return []
    if created:
        log.info("topics created from the declaration", topics=created)
    return created
