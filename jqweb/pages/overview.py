"""Overview: rates over the last 24 h (kept by jobq itself: ``jqruntime.stores.series`` writes,
``jqweb.series`` reads), alerts, canaries per partition, the queues at a glance. The rates and the queues come
from Redis and render at once; the live panel (alerts, canaries, relay lag: Kafka and Consul are read too)
reloads every ``jqweb.render.REFRESH_S``."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from jqcore.clock import now_ms
from jqruntime.http import HttpError
from jqweb import series
from jqweb.alerting import FAILURE_WINDOW_S
from jqweb.context import WEB
from jqweb.narrow import everything, narrow, own_topics
from jqweb.overview import alerts, collect
from jqweb.render import page, query_int
from jqweb.routes import Pages
from jqweb.security import READ, principal, visible

__all__ = ["routes"]

routes = Pages()

HOUR_MS = 3600 * 1000
RANGES = {"1h": 1, "6h": 6, "24h": 24}
"""The time ranges the overview offers (the samples are kept 25 h: ``jqruntime.stores.series``)."""


def time_range(request: web.Request) -> tuple[str, int]:
    """``?range=1h|6h|24h`` (``?hours=N``, 1..24, as before): the range's name and its hours."""
    given = request.query.get("range")
    if given is not None:
        if given not in RANGES:
            raise HttpError(
                400, "query_invalid", f"range must be one of {', '.join(RANGES)}, not {given[:20]!r}"
            )
        return given, RANGES[given]
    hours = query_int(request, "hours", 24, 1, 24)
    return f"{hours}h", hours


@routes.get("/", policy=READ)
async def overview(request: web.Request) -> web.Response:
    w = request.app[WEB]
    name, hours = time_range(request)
    queues = visible(request, await w.engine.reads.queues())
    until = now_ms()
    since = until - hours * HOUR_MS
    got = await series.read(w.client, queues, since)
    rates = {**got.as_dict(), "since_ms": since, "until_ms": until}
    snap = await _narrowed(request, await collect(w.sources, w.client, parts=("redis",)))
    context = {
        "hours": hours,
        "range": name,
        "ranges": list(RANGES),
        "rates": rates,
        "collecting": len(got.at_ms) < 2,  # a line needs two points: two rates, three samples
        "redis": snap.get("redis"),
        "queues": queues,
    }
    return page(request, "overview.html", context)


@routes.get("/overview/live", policy=READ)
async def live(request: web.Request) -> web.Response:
    w = request.app[WEB]
    snap = await _narrowed(
        request, await collect(w.sources, w.client, parts=("kafka", "locks", "redis", "cron"))
    )
    redis: Any = snap.get("redis")
    queues = [q["queue"] for q in redis["queues"]] if isinstance(redis, dict) and "queues" in redis else []
    grown = await series.growth(w.client, queues, "errored", now_ms() - HOUR_MS) if queues else {}
    ended = await series.outcomes(w.client, queues, now_ms() - FAILURE_WINDOW_S * 1000) if queues else {}
    context = {
        "alerts": [a.as_dict() for a in alerts(snap, grown, ended)],
        "snapshot": snap,
        "now": time.time(),
        "now_ms": now_ms(),
    }
    return page(request, "overview_live.html", context, partial="overview_live.html")


async def _narrowed(request: web.Request, snap: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with only the queues, topics and schedules the signed-in token may see."""
    w, p = request.app[WEB], principal(request)
    if everything(p):
        return snap
    topics = own_topics(p, w.sources.routing, await w.engine.reads.queues(), w.sources.topics())
    return narrow(snap, p, topics)
