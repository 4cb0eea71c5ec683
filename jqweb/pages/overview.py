"""Overview: rates over the last 24 h (kept by jobq itself: ``jqruntime.stores.series`` writes,
``jqweb.series`` reads), alerts, canaries per partition, the queues at a glance. The rates and the queues come
from Redis and render at once; the live panel (alerts, canaries, relay lag: Kafka and Consul are read too)
reloads every ``jqweb.render.REFRESH_S``."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from jqcore.clock import now_ms
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


@routes.get("/", policy=READ)
async def overview(request: web.Request) -> web.Response:
    w = request.app[WEB]
    hours = query_int(request, "hours", 24, 1, 24)
    queues = visible(request, await w.engine.reads.queues())
    until = now_ms()
    since = until - hours * HOUR_MS
    rates = {**(await series.read(w.client, queues, since)).as_dict(), "since_ms": since, "until_ms": until}
    snap = await _narrowed(request, await collect(w.sources, w.client, parts=("redis",)))
    return page(
        request,
        "overview.html",
        {"hours": hours, "rates": rates, "redis": snap.get("redis"), "queues": queues},
    )


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
    }
    return page(request, "overview_live.html", context, partial="overview_live.html")


async def _narrowed(request: web.Request, snap: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with only the queues, topics and schedules the signed-in token may see."""
    w, p = request.app[WEB], principal(request)
    if everything(p):
        return snap
    topics = own_topics(p, w.sources.routing, await w.engine.reads.queues(), w.sources.topics())
    return narrow(snap, p, topics)
