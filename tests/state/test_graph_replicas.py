"""A graph hand-off's second step erases the only record of its first (``rel``: a released node's job
enqueued; ``gdone``: a node's report counted), so it waits until the first step is on a replica: against a
Redis of the test's own with one replica, paused with SIGSTOP (the master keeps taking writes, the replica
acknowledges none), the records stay for the repair; once it acknowledges again the repair finishes the
hand-offs, each exactly once. (A master that died here would have been replaced by a replica without the
node's job, and the graph would never have finished.) A tail call's spawn is held to the same rule."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from jqcore.envelope import new_envelope
from jqcore.graphs import parse
from jqengine import Engine
from jqengine.graphs import REPAIR_AFTER_MS
from jqengine.keys import GraphKeys, QueueKeys
from jqstack.supervise import Child

Replicated = tuple[aioredis.Redis, Engine, Child]


@pytest.fixture
async def on_replicated(replicated: tuple[str, Child]) -> AsyncIterator[Replicated]:
    """A client and an engine on the test's own Redis with one replica, and the replica's process."""
    url, replica = replicated
    client = aioredis.Redis.from_url(url)
    try:
        yield client, Engine(client), replica
    finally:
        await client.aclose()


async def test_a_hand_off_keeps_its_record_until_a_replica_has_the_first_step(
    on_replicated: Replicated, prefix: str
) -> None:
    client, engine, replica = on_replicated
    gid, queue = f"{prefix}-g", f"{prefix}.q"
    doc = {
        "id": gid,
        "queue": queue,
        "nodes": [{"name": "a", "kind": "k"}, {"name": "b", "kind": "k", "parents": ["a"]}],
    }
    rel = GraphKeys(gid).named("rel")
    replica.signal(signal.SIGSTOP)  # connected, acknowledging nothing
    try:
        assert await engine.graphs.create(parse(doc)) == "stored"
        assert await client.smembers(rel) == {b"a"}, "a's job enqueued, not yet on the replica: kept"
        assert (await engine.reads.depth(queue)).pending == 1
    finally:
        replica.signal(signal.SIGCONT)
    later = await engine.now() + REPAIR_AFTER_MS
    assert await engine.graphs.repair_graph(gid, now_ms=later) == "running"
    assert await client.smembers(rel) == set(), "the repair released it again, then confirmed it"
    assert (await engine.reads.depth(queue)).pending == 1, "enqueued twice, stored once"

    (job,) = await engine.jobs.claim(queue, 1)
    await engine.jobs.complete(queue, (job.id, job.attempt, job.token), b"1")
    replica.signal(signal.SIGSTOP)
    try:
        assert await engine.graphs.report_finished(queue, [job.id]) == 0, "a's report not confirmed"
        assert await client.hexists(QueueKeys(queue).gdone, job.id), "the outbox keeps a's outcome"
        assert await client.smembers(rel) == {b"b"}, "b released into its queue, not yet confirmed"
    finally:
        replica.signal(signal.SIGCONT)
    assert await engine.graphs.report_finished(queue, [job.id]) == 1, "reported again: counted once"
    assert not await client.hexists(QueueKeys(queue).gdone, job.id)
    assert await engine.graphs.repair_graph(gid, now_ms=await engine.now() + REPAIR_AFTER_MS) == "running"
    assert await client.smembers(rel) == set()
    assert (await engine.reads.depth(queue)).pending == 1, "b's job, once"
    (b,) = await engine.jobs.claim(queue, 1)
    assert b.id == f"{gid}:b"


async def test_a_tail_calls_spawn_keeps_its_entry_until_a_replica_has_the_child(
    on_replicated: Replicated, prefix: str
) -> None:
    client, engine, replica = on_replicated
    queue = f"{prefix}.tail"
    await engine.enqueue_batch([new_envelope(queue, "p", id="parent")])
    (parent,) = await engine.jobs.claim(queue, 1)
    child = new_envelope(queue, "c", id="tail@child")
    replica.signal(signal.SIGSTOP)
    try:
        triple = (parent.id, parent.attempt, parent.token)
        assert await engine.tails.defer(queue, triple, child) == "deferred"
        assert await client.hexists(QueueKeys(queue).gdone, ">tail@child"), "the spawn's entry stays"
    finally:
        replica.signal(signal.SIGCONT)
    assert await engine.graphs.report_finished(queue) == 1, "the repair spawns it again, then drops it"
    assert not await client.hexists(QueueKeys(queue).gdone, ">tail@child")
    (running,) = await engine.jobs.claim(queue, 1)
    assert running.id == "tail@child", "the child, once"
