"""Session fixtures: one real local stack (Kafka, Consul, Redis + a 3-master Redis Cluster) per test run.

The stack is started by the same code as ``jobq stack up`` on free loopback ports, under its own name,
and torn down (every process stopped, its folder removed) at the end. Tests never flush the shared
servers: each gets a unique ``prefix`` for its queues, topics and Consul keys.

``JOBQ_TEST_BACKEND=containers`` (or ``auto`` with a Docker engine answering) starts the same servers
from official images through testcontainers instead; CI here has no engine and runs the native path.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator

import consul
import pytest
import redis.asyncio as aioredis
from confluent_kafka.admin import AdminClient, NewTopic
from redis.asyncio.cluster import ClusterNode, RedisCluster

from jobq.stack.backends import SessionStack, start_test_stack
from jobq.stack.manager import Endpoints


@pytest.fixture(scope="session")
def stack() -> Iterator[SessionStack]:
    """The session's shared servers (started once, stopped at the end)."""
    test_stack = start_test_stack(os.environ.get("JOBQ_TEST_BACKEND", "auto"))
    try:
        yield test_stack
    finally:
        test_stack.stop()


@pytest.fixture(scope="session")
def endpoints(stack: SessionStack) -> Endpoints:
    return stack.endpoints


@pytest.fixture(autouse=True)
def _stack_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test clearly (never hang) when a server of the shared stack has died."""
    if "stack" not in request.fixturenames:
        yield
        return
    test_stack: SessionStack = request.getfixturevalue("stack")
    test_stack.check()
    yield
    if not request.node.get_closest_marker("kills_servers"):
        test_stack.check()


@pytest.fixture
def prefix() -> str:
    """A unique prefix for this test's queues, topics and keys."""
    return f"t{secrets.token_hex(4)}"


@pytest.fixture
async def redis(endpoints: Endpoints) -> AsyncIterator[aioredis.Redis]:
    assert endpoints.redis_url
    client = aioredis.Redis.from_url(endpoints.redis_url, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def redis_cluster(endpoints: Endpoints) -> AsyncIterator[RedisCluster]:
    nodes = [ClusterNode(h, int(p)) for h, p in (n.rsplit(":", 1) for n in endpoints.redis_cluster_nodes)]
    client = RedisCluster(startup_nodes=nodes, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def kafka_admin(endpoints: Endpoints) -> AdminClient:
    return AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap, "log_level": 0})


@pytest.fixture
def make_topic(kafka_admin: AdminClient, prefix: str) -> Iterator[Callable[..., str]]:
    """Create topics named after this test's prefix; they are deleted afterwards."""
    made: list[str] = []

    def make(suffix: str = "jobs", partitions: int = 3) -> str:
        name = f"{prefix}.{suffix}"
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            operation_timeout=15,
            request_timeout=15,
        )
        futures[name].result(timeout=20)
        made.append(name)
        return name

    yield make
    if made:
        for fut in kafka_admin.delete_topics(made, operation_timeout=15, request_timeout=15).values():
            with contextlib.suppress(Exception):
                fut.result(timeout=20)


@pytest.fixture
def consul_client(endpoints: Endpoints) -> consul.Consul:
    host, port = endpoints.consul_addr.rsplit(":", 1)
    return consul.Consul(host=host, port=int(port))
