"""The push dispatcher's fixtures: HTTP → gateway → Kafka → relay → Redis → dispatcher → a real aiohttp
downstream started here, which calls back through the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from jqcore.routing import Route, RoutingSettings
from jqcore.testsignal import enable_all
from jqdispatch import service as dispatch_service
from jqdispatch.service import Dispatcher, DispatcherSignals
from jqdispatch.settings import DispatcherSettings
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.client import JobqClient
from kafkagate.main import GateService

SECRET = "test-callback-secret-0123456789"
LOOPBACK = "127.0.0.0/8"
READ_TOKEN = "test-read-token-0123456789"
"""A token of the pipeline's gateway with the ``read`` scope only."""

Behaviour = Callable[[dict[str, Any]], Awaitable[web.StreamResponse]]


@dataclass
class Downstream:
    """A real HTTP server: each POSTed job is answered by ``behave[kind]`` and recorded."""

    url: str = ""
    behave: dict[str, Behaviour] = field(default_factory=dict)
    received: list[tuple[dict[str, Any], dict[str, str]]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        job = await request.json()
        self.received.append((job, dict(request.headers)))
        self.arrived.set()
        return await self.behave[job["kind"]](job)

    def posts(self, job_id: str) -> list[dict[str, Any]]:
        return [j for j, _ in self.received if j["id"] == job_id]


@dataclass
class Pipeline:
    """HTTP → gateway (callbacks on, :data:`SECRET`) → Kafka → relay → Redis for ``queue``, a scheduler."""

    queue: str
    client: JobqClient
    http: aiohttp.ClientSession
    gate_url: str
    engine: Engine
    redis: aioredis.Redis

    async def call(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.http.request(method, self.gate_url + path, **kw) as resp:
            return resp.status, await resp.json()


@dataclass
class Rig(Pipeline):
    """The pipeline with a real downstream and an in-process dispatcher (loopback allowed; ``secrets``: its
    ``JOBQ_DISPATCHER_SECRETS_DIR``)."""

    downstream: Downstream = field(default_factory=Downstream)
    dispatcher: Dispatcher | None = None
    secrets: Path | None = None

    @property
    def signals(self) -> DispatcherSignals:
        assert self.dispatcher is not None
        return self.dispatcher.signals

    async def refresh(self) -> None:
        """Make the dispatcher read the kinds just configured (else within REFRESH_S)."""
        assert self.dispatcher is not None
        await self.dispatcher.refresh()


@pytest.fixture
async def downstream() -> AsyncIterator[Downstream]:
    found = Downstream()
    app = web.Application()
    app.router.add_post("/hook", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    found.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield found
    finally:
        await runner.cleanup()


@pytest.fixture
async def pipeline(
    prefix: str,
    engine: Engine,
    redis: aioredis.Redis,
    scheduler: Any,  # promotes the retries
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    token: str,
) -> AsyncIterator[Pipeline]:
    topic = make_topic("jobs", partitions=1)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    async with (
        make_gate(routing, callback_secret=SECRET, tokens=[token, f"{READ_TOKEN}:read"]) as gate,
        make_relay(topic),
        JobqClient([gate.url], token) as client,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
    ):
        yield Pipeline(f"{prefix}.hooks", client, http, gate.url, engine, redis)


@pytest.fixture(autouse=True)
def fast_dispatcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process dispatchers of these tests refresh, check callbacks and wait for work faster than
    a deployed one (:data:`jqdispatch.service.REFRESH_S` and its neighbours)."""
    monkeypatch.setattr(dispatch_service, "REFRESH_S", 0.2)
    monkeypatch.setattr(dispatch_service, "CALLBACK_CHECK_S", 0.1)
    monkeypatch.setattr(dispatch_service, "IDLE_WAIT_S", 1.0)


def dispatcher_settings(queue: str, gate_url: str, **more: Any) -> DispatcherSettings:
    """A test dispatcher's settings (its refreshes, checks and idle waits are made fast by
    :func:`fast_dispatcher`)."""
    return DispatcherSettings(
        queues=[queue],
        concurrency=10,
        callback_url=gate_url,
        callback_secret=SECRET,
        lease_ms=3000,
        grace_s=1.0,
        **more,
    )


@pytest.fixture
async def rig(pipeline: Pipeline, downstream: Downstream, tmp_path: Path) -> AsyncIterator[Rig]:
    settings = dispatcher_settings(
        pipeline.queue,
        pipeline.gate_url,
        allow_nets=[LOOPBACK],  # the downstream listens on 127.0.0.1, refused unless allowed
        secrets_dir=tmp_path,
    )
    dispatcher = Dispatcher(pipeline.engine, settings, redis=pipeline.redis)
    enable_all(dispatcher.signals)
    async with dispatcher:
        yield Rig(**vars(pipeline), downstream=downstream, dispatcher=dispatcher, secrets=tmp_path)
