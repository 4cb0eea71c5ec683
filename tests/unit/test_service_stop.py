"""Lifecycle hygiene: services connect in ``start``, so making one and stopping it without a start is a
no-op (no error, no thread, no task, no client left behind), and a start that fails half-way releases
what it made. Every setting points at a port nothing listens on: nothing may connect."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from canary.monitor import Canary
from jqcore.routing import RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import TraceSettings
from jqcore.settings.pipeline import CronSettings, EventSettings, FarSettings, HistorySettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqdispatch.service import Dispatcher
from jqdispatch.settings import DispatcherSettings
from jqengine import Engine, connect
from jqrelay.main import RelayService
from jqrelay.settings import RelaySettings
from jqruntime.client import Gateway, JobqClient
from jqruntime.lifecycle import Service
from jqsched.service import SchedulerService
from jqsched.settings import SchedulerSettings
from jqweb.main import WebService
from jqweb.overview import Sources
from jqweb.settings import WebSettings
from kafkagate.main import GateService
from kafkagate.settings import GateSettings
from worker.pool import Pool, PoolConfig
from worker.registry import Registry

NOWHERE = "127.0.0.1:1"
KAFKA = KafkaSettings(bootstrap=NOWHERE)
REDIS = RedisSettings(url=f"redis://{NOWHERE}/0")
CONSUL = ConsulSettings(addr=NOWHERE)
FAR = FarSettings.model_validate({"horizon_s": 3600})
HISTORY = HistorySettings(path="/nonexistent/jobq-history")


def gate(port: int = 0) -> GateService:
    settings = GateSettings(host="127.0.0.1", port=port, tokens=["t"])
    parts = (CONSUL, CronSettings(), FAR, HISTORY, TraceSettings())
    return GateService(settings, RoutingSettings(), KAFKA, REDIS, *parts)


def relay() -> RelayService:
    settings = RelaySettings(topics=["never.used"], holder="h")
    return RelayService(settings, KAFKA, REDIS, CONSUL, RoutingSettings(), FAR, TraceSettings())


def scheduler() -> SchedulerService:
    settings = SchedulerSettings(name="s", group="g", cron=True, far=True, events=True)
    return SchedulerService(settings, REDIS, CONSUL, CronSettings(), KAFKA, FAR, EventSettings())


def web() -> WebService:
    sources = Sources(
        routing=RoutingSettings(),
        kafka=KAFKA,
        consul=CONSUL,
        redis=REDIS,
        cron=CronSettings(),
        history=HISTORY,
    )
    return WebService(WebSettings(host="127.0.0.1", port=0, read_tokens=["t"]), sources)


def pool() -> Pool:
    client = connect(REDIS)
    return Pool(Registry(), Engine(client), PoolConfig(["never.used"]), redis=client)


def dispatcher() -> Dispatcher:
    settings = DispatcherSettings(queues=["never.used"], callback_secret="s")
    client = connect(REDIS)
    return Dispatcher(Engine(client), settings, redis=client)


def canary() -> Canary:
    client = JobqClient([Gateway(f"http://{NOWHERE}")], "t")
    return Canary(client, connect(REDIS), {"never.used": [0]})


@pytest.fixture
async def no_leaks() -> AsyncIterator[None]:
    """Fails the test if it leaves a thread or a task behind."""
    threads = set(threading.enumerate())
    yield
    assert set(threading.enumerate()) <= threads, "a thread was left running"
    assert asyncio.all_tasks() == {asyncio.current_task()}, "a task was left running"


@pytest.mark.parametrize("make", [gate, relay, scheduler, web, pool, dispatcher, canary])
async def test_stopping_a_service_never_started_is_a_no_op(
    make: Callable[[], Service], no_leaks: None
) -> None:
    service = make()
    await service.stop()
    await service.stop()  # twice: still nothing
    assert not service.running
    with pytest.raises(RuntimeError, match="was stopped"):
        await service.start()


@pytest.mark.usefixtures("no_leaks")
async def test_a_gateway_whose_start_fails_half_way_releases_what_it_made() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        service = gate(taken.getsockname()[1])
        with pytest.raises(OSError, match=r"(?i)address"):
            await service.start()  # the Redis client and the gate were made; the port is taken
    assert not service.running
    assert service._redis_client is None, "the Redis client was closed"
    with pytest.raises(RuntimeError, match="not started"):
        service.gate  # noqa: B018


def test_the_services_have_no_started_parts_before_start() -> None:
    r, s = relay(), scheduler()
    assert (r.relays, list(r.signals)) == ([], ["never.used"]), "signals exist to be enabled before start"
    assert (s.owned, s.status()["members"]) == ([], [])
    for attr in ("engine", "timers", "membership", "client"):
        with pytest.raises(RuntimeError, match="not started"):
            getattr(s, attr)
    any_: Any = r
    with pytest.raises(RuntimeError, match="not started"):
        any_.engine  # noqa: B018
