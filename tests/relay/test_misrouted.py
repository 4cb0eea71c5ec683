"""A producer that may write one topic cannot reach another topic's queues: an envelope whose queue is
not routed to the topic it was read from goes to the dead topic as ``misrouted``, never into Redis
(issue 35). Real Kafka, Redis and Consul of the session stack."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from jqcore import metrics
from jqcore.admission import SIGNATURE_HEADER, sign
from jqcore.envelope import decode, encode, new_envelope, record_key
from jqcore.graphs import Graph, graph_envelope
from jqcore.routing import Route, RoutingSettings
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.kafka import AsyncProducer, Record
from jqruntime.stores.config import ConfigStore


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
    assert await engine.reads.get_job(theirs, forged.id) is None
    assert await pending(theirs) == 0
    assert metrics.RELAY_MISROUTED.labels(topic)._value.get() - before >= 3


async def test_jobq_kinds_and_graph_fields_enter_only_as_a_gateway_signed_them(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    engine: Engine,
    topic_reader: Callable[..., list[Any]],
    pending: Callable[[str], Awaitable[int]],
    consul_store: ConfigStore,
) -> None:
    """Security review C1: a producer allowed to write a topic cannot smuggle a task graph (whose nodes run
    any kind in any queue) or a graph node's job (reporting into another tenant's graph); a graph a
    gateway signed enters, node by node allowed by the routing."""
    topic = make_topic("jobs")
    home, theirs = f"{prefix}.billing.q", f"{prefix}.payments.q"
    routing = RoutingSettings(
        routes=[Route(queues=f"{prefix}.*", topic=topic)],
        default_topic="",
        queues_allowed=[f"{prefix}.billing.*", theirs],
    )

    def graph(gid: str, node_queue: str) -> Any:
        g = Graph(gid, queue=home)
        g.add("a", "refund.issue", queue=node_queue)
        return graph_envelope(g.spec())

    key = await consul_store.graph_key()
    unsigned = graph(f"{prefix}-unsigned", theirs)
    forged_sig = graph(f"{prefix}-forged", theirs)
    signed_ok = graph(f"{prefix}-signed", theirs)
    signed_bad_node = graph(f"{prefix}-elsewhere", f"{prefix}.nowhere.q")
    node_job = new_envelope(
        home, "k", None, id=f"{prefix}-victim:a", graph={"id": f"{prefix}-victim", "node": "a"}
    )
    kinds = new_envelope(home, "jobq.anything", None)

    def record(env: Any, sig: bytes | None = None) -> Record:
        headers = [(SIGNATURE_HEADER, sig)] if sig is not None else []
        return Record(topic, encode(env), record_key(env), headers)

    raw = {e.id: encode(e) for e in (signed_ok, signed_bad_node, forged_sig)}
    await producer.produce_many(
        [
            record(unsigned),
            record(forged_sig, sign(b"not the key" * 3, raw[forged_sig.id])),
            record(signed_bad_node, sign(key, raw[signed_bad_node.id])),
            record(node_job),
            record(kinds),
            record(signed_ok, sign(key, raw[signed_ok.id])),
        ]
    )
    async with make_relay(topic, routing=routing) as relay:
        await relay.relays[0].signals.committed.wait_for(lambda n: n >= 6)
    dead = await asyncio.to_thread(topic_reader, f"{topic}.dead", 5)
    reasons = {decode(m.value()).id: dict(m.headers())["jobq-reason"].decode() for m in dead}
    assert reasons[unsigned.id].startswith("kind_reserved"), reasons
    assert reasons[forged_sig.id].startswith("kind_reserved"), reasons
    assert reasons[signed_bad_node.id].startswith("queue_not_allowed"), reasons
    assert reasons[node_job.id].startswith("graph_field_refused"), reasons
    assert reasons[kinds.id].startswith("kind_reserved"), reasons
    assert await pending(theirs) == 1, "the signed graph's node, released into its queue"
    assert (await engine.graphs.get(f"{prefix}-signed")).queue == home
    assert await engine.graphs.home(f"{prefix}-unsigned") is None


async def test_a_graph_key_consul_lost_is_put_back_and_one_made_anew_verifies_beside_it(
    prefix: str,
    make_topic: Callable[..., str],
    make_relay: Callable[..., RelayService],
    producer: AsyncProducer,
    pending: Callable[[str], Awaitable[int]],
    eventually: Callable[..., Awaitable[Any]],
    consul_store: ConfigStore,
) -> None:
    """The fault suite's ``consul-kill`` (a Consul agent back empty): the relay's next term made a new key
    while the gateways went on signing with theirs, and every graph sent after it was dead-lettered as
    unsigned. A relay that holds the key puts it back; a key someone else made anew meanwhile verifies
    beside the one it held (graphs signed before the change still enter)."""
    topic = make_topic("jobs")
    queue = f"{prefix}.q"
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}.*", topic=topic)], default_topic="")
    held = await consul_store.graph_key()

    def signed_graph(name: str, key: bytes) -> Record:
        g = Graph(f"{prefix}-{name}", queue=queue)
        g.add("a", "k")
        value = encode(graph_envelope(g.spec()))
        return Record(topic, value, g.spec().id.encode(), [(SIGNATURE_HEADER, sign(key, value))])

    async with make_relay(topic, routing=routing) as relay:
        topic_relay = relay.relays[0]
        await producer.produce_many([signed_graph("before", held)])
        await topic_relay.signals.committed.wait_for(lambda n: n >= 1)
        term = topic_relay.elector.trusted_term()
        await consul_store.client.kv.delete(f"{consul_store.prefix}/keys/graphs")  # Consul came back empty
        topic_relay.elector.step_down()  # its lock lost with it: the relay's next term reads the key again
        await eventually(topic_relay.elector.trusted_term, lambda t: t is not None and t != term)
        await producer.produce_many([signed_graph("after", held)])
        await topic_relay.signals.committed.wait_for(lambda n: n >= 2)
        assert await consul_store.graph_key() == held, "the key the relay held, put back"
        assert await pending(queue) == 2, "the graph signed after Consul lost the key entered"

        made_anew = b"\1" * 32  # a process that never held the key made one while Consul was empty
        await consul_store.client.kv.put(f"{consul_store.prefix}/keys/graphs", made_anew.hex())
        await producer.produce_many([signed_graph("new", made_anew)])  # the relay reads the key again
        await topic_relay.signals.committed.wait_for(lambda n: n >= 3)
        await producer.produce_many([signed_graph("old", held)])  # signed before the change, relayed after
        await topic_relay.signals.committed.wait_for(lambda n: n >= 4)
        assert await pending(queue) == 4, "both keys verify: the one made anew and the one held before it"
