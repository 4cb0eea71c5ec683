"""``jobq gate`` / ``python -m kafkagate``: serve the gateway until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from aiohttp import web

from jqcore.lifecycle import Service, run_until_signal, serve_http
from jqcore.log import get_logger
from jqcore.presence import Presence, process_name
from jqcore.redisconn import connect
from jqcore.routing import RoutingSettings
from jqcore.settings import (
    ConsulSettings,
    CronSettings,
    FarSettings,
    HistorySettings,
    KafkaSettings,
    RedisSettings,
    TraceSettings,
    load,
)
from jqcore.state import Engine
from jqcore.tracing import setup_tracing
from kafkagate.app import make_app
from kafkagate.settings import GateSettings
from kafkagate.state import Gate

__all__ = ["GateService", "run"]

log = get_logger("kafkagate")


class GateService(Service):
    """The gateway as a service: HTTP on ``settings.host:settings.port`` (port 0: any free port)."""

    def __init__(
        self,
        settings: GateSettings,
        routing: RoutingSettings,
        kafka: KafkaSettings,
        redis: RedisSettings,
        consul: ConsulSettings | None = None,
        cron: CronSettings | None = None,
        far: FarSettings | None = None,
        history: HistorySettings | None = None,
        trace: TraceSettings | None = None,
        mounts: Mapping[str, web.Application] | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.trace = trace or load(TraceSettings)
        self.redis_client = connect(redis)
        self.gate = Gate(settings, routing, kafka, Engine(self.redis_client), consul, cron, far, history)
        self._runner: web.AppRunner | None = None
        self._presence = Presence(self.redis_client, "gate", process_name(settings.az))
        self.port = settings.port
        self.mounts = dict(mounts or {})

    async def _start(self) -> None:
        setup_tracing("kafkagate", self.trace)  # off unless JOBQ_TRACE_OTLP_ENDPOINT is set
        app = make_app(self.gate, self.mounts)
        self._runner, self.port = await serve_http(app, self.settings.host, self.settings.port)
        await self._presence.start()
        log.info("gateway serving", host=self.settings.host, port=self.port, az=self.settings.az)

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    async def _stop(self) -> None:
        await self._presence.stop()
        if self._runner is not None:
            await self._runner.cleanup()  # stops accepting, lets running requests finish, closes producers
        await self.redis_client.aclose()


def run(settings: GateSettings | None = None, mounts: Mapping[str, web.Application] | None = None) -> None:
    service = GateService(
        settings or load(GateSettings),
        load(RoutingSettings),
        load(KafkaSettings),
        load(RedisSettings),
        mounts=mounts,
    )
    asyncio.run(run_until_signal(service))
