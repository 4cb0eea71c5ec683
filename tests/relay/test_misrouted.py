"""A producer that may write one topic cannot reach another topic's queues: an envelope whose queue is
not routed to the topic it was read from goes to the dead topic as ``misrouted``, never into Redis
(issue 35). Real Kafka, Redis and Consul of the session stack."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from jqcore import metrics
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.routing import Route, RoutingSettings
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.kafka import AsyncProducer, Record


async def test_an_envelope_for_another_topics_queue_is_dead_lettered_as_misrouted(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    topic_reader: Callable[..., list[Any]],
    pending: Callable[[str], Awaitable[int]],
) -> None:
    topic = make_topic("jobs")
    mine, theirs = f"{prefix}.billing.q", f"{prefix}.payments.q"
    routing = RoutingSettings(
        routes=[
            Route(queues=f"{prefix}.billing.*", topic=topic),
            Route(queues=f"{prefix}.payments.*", topic=f"{prefix}.payments"),
        ],
        default_topic="",
        queues_allowed=[f"{prefix}.billing.q", f"{prefix}.payments.*", f"{prefix}.nowhere"],
    )
    good = new_envelope(mine, "k", None)
    forged = new_envelope(theirs, "k", None)  # written straight into billing's topic
    unrouted = new_envelope(f"{prefix}.nowhere", "k", None)
    made_up = new_envelope(f"{prefix}.billing.made-up", "k", None)  # routed here, but not allowed
    records = [Record(topic, encode(e), record_key(e)) for e in (forged, unrouted, made_up, good)]
    await producer.produce_many(records)
    before = metrics.RELAY_MISROUTED.labels(topic)._value.get()
    async with make_relay(topic, routing=routing) as relay:
        await relay.relays[0].signals.committed.wait_for(lambda n: n >= 4)
        assert await pending(mine) == 1
    dead = await asyncio.to_thread(topic_reader, f"{topic}.dead", 3)
    reasons = sorted(dict(m.headers())["jobq-reason"].decode() for m in dead)
    assert reasons == [
        f"misrouted: queue '{made_up.queue}' is not allowed, not {topic}",
        f"misrouted: queue '{unrouted.queue}' has no route, not {topic}",
        f"misrouted: queue '{theirs}' is routed to {prefix}.payments, not {topic}",
    ]
    assert {m.value() for m in dead} == {encode(forged), encode(unrouted), encode(made_up)}, "bytes unchanged"
    assert await engine.get_job(theirs, forged.id) is None
    assert await pending(theirs) == 0
    assert metrics.RELAY_MISROUTED.labels(topic)._value.get() - before >= 3
