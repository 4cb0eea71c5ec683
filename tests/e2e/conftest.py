"""The whole path's fixtures: a gateway and a relay in this process, and scheduler processes."""

from __future__ import annotations

import os
import pathlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import pytest
import redis.asyncio as aioredis

from jqcore.routing import Route, RoutingSettings
from jqcore.testsignal import enable_all
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.client import JobqClient
from jqruntime.stores.membership import live_members
from jqstack.manager import Endpoints
from jqstack.procs import free_port
from jqstack.supervise import Child, Children, python_m
from kafkagate.main import GateService


@dataclass
class Path:
    queue: str
    client: JobqClient
    engine: Engine
    relay: RelayService
    redis: aioredis.Redis
    """The engine's Redis (what a pool's presence heartbeat is written with)."""


@pytest.fixture
async def path(
    prefix: str,
    endpoints: Endpoints,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    token: str,
) -> AsyncIterator[Path]:
    """HTTP → gateway → Kafka → relay → Redis for the queues ``<prefix>*`` (the path's own: ``<prefix>.q``);
    no worker pool and no scheduler."""
    topic = make_topic("jobs", partitions=2)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    redis = aioredis.Redis.from_url(endpoints.redis_url or "")
    engine = Engine(redis)
    enable_all(engine.graphs.signals)  # the pools of a test report through it: it sees graphs end
    async with (
        make_gate(routing) as gate,
        make_relay(topic) as relay,
        JobqClient([gate.url], token) as client,
    ):
        yield Path(f"{prefix}.q", client, engine, relay, redis)
    await redis.aclose()


@dataclass
class SchedulerProcesses:
    """Real ``python -m jqsched`` processes in the group ``<prefix>`` keeping the queues ``<prefix>*``."""

    children: Children
    env: dict[str, str]
    group: str
    redis_url: str
    tmp: str

    ports: dict[str, int] = field(default_factory=dict)
    """Each process's metrics port (``/healthz``, ``/readyz``, ``/metrics``)."""

    def start(self, name: str, **extra: str) -> Child:
        """Start the scheduler ``name`` (``extra``: more environment), logging JSON lines to
        :meth:`log` and serving its health on ``ports[name]``."""
        self.ports[name] = port = free_port()
        env = {**self.env, "JOBQ_SCHEDULER_NAME": name, "JOBQ_SCHEDULER_METRICS_PORT": str(port), **extra}
        return self.children.start(name, python_m("jqsched"), env=env, output=self.log(name))

    def log(self, name: str) -> pathlib.Path:
        return pathlib.Path(self.tmp) / f"{name}.log"

    async def members(self) -> list[str]:
        client = aioredis.Redis.from_url(self.redis_url)
        try:
            return await live_members(client, self.group, stale_s=float(self.env["JOBQ_SCHEDULER_STALE_S"]))
        finally:
            await client.aclose()


@pytest.fixture
def scheduler_processes(
    endpoints: Endpoints, prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchedulerProcesses]:
    assert endpoints.redis_url
    env = {
        **os.environ,
        "JOBQ_REDIS_URL": endpoints.redis_url,
        "JOBQ_CONSUL_ADDR": endpoints.consul_addr,
        "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "JOBQ_FAR_TOPIC": f"{prefix}.schedule",
        "JOBQ_CRON_KV_PREFIX": f"jobq-test/{prefix}",
        "JOBQ_SCHEDULER_GROUP": prefix,
        "JOBQ_SCHEDULER_QUEUES": f"{prefix}*",
        "JOBQ_SCHEDULER_BEAT_S": "0.5",
        "JOBQ_SCHEDULER_STALE_S": "2",
        "JOBQ_LOG_FORMAT": "json",
    }
    tmp = str(tmp_path_factory.mktemp("schedulers"))
    with Children(grace_s=10) as children:
        yield SchedulerProcesses(children, env, prefix, endpoints.redis_url, tmp)
