"""``jobq dispatcher`` / ``python -m jqdispatch``: run one dispatcher until a signal.

SIGTERM or SIGINT stops claiming, lets POSTs under way finish within the grace period and releases the
rest (no attempt spent)."""

from __future__ import annotations

import asyncio

from jqcore.log import get_logger
from jqcore.settings.common import load
from jqcore.settings.servers import RedisSettings
from jqdispatch.service import Dispatcher
from jqdispatch.settings import DispatcherSettings
from jqengine import Engine, connect
from jqruntime.lifecycle import run_until_signal
from jqruntime.preflight import preflight

__all__ = ["run", "serve"]

log = get_logger("jqdispatch")

REDIS_CONNECTIONS = 64
"""The process's Redis connections: outcome writes (``service.WRITES_AT_ONCE``), claims, the blocking
wait, lease extensions, callback checks, presence."""
REDIS_WAIT_S = 10.0


async def serve(settings: DispatcherSettings, redis: RedisSettings) -> None:
    # bounded, and a command waits for a free connection: a burst of outcomes never fails on the pool
    client = connect(redis, max_connections=REDIS_CONNECTIONS, wait_s=REDIS_WAIT_S)
    dispatcher = Dispatcher(Engine(client), settings, redis=client)
    log.info("dispatcher starting", queues=list(settings.queues), concurrency=settings.concurrency)
    try:
        await preflight(redis=(client, redis))
        await run_until_signal(dispatcher, health_port=settings.metrics_port)
    finally:
        await client.aclose()
    log.info("dispatcher stopped")


def run(settings: DispatcherSettings) -> None:
    """Run until a signal."""
    asyncio.run(serve(settings, load(RedisSettings)))
