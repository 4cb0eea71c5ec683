"""Stage accounting shared by every process (Slack's correctness tracking): counters per topic in Redis,
added to by gateways (``produced``) and relays (``read``, ``written``, ``duplicate``, ``unscheduled``,
``dead``, ``retried``), compared by ``jobq reconcile`` with what Kafka and the queues hold.

Best effort by design: a counter that could not be written (Redis away) is kept and added with the
next one by the relay, and dropped by the gateway (its enqueues must not depend on Redis).
"""

from __future__ import annotations

from collections.abc import Mapping

from jqcore.keys import stages_key
from jqengine import RedisClient

__all__ = ["add", "read"]


async def add(client: RedisClient, topic: str, counts: Mapping[str, int]) -> None:
    pipe = client.pipeline(transaction=False)
    for stage, n in counts.items():
        if n:
            pipe.hincrby(stages_key(topic), stage, n)
    await pipe.execute()


async def read(client: RedisClient, topic: str) -> dict[str, int]:
    raw = await client.hgetall(stages_key(topic))
    return {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}
