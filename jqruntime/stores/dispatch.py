"""The push-dispatch configurations (:mod:`jqruntime.dispatch`), one JSON document per **(queue, kind)** in
one hash (:data:`jqcore.keys.DISPATCH_KEY`, field ``<queue>|<kind>``; the queue ``*`` —
:data:`~jqruntime.dispatch.EVERY_QUEUE` — for a configuration PUT without queues): written by the gateway's
``PUT /v1/kinds/{kind}``, read by the dispatchers and the gateway's callbacks and kind listings. Neither a
queue nor a kind name can hold ``|``. Over a plain Redis client; Redis errors mapped as the engine maps
them (:func:`jqengine.redis_errors`)."""

from __future__ import annotations

from collections.abc import Sequence

from jqcore.keys import DISPATCH_KEY
from jqengine import RedisClient, redis_errors, text
from jqruntime.dispatch import EVERY_QUEUE

__all__ = ["config_for", "configs", "put"]


def _field(queue: str, kind: str) -> str:
    return f"{queue}|{kind}"


async def put(client: RedisClient, kind: str, queues: Sequence[str] | None, stored: str | None) -> None:
    """Store ``kind``'s push-dispatch configuration (``jqruntime.dispatch.DispatchConfig.stored``) for each
    of ``queues`` (None: for every queue, under ``*``), replacing only theirs; ``stored`` None removes
    theirs (the kind's jobs of those queues are for worker pools again). Another queue's is never touched."""
    fields = [_field(queue, kind) for queue in (queues if queues is not None else [EVERY_QUEUE])]
    if not fields:
        return
    async with redis_errors("dispatch"):
        if stored is None:
            await client.hdel(DISPATCH_KEY, *fields)
        else:
            await client.hset(DISPATCH_KEY, mapping=dict.fromkeys(fields, stored))


async def configs(client: RedisClient) -> dict[tuple[str, str], str]:
    """Every stored push-dispatch configuration: (queue or ``*``, kind) → its JSON (a field of another
    layout is skipped)."""
    async with redis_errors("dispatch"):
        raw = await client.hgetall(DISPATCH_KEY)
    out: dict[tuple[str, str], str] = {}
    for field, value in raw.items():
        queue, sep, kind = text(field).partition("|")
        if sep and queue and kind:
            out[queue, kind] = text(value)
    return out


async def config_for(client: RedisClient, queue: str, kind: str) -> str | None:
    """The JSON a job of ``queue`` and ``kind`` is dispatched with: the queue's own, else the one for every
    queue (``jqruntime.dispatch.pick``, in one round trip); None: the kind is not pushed from there."""
    async with redis_errors("dispatch"):
        own, every = await client.hmget(DISPATCH_KEY, [_field(queue, kind), _field(EVERY_QUEUE, kind)])
    found = own if own is not None else every
    return None if found is None else text(found)
