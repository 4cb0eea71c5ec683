"""``jobq canary`` / ``python -m canary``: send heartbeats to every partition of every routed topic."""

from __future__ import annotations

import asyncio
from typing import Any

from canary.monitor import Canary
from canary.settings import CanarySettings
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.servers import RedisSettings
from jqcore.topics import job_topics
from jqengine import connect
from jqruntime.client import Gateway, JobqClient
from jqruntime.kafka import topic_partitions
from jqruntime.lifecycle import run_until_signal
from jqruntime.preflight import preflight

__all__ = ["gateways", "once", "run"]


def gateways(settings: CanarySettings) -> list[Gateway]:
    out = []
    for item in settings.gateways:
        url, _, az = item.partition("@")
        out.append(Gateway(url, az))
    return out


async def serve(
    settings: CanarySettings, routing: RoutingSettings, kafka: KafkaSettings, redis_settings: RedisSettings
) -> None:
    """Send heartbeats until a signal (the canary uses this function's clients, closed at the end)."""
    redis = connect(redis_settings)
    try:
        uses = job_topics(routing.topics(), sides=False)
        await preflight(redis=(redis, redis_settings), kafka=kafka, uses=uses)  # first: it says what is wrong
        parts = await asyncio.to_thread(topic_partitions, kafka, routing.topics())
        async with JobqClient(
            gateways(settings), settings.token.get_secret_value(), az=settings.az
        ) as client:
            canary = Canary(
                client, redis, parts, interval_s=settings.interval_s, late_after_s=settings.late_after_s
            )
            await run_until_signal(canary, health_port=settings.metrics_port)
    finally:
        await redis.aclose()


async def one_round(
    settings: CanarySettings, routing: RoutingSettings, kafka: KafkaSettings, redis_settings: RedisSettings
) -> dict[tuple[str, int], dict[str, Any]]:
    """One heartbeat round through every partition of every routed topic, waited for."""
    redis = connect(redis_settings)
    try:
        parts = await asyncio.to_thread(topic_partitions, kafka, routing.topics())
        async with JobqClient(
            gateways(settings), settings.token.get_secret_value(), az=settings.az
        ) as client:
            canary = Canary(
                client, redis, parts, interval_s=settings.interval_s, late_after_s=settings.late_after_s
            )
            return await canary.one_round()
    finally:
        await redis.aclose()


def once(settings: CanarySettings | None = None) -> list[tuple[str, bool]]:
    """``jobq canary --once``: one round; a line per partition and whether its heartbeat ran in time."""
    settings = settings if settings is not None else load(CanarySettings)
    health = asyncio.run(one_round(settings, load(RoutingSettings), load(KafkaSettings), load(RedisSettings)))
    return [
        (_line(topic, partition, r), bool(r.get("ok"))) for (topic, partition), r in sorted(health.items())
    ]


def _line(topic: str, partition: int, result: dict[str, Any]) -> str:
    if result.get("ok"):
        ms = result.get("ms") or {}
        stages = " ".join(f"{k} {v} ms" for k, v in ms.items() if v is not None)
        return f"{topic}[{partition}] ok: {stages}"
    return f"{topic}[{partition}] FAILED: {result.get('problem')}"


def run(settings: CanarySettings | None = None) -> None:
    settings = settings if settings is not None else load(CanarySettings)
    asyncio.run(serve(settings, load(RoutingSettings), load(KafkaSettings), load(RedisSettings)))
