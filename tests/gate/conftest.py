"""A real gateway (GateService on a free port) in front of the session's real Kafka and Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from jqcore.envelope import new_envelope
from jqcore.routing import Route, RoutingSettings
from jqengine import Engine
from jqstack.manager import Endpoints
from kafkagate.main import GateService


@dataclass
class Gw:
    service: GateService
    http: aiohttp.ClientSession
    topic: str
    queue: str

    @property
    def url(self) -> str:
        return self.service.url

    async def call(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.http.request(method, self.url + path, **kw) as resp:
            body = await resp.json() if resp.content_type == "application/json" else await resp.text()
            return resp.status, body


@pytest.fixture
def routing_for(prefix: str) -> Callable[[str], RoutingSettings]:
    def make(topic: str) -> RoutingSettings:
        return RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")

    return make


@pytest.fixture
async def gw(
    endpoints: Endpoints,
    prefix: str,
    make_topic: Callable[..., str],
    routing_for: Callable[[str], RoutingSettings],
    make_gate: Callable[..., GateService],
    token: str,
) -> AsyncIterator[Gw]:
    topic = make_topic("jobs", partitions=3)
    service = make_gate(routing_for(topic))
    async with service, aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
        yield Gw(service, http, topic, f"{prefix}.q")


Put = Callable[..., Any]


@pytest.fixture
def put(engine: Engine) -> Put:
    """``await put(queue, kind="k", **envelope options)``: a job put into Redis as the relay would."""

    async def store(queue: str, kind: str = "k", **kw: Any) -> str:
        env = new_envelope(queue, kind, kw.pop("args", None), **kw)
        await engine.enqueue_batch([env])
        return env.id

    return store
