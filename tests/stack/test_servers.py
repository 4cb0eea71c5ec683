"""The real servers the stack starts answer real requests: Kafka, Redis (+ Cluster), Consul."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import consul
import pytest
import redis.asyncio as aioredis
from confluent_kafka import Consumer, Producer
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, ResponseError

from jqstack.manager import Endpoints

N_RECORDS = 10_000


def test_ten_thousand_idempotent_records_round_trip(
    endpoints: Endpoints, make_topic: Callable[..., str]
) -> None:
    topic = make_topic("roundtrip", partitions=3)
    producer = Producer(
        {
            "bootstrap.servers": endpoints.kafka_bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "log_level": 0,
        }
    )
    delivered: list[Any] = []
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        (failed if err is not None else delivered).append(err or msg.key())

    for i in range(N_RECORDS):
        producer.produce(topic, f"value-{i}".encode(), f"k{i}".encode(), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(180) == 0
    assert failed == []
    assert len(delivered) == N_RECORDS

    consumer = Consumer(
        {
            "bootstrap.servers": endpoints.kafka_bootstrap,
            "group.id": f"{topic}.check",
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 180  # a bound, not a wait: the loop ends when every record is seen
    try:
        while len(seen) < N_RECORDS and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 1.0):
                assert msg.error() is None, msg.error()
                seen.add(msg.key())
    finally:
        consumer.close()
    assert len(seen) == N_RECORDS


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


SWAP = """
-- KEYS[1], KEYS[2] share a hash tag; move a value from one to the other atomically.
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[2], v)
redis.call('DEL', KEYS[1])
return v
"""


async def _swap(client: aioredis.Redis | RedisCluster, prefix: str) -> None:
    a, b = f"jobq-test:{{{prefix}}}:a", f"jobq-test:{{{prefix}}}:b"
    await client.set(a, b"payload")
    script = client.register_script(SWAP)
    assert await script(keys=[a, b]) == b"payload"
    assert await client.get(b) == b"payload"
    assert await client.exists(a) == 0
    await client.delete(b)


async def test_lua_on_redis(redis: aioredis.Redis, prefix: str) -> None:
    await _swap(redis, prefix)
    config = {_text(k): _text(v) for k, v in (await redis.config_get("*")).items()}
    assert config["appendonly"] == "yes"
    assert config["maxmemory-policy"] == "noeviction"


@pytest.mark.cluster
async def test_lua_on_redis_cluster(redis_cluster: RedisCluster, prefix: str) -> None:
    await _swap(redis_cluster, prefix)
    script = redis_cluster.register_script(SWAP)
    with pytest.raises((ResponseError, RedisClusterException), match=r"(?i)crossslot|same key slot"):
        await script(keys=[f"{prefix}:x", f"{prefix}:y-other"])
    for node in redis_cluster.get_primaries():
        conf = await redis_cluster.config_get("maxmemory-policy", target_nodes=node)
        assert {_text(k): _text(v) for k, v in conf.items()}["maxmemory-policy"] == "noeviction"


def test_consul_session_lock_contention(consul_client: consul.Consul, prefix: str) -> None:
    key = f"jobq-test/{prefix}/lock"
    a = consul_client.session.create(name=f"{prefix}-a", ttl=10, lock_delay=0)
    b = consul_client.session.create(name=f"{prefix}-b", ttl=10, lock_delay=0)
    try:
        assert consul_client.kv.put(key, "a", acquire=a) is True
        _, first = consul_client.kv.get(key)
        assert first["Session"] == a
        assert consul_client.kv.put(key, "b", acquire=b) is False
        assert consul_client.kv.put(key, "a", release=a) is True
        assert consul_client.kv.put(key, "b", acquire=b) is True
        _, second = consul_client.kv.get(key)
        assert second["Session"] == b
        assert second["LockIndex"] > first["LockIndex"]
    finally:
        consul_client.session.destroy(a)
        consul_client.session.destroy(b)
        consul_client.kv.delete(key)
