"""Relays against the real Kafka, Redis and Consul of the session stack."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from jobq.stack.manager import Endpoints
from jqcore.state import Engine


@pytest.fixture
async def engine(endpoints: Endpoints) -> AsyncIterator[Engine]:
    client = aioredis.Redis.from_url(endpoints.redis_url or "")
    yield Engine(client)
    await client.aclose()
