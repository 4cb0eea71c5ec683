"""Run one engine call from a CLI command: a Redis client from the settings, closed whatever happens."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jqcore.settings.common import load
from jqcore.settings.servers import RedisSettings
from jqengine import Engine, connect

__all__ = ["with_engine"]

T = TypeVar("T")


def with_engine(action: Callable[[Engine], Awaitable[T]]) -> T:
    """``action(engine)`` on a fresh client of ``JOBQ_REDIS_*`` (``asyncio.run``), then the client closed."""

    async def go() -> T:
        client = connect(load(RedisSettings))
        try:
            return await action(Engine(client))
        finally:
            await client.aclose()

    return asyncio.run(go())
