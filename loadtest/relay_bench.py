"""``./run bench relay``: Kafka → Redis through the relay, on a throw-away stack (Kafka, Consul, Redis).

* throughput with limits off: N envelopes are produced first, then one relay process (in-process here)
  takes the topic's lock and relays; measured from its first written batch to the last job in Redis;
* rate-limit accuracy, per topic and per queue: a limit is set in Consul KV, records keep arriving, and
  the achieved rate over a window after warm-up is compared with the setting (the goal is within ±5 %).
"""

from __future__ import annotations

import asyncio
import os
import time

import consul
import redis.asyncio as aioredis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from jqcore.clock import now_ms
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import TraceSettings
from jqcore.settings.pipeline import FarSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqengine import Engine
from jqrelay.elector import Role
from jqrelay.main import RelayService
from jqrelay.settings import RelaySettings
from jqstack.manager import Endpoints
from loadtest.report import Report
from loadtest.stacks import bench_stack

__all__ = ["run"]

PARTITIONS = 3


def _topic(ep: Endpoints, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": ep.kafka_bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


def _produce(ep: Endpoints, topic: str, queue: str, first: int, n: int) -> None:
    p = Producer({"bootstrap.servers": ep.kafka_bootstrap, "enable.idempotence": True, "linger.ms": 5})
    t = now_ms()
    for i in range(first, first + n):
        env = new_envelope(queue, "noop", None, id=f"b{i}", at_ms=t)
        while True:
            try:
                p.produce(topic, encode(env), record_key(env))
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def _relay(ep: Endpoints, topic: str, tag: str, batch: int) -> RelayService:
    settings = RelaySettings.model_validate(
        {
            "topics": [topic],
            "holder": f"bench-{tag}",
            "kv_prefix": f"jobq-bench/{tag}",
            "group_prefix": f"bench-{tag}",
            "batch": batch,
            "lock_delay_s": 0,
        }
    )
    return RelayService(
        settings,
        KafkaSettings(bootstrap=ep.kafka_bootstrap),
        RedisSettings.model_validate({"url": ep.redis_url or ""}),
        ConsulSettings.model_validate({"addr": ep.consul_addr}),
        RoutingSettings(),
        load(FarSettings),
        load(TraceSettings),
    )


async def _pending(client: aioredis.Redis, queue: str) -> int:
    return (await Engine(client).reads.depth(queue)).pending


async def _redis_cpu_s(client: aioredis.Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _throughput(ep: Endpoints, n: int, tag: str) -> tuple[float, float, float]:
    """Jobs/s, and CPU µs per job of the relay (this process: its event loop and librdkafka's threads)
    and of Redis, over the same stretch (from the first written batch to the last job in Redis)."""
    topic, queue = f"bench.{tag}", f"bench.{tag}"
    await asyncio.to_thread(_topic, ep, topic)
    await asyncio.to_thread(_produce, ep, topic, queue, 0, n)
    client = aioredis.Redis.from_url(ep.redis_url or "")
    relay = _relay(ep, topic, tag, batch=2000)
    async with relay:
        counts = relay.relays[0].counts
        while not counts.get("written"):  # noqa: ASYNC110 (the relay's state, sampled)
            await asyncio.sleep(0.005)
        started, cpu, redis_cpu = time.perf_counter(), time.process_time(), await _redis_cpu_s(client)
        first = counts["written"]
        while await _pending(client, queue) < n:  # noqa: ASYNC110 (Redis state, sampled)
            await asyncio.sleep(0.02)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        redis_cpu = await _redis_cpu_s(client) - redis_cpu
    await client.aclose()
    jobs = max(n - first, 1)
    return jobs / elapsed, cpu / jobs * 1e6, redis_cpu / jobs * 1e6


async def _rate_accuracy(ep: Endpoints, rate: float, seconds: float, tag: str, per_queue: bool) -> float:
    topic, queue = f"bench.{tag}", f"bench.{tag}"
    await asyncio.to_thread(_topic, ep, topic)
    host, port = ep.consul_addr.rsplit(":", 1)
    key = f"queue-rates/{queue}" if per_queue else f"rates/{topic}"
    consul.Consul(host=host, port=int(port)).kv.put(f"jobq-bench/{tag}/{key}", str(rate))
    total = int(rate * (seconds + 4) * 1.5)
    await asyncio.to_thread(_produce, ep, topic, queue, 0, total)
    client = aioredis.Redis.from_url(ep.redis_url or "")
    async with _relay(ep, topic, tag, batch=500) as relay:
        await relay.relays[0].elector.wait_role(Role.LEADER, timeout_s=30)
        while await _pending(client, queue) < rate:  # noqa: ASYNC110 (warm-up: one second's worth)
            await asyncio.sleep(0.01)
        a, t0 = await _pending(client, queue), time.perf_counter()
        await asyncio.sleep(seconds)
        b, t1 = await _pending(client, queue), time.perf_counter()
    await client.aclose()
    return (b - a) / (t1 - t0)


async def _round(ep: Endpoints, quick: bool, rep: int) -> dict[str, float]:
    n, rate, window = (5_000, 500.0, 1.0) if quick else (200_000, 2000.0, 10.0)
    tag = f"{os.getpid()}r{rep}"
    through, relay_cpu, redis_cpu = await _throughput(ep, n, f"t{tag}")
    achieved = await _rate_accuracy(ep, rate, window, f"l{tag}", per_queue=False)
    per_queue = await _rate_accuracy(ep, rate, window, f"q{tag}", per_queue=True)
    return {
        "relay throughput, limits off": through,
        "relay CPU per job, limits off": relay_cpu,
        "Redis CPU per job, limits off": redis_cpu,
        f"achieved rate at a {rate:g}/s topic limit": achieved,
        "topic rate error": abs(achieved - rate) / rate * 100,
        f"achieved rate at a {rate:g}/s queue limit": per_queue,
        "queue rate error": abs(per_queue - rate) / rate * 100,
    }


UNITS = {
    "relay throughput, limits off": "jobs/s",
    "relay CPU per job, limits off": "µs/job",
    "Redis CPU per job, limits off": "µs/job",
    "topic rate error": "%",
    "queue rate error": "%",
}


def run(quick: bool = False, endpoints: Endpoints | None = None) -> Report:
    reps = 1 if quick else 3
    report = Report("relay", {"reps": reps, "quick": quick, "partitions": PARTITIONS})
    samples: dict[str, list[float]] = {}
    with bench_stack("relay", endpoints) as ep:
        for rep in range(reps):
            for name, value in asyncio.run(_round(ep, quick, rep)).items():
                samples.setdefault(name, []).append(value)
    for name, values in samples.items():
        report.add(name, UNITS.get(name, "jobs/s"), values)
    report.notes.append(
        "one relay process (in-process), batches of 2000 records, 3 partitions, no-op envelopes"
    )
    return report
