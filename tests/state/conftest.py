"""Engine fixtures: every state test runs on the single Redis and on the 3-master Redis Cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio.cluster import ClusterNode, RedisCluster

from jqcore.envelope import Envelope, new_envelope
from jqcore.settings.servers import RedisSettings
from jqengine import Engine
from jqengine.keys import QUEUES_KEY, QueueKeys
from jqengine.redisconn import Cluster, connect
from jqstack.manager import Endpoints

T0 = 1_900_000_000_000
"""A fixed 'now' (ms; 2030-03-17): tests drive the clock through ``now_ms``. It must stay ahead of the real
clock: a claim's ``started_at`` and a record's ``enqueued_at`` are the later of ``now`` and Redis's own clock
(``lua/lib/server_now.lua``), so a ``T0`` in the past would make them the real time (1.8e12 would have on
2027-01-15)."""


@pytest.fixture(params=["single", pytest.param("cluster", marks=pytest.mark.cluster)])
async def engine(request: pytest.FixtureRequest, endpoints: Endpoints) -> AsyncIterator[Engine]:
    client: Any
    if request.param == "single":
        assert endpoints.redis_url
        client = connect(RedisSettings(url=endpoints.redis_url))  # the services' connections
    else:
        if not endpoints.redis_cluster_nodes:
            pytest.skip("no Redis Cluster in this stack")
        nodes = [ClusterNode(h, int(p)) for h, p in (n.rsplit(":", 1) for n in endpoints.redis_cluster_nodes)]
        client = Cluster(startup_nodes=nodes)
    try:
        yield Engine(client)
    finally:
        await client.aclose()


@pytest.fixture
def q(prefix: str) -> str:
    """This test's queue name."""
    return f"{prefix}.jobs"


def _job(queue: str, kind: str = "noop", **kw: Any) -> Envelope:
    kw.setdefault("at_ms", T0)
    return new_envelope(queue, kind, kw.pop("args", {"n": 1}), **kw)


@pytest.fixture
def job() -> Callable[..., Envelope]:
    """Build an envelope: ``job(queue, kind="noop", **new_envelope options)`` at the fixed clock."""
    return _job


@pytest.fixture
def t0() -> int:
    return T0


async def lose_queue(engine: Engine, queue: str) -> None:
    """What a Redis that lost its data lost of ``queue``: its keys and its place in the queue list (the
    engine's own memory of the queue is kept, as a running process keeps it)."""
    client = engine._client
    pattern = QueueKeys(queue).prefix + "*"
    nodes = client.get_primaries() if isinstance(client, RedisCluster) else [None]
    for node in nodes:
        kw = {"target_nodes": node} if node is not None else {}
        batch: list[bytes] = []
        async for key in client.scan_iter(match=pattern, count=1000, **kw):
            batch.append(key)
            if len(batch) == 1000:
                await _unlink(client, batch)
                batch = []
        await _unlink(client, batch)
    await client.srem(QUEUES_KEY, queue)


async def _unlink(client: Any, keys: list[bytes]) -> None:
    """One UNLINK for the batch (per key on a Cluster: the keys of one queue share a slot anyway)."""
    if keys:
        await client.unlink(*keys)
