"""The push-dispatch configurations (:mod:`jqruntime.dispatch`), one JSON document per kind in one hash
(:data:`jqcore.keys.DISPATCH_KEY`): written by the gateway's ``PUT /v1/kinds/{kind}``, read by the
dispatchers and the gateway's callbacks. Over a plain Redis client; Redis errors mapped as the engine maps
them (:func:`jqengine.redis_errors`)."""

from __future__ import annotations

from jqcore.keys import DISPATCH_KEY
from jqengine import RedisClient, redis_errors

__all__ = ["configs", "put"]


async def put(client: RedisClient, kind: str, stored: str | None) -> None:
    """Store a kind's push-dispatch configuration (``jqruntime.dispatch.DispatchConfig.stored``); None removes
    it (the kind's jobs are for worker pools again)."""
    async with redis_errors("dispatch"):
        if stored is None:
            await client.hdel(DISPATCH_KEY, kind)
        else:
            await client.hset(DISPATCH_KEY, kind, stored)


async def configs(client: RedisClient) -> dict[str, str]:
    """Every stored push-dispatch configuration: kind → its JSON."""
    async with redis_errors("dispatch"):
        raw = await client.hgetall(DISPATCH_KEY)
    return {_s(k): _s(v) for k, v in raw.items()}


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
