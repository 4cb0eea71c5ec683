"""Queues: every queue's depth per state, oldest pending age, pause and throughput over the last hour;
one queue's configuration, lifetime counters, job types and rate limit. Actions: pause, resume, block and
unblock enqueues, and the settings an operator tunes (lease, attempts, retention, the lifecycle events'
cap, the default delay); each change is kept in Consul too (:mod:`jqruntime.stores.config`)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any

from aiohttp import web

from jqcore.clock import now_ms
from jqengine import QueueConfig, RedisClient, check_bounds
from jqruntime.authz import Policy, path_queue
from jqruntime.http import HttpError
from jqruntime.stores.config import ConfigStore
from jqweb import series
from jqweb.context import WEB, Web
from jqweb.overview import queue_row, queue_rows
from jqweb.pages.topics import describe_rate, topic_of
from jqweb.render import act, form, page
from jqweb.routes import Pages
from jqweb.security import READ, visible

__all__ = ["SETTINGS", "routes"]

routes = Pages()

HOUR_MS = 3600 * 1000
SAMPLE_READS_AT_ONCE = 32

SETTINGS: dict[str, tuple[int, int]] = {
    "lease_ms": (100, 86_400_000 * 365),
    "max_attempts": (1, 1000),
    "retention_ms": (0, 86_400_000 * 3650),
    "dead_retention_ms": (0, 86_400_000 * 3650),
    "events_cap": (0, 1_000_000_000),
    "memory_budget": (0, 1 << 50),
    "default_delay_ms": (0, QueueConfig.MAX_DEFAULT_DELAY_MS),
}
"""The settings the page edits and their ranges: the gateway's lower bounds (``PATCH /v1/queues/{q}``:
lease_ms ≥ 100, max_attempts 1..1000, retentions, events_cap and memory_budget ≥ 0, default_delay_ms
0..30 days) and generous upper ones."""


def throughput(points: list[dict[str, int]]) -> list[int]:
    """Jobs completed between consecutive samples (a counter reset counts from zero)."""
    out = []
    for before, after in itertools.pairwise(points):
        grown = after.get("completed", 0) - before.get("completed", 0)
        out.append(grown if grown >= 0 else after.get("completed", 0))
    return out


async def _sparks(client: RedisClient, queues: list[str]) -> dict[str, list[int]]:
    since = now_ms() - HOUR_MS
    gate = asyncio.Semaphore(SAMPLE_READS_AT_ONCE)

    async def one(q: str) -> list[int]:
        async with gate:
            return throughput(await series.samples(client, q, since))

    return dict(zip(queues, await asyncio.gather(*(one(q) for q in queues)), strict=True))


@routes.get("/queues", policy=READ)
async def queues_page(request: web.Request) -> web.Response:
    w = request.app[WEB]
    match = request.query.get("q", "").strip()
    queues = [q for q in visible(request, await w.engine.reads.queues()) if match in q]
    rows = await queue_rows(w.engine, queues)
    sparks = await _sparks(w.client, queues)
    for row in rows:
        row["throughput"] = sparks[row["queue"]]
    return page(request, "queues.html", {"queues": rows, "q": match})


async def _known(w: Web, queue: str) -> str:
    if queue not in await w.engine.reads.queues():
        raise HttpError(404, "queue_not_found", f"no queue {queue!r}")
    return queue


async def _kinds(w: Web, queue: str) -> list[dict[str, Any]]:
    """The job types with options in this queue (or defaults for every queue)."""
    out = []
    for kind, entry in sorted((await w.engine.reads.kinds([queue])).items()):
        options = entry["queues"].get(queue)
        if options is not None or entry["defaults"] is not None:
            out.append({"kind": kind, "options": options, "defaults": entry["defaults"]})
    return out


@routes.get("/queues/{queue}", policy=Policy("read", (path_queue,)))
async def queue_page(request: web.Request) -> web.Response:
    w = request.app[WEB]
    queue = await _known(w, request.match_info["queue"])
    row = await queue_row(w.engine, queue)
    row["throughput"] = (await _sparks(w.client, [queue]))[queue]
    _, entry = await w.consul.kv.get(w.sources.relay.queue_rate_key(queue))
    rate_text = ((entry or {}).get("Value") or b"").decode()
    context = {
        "queue": row,
        "config": (await w.engine.reads.queue_config(queue)).as_dict(),
        "stats": await w.engine.reads.queue_stats(queue),
        "kinds": await _kinds(w, queue),
        "rate": describe_rate(rate_text),
        "topic": topic_of(w.sources.routing, queue),
        "settings": {k: {"low": lo, "high": hi} for k, (lo, hi) in SETTINGS.items()},
    }
    return page(request, "queue.html", context)


async def _keep(w: Web, queue: str) -> None:
    """Keep the queue's configuration in force in Consul too (``jobq rebuild`` restores it from there:
    :mod:`jqruntime.stores.config`)."""
    config = await w.engine.reads.queue_config(queue)
    await ConfigStore(w.consul, w.sources.cron.kv_prefix).put_queue(queue, config)


async def _switch(
    request: web.Request, action: str, word: str, *, paused: bool | None = None, blocked: bool | None = None
) -> web.Response:
    """Flip one flag of a queue's configuration (``paused``, ``enqueue_blocked``), audited as ``action``."""
    w = request.app[WEB]
    queue = await _known(w, request.match_info["queue"])
    fields = await form(request)

    async def run() -> int:
        if paused is not None:
            await w.engine.admin.pause(queue, paused)
        if blocked is not None:
            current = await w.engine.reads.queue_config(queue)
            await w.engine.admin.configure_queue(queue, dataclasses.replace(current, enqueue_blocked=blocked))
        await _keep(w, queue)
        return 0

    return await act(
        request,
        action,
        queue,
        run,
        done=lambda _: f"queue {queue} {word}",
        back=f"{w.base}/queues/{queue}",
        next_url=fields.get("next"),
    )


async def _pause(request: web.Request, paused: bool) -> web.Response:
    word = "paused" if paused else "resumed"
    return await _switch(request, "queue.pause" if paused else "queue.resume", word, paused=paused)


async def _block(request: web.Request, blocked: bool) -> web.Response:
    word = "blocked: the gateways answer 423 to new jobs" if blocked else "accepts new jobs again"
    action = "queue.block" if blocked else "queue.unblock"
    return await _switch(request, action, word, blocked=blocked)


@routes.post("/queues/{queue}/block", policy=Policy("admin", (path_queue,)))
async def block(request: web.Request) -> web.Response:
    return await _block(request, True)


@routes.post("/queues/{queue}/unblock", policy=Policy("admin", (path_queue,)))
async def unblock(request: web.Request) -> web.Response:
    return await _block(request, False)


@routes.post("/queues/{queue}/pause", policy=Policy("admin", (path_queue,)))
async def pause(request: web.Request) -> web.Response:
    return await _pause(request, True)


@routes.post("/queues/{queue}/resume", policy=Policy("admin", (path_queue,)))
async def resume(request: web.Request) -> web.Response:
    return await _pause(request, False)


def settings_changes(fields: dict[str, str]) -> dict[str, Any]:
    """The settings posted (empty or absent: unchanged), checked; 400 ``form_invalid`` naming the field."""
    changes: dict[str, Any] = {}
    for name, (low, high) in SETTINGS.items():
        raw = fields.get(name, "").strip()
        if raw == "":
            continue
        try:
            value = int(raw)
        except ValueError:
            raise HttpError(400, "form_invalid", f"{name} must be an integer, not {raw!r}") from None
        if not low <= value <= high:
            raise HttpError(400, "form_invalid", f"{name} must be {low}..{high}, not {value}")
        changes[name] = value
    return changes


@routes.post("/queues/{queue}/settings", policy=Policy("admin", (path_queue,)))
async def settings(request: web.Request) -> web.Response:
    w = request.app[WEB]
    queue = await _known(w, request.match_info["queue"])
    fields = await form(request)
    changes = settings_changes(fields)
    await check_bounds(w.client, w.queue_bounds, changes)

    async def run() -> int:
        current = await w.engine.reads.queue_config(queue)
        await w.engine.admin.configure_queue(queue, dataclasses.replace(current, **changes))
        await _keep(w, queue)
        return 0

    said = ", ".join(f"{k}={v}" for k, v in changes.items()) or "nothing changed"
    return await act(
        request,
        "queue.settings",
        f"{queue}: {said}",
        run,
        done=lambda _: f"queue {queue}: {said}",
        back=f"{w.base}/queues/{queue}",
        next_url=fields.get("next"),
    )
