"""Reconcile (``jobq reconcile``): per topic, what the gateways produced, what Kafka holds, what the
relay read and wrote, and what the topic's queues did with it — with the balances that must hold.

Checks (the command exits 1 when one fails):

* **relay balance**: every record the relay read is accounted for exactly once —
  ``read == written + duplicate + unscheduled + dead + retried``;
* **gateway ≤ Kafka**: the gateways' acknowledged jobs are all in the topic —
  ``produced ≤ appended`` (appended = the sum of the partitions' end offsets; other producers such as
  Spark add to it without counting ``produced``);
* **nothing relayed past Kafka**: ``read ≤ appended``.

The queues' own counters (enqueued, completed, errored, canceled, expired) are shown for the queues that
route to the topic. Counters are cumulative since the stack's Redis was created.
"""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from jqcore.routing import CANARY_PREFIX, RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import RelayKeys
from jqcore.settings.servers import RedisSettings
from jqengine import Engine, connect
from jqruntime.stores import stages

__all__ = ["RELAY_STAGES", "collect"]

RELAY_STAGES = ("written", "duplicate", "unscheduled", "dead", "retried")


def _appended(kafka: KafkaSettings, topic: str) -> int | None:
    c = Consumer({**kafka.client_config(), "group.id": "jobq-reconcile", "log_level": 0})
    try:
        md = c.list_topics(topic, timeout=5).topics.get(topic)
        if md is None or md.error is not None:
            return None
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in md.partitions)
    finally:
        c.close()


def _topic_of(routing: RoutingSettings, queue: str) -> str | None:
    try:
        return routing.route(queue)[0]
    except Exception:
        return None


async def _redis_side(redis: RedisSettings, topics: list[str], routing: RoutingSettings) -> dict[str, Any]:
    client = connect(redis)
    try:
        out: dict[str, Any] = {t: {"stages": await stages.read(client, t), "queues": {}} for t in topics}
        engine = Engine(client)
        for queue in await engine.reads.queues():
            topic = _topic_of(routing, queue)
            if topic in out and not queue.startswith(CANARY_PREFIX):
                out[topic]["queues"][queue] = await engine.reads.queue_stats(queue)
        return out
    finally:
        await client.aclose()


def collect(
    routing: RoutingSettings, relay: RelayKeys, kafka: KafkaSettings, redis: RedisSettings
) -> list[dict[str, Any]]:
    """One row per topic the relays read (``relay.topics``, else every routed topic): the counters and
    whether each balance holds (``checks``). Blocking: runs its own event loop for the Redis side."""
    topics = relay.topics or routing.topics()
    side = asyncio.run(_redis_side(redis, topics, routing))
    rows = []
    for topic in topics:
        st = side[topic]["stages"]
        appended = _appended(kafka, topic)
        read = st.get("read", 0)
        accounted = sum(st.get(s, 0) for s in RELAY_STAGES)
        checks = {
            "relay balance": read == accounted,
            "gateway <= kafka": appended is not None and st.get("produced", 0) <= appended,
            "read <= kafka": appended is not None and read <= appended,
        }
        rows.append(
            {
                "topic": topic,
                "produced": st.get("produced", 0),
                "appended": appended,
                "read": read,
                **{s: st.get(s, 0) for s in RELAY_STAGES},
                "queues": side[topic]["queues"],
                "checks": checks,
            }
        )
    return rows
