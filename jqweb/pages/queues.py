"""Queues: every queue's depth per state, oldest pending age, pause and throughput over the last hour;
one queue's configuration, lifetime counters, the kinds seen (counts, failure rate and run times of its
newest finished jobs, what runs now, each kind's options) and rate limit. Actions: pause, resume, block
and unblock enqueues, and the settings an operator tunes (lease, attempts, retention, the lifecycle
events' cap, the default delay: durations are written ``30s``, ``24h``, ``1h30m`` or in ms); each change
is kept in Consul too (:mod:`jqruntime.stores.config`)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any

from aiohttp import web

from jqcore.clock import now_ms
from jqcore.durations import format_ms, parse_ms
from jqengine import Engine, QueueConfig, RedisClient, check_bounds
from jqruntime.authz import Policy, path_queue
from jqruntime.http import HttpError
from jqruntime.stores.config import ConfigStore
from jqweb import series
from jqweb.context import WEB, Web
from jqweb.overview import held_rows, queue_row, queue_rows
from jqweb.pages.topics import describe_rate, topic_of
from jqweb.render import act, form, page
from jqweb.routes import Pages
from jqweb.security import READ, visible

__all__ = ["SETTINGS", "routes"]

routes = Pages()

HOUR_MS = 3600 * 1000
SAMPLE_READS_AT_ONCE = 32
KINDS_SAMPLE = 1000
"""The newest finished jobs a queue's page reads for its kinds' counts, failure rates and run times (one
pipelined read of five fields each), and the running jobs read for what runs now."""
DURATIONS = frozenset({"lease_ms", "retention_ms", "dead_retention_ms", "default_delay_ms"})
"""The settings that are durations: shown ``30s``, ``1d``; posted as a duration or in ms."""

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
    held = await _held(w, queues)
    for row in rows:
        row["throughput"] = sparks[row["queue"]]
        row["held"] = held.get(row["queue"])
    return page(request, "queues.html", {"queues": rows, "q": match})


async def _held(w: Web, queues: list[str]) -> dict[str, dict[str, Any]]:
    """Queue → its row of :func:`jqweb.overview.held_rows` (what ``jobq status`` shows), for the held ones."""
    wanted = set(queues)
    return {h["queue"]: h for h in await held_rows(w.client) if h["queue"] in wanted}


async def _known(w: Web, queue: str) -> str:
    if queue not in await w.engine.reads.queues():
        raise HttpError(404, "queue_not_found", f"no queue {queue!r}")
    return queue


def _percentile(values: list[int], p: float) -> int | None:
    """The ``p`` quantile (nearest rank) of ``values``; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p * len(ordered) + 0.5) - 1))]


def _int(raw: bytes | None) -> int | None:
    return int(raw) if raw else None


async def kinds_seen(engine: Engine, queue: str, sample: int = KINDS_SAMPLE) -> dict[str, Any]:
    """What ran in ``queue``, by kind, from what Redis keeps anyway: the newest ``sample`` finished jobs
    (the done list, until their retention) — how many completed, died, were canceled or expired; the
    share of their attempts that failed (every attempt but a completed job's last one); p50/p95 run
    time of their last attempt — and the kinds of the jobs running now. No counter is written for it."""
    ids, finished = await engine.reads.list_ids(queue, "done", 0, sample, newest=True)
    fields = ("kind", "state", "attempt", "started_at", "finished_at")
    rows = await engine.reads.job_fields(queue, ids, fields)
    running_ids, running_total = await engine.reads.list_ids(queue, "running", 0, sample)
    running = await engine.reads.job_fields(queue, running_ids, ("kind",))
    by_kind: dict[str, dict[str, Any]] = {}

    def entry(kind: str) -> dict[str, Any]:
        return by_kind.setdefault(
            kind,
            {
                "kind": kind,
                "finished": 0,
                "completed": 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
                "attempts": 0,
                "failed_attempts": 0,
                "running": 0,
                "_ms": [],
            },
        )

    for kind_b, state_b, attempt_b, started, ended in rows:
        if kind_b is None or state_b is None:
            continue  # collected between the two reads
        e, state, attempts = entry(kind_b.decode()), state_b.decode(), _int(attempt_b) or 0
        e["finished"] += 1
        if state in ("completed", "errored", "canceled", "expired"):
            e[state] += 1
        e["attempts"] += attempts
        e["failed_attempts"] += max(0, attempts - 1) if state == "completed" else attempts
        if (s := _int(started)) and (f := _int(ended)) and f >= s:
            e["_ms"].append(f - s)
    for (kind_b,) in running:
        if kind_b is not None:
            entry(kind_b.decode())["running"] += 1
    out = []
    for e in sorted(by_kind.values(), key=lambda e: (-e["finished"] - e["running"], e["kind"])):
        ms = e.pop("_ms")
        e["failure_rate"] = round(e["failed_attempts"] / e["attempts"], 4) if e["attempts"] else None
        e["p50_ms"], e["p95_ms"] = _percentile(ms, 0.5), _percentile(ms, 0.95)
        out.append(e)
    return {
        "kinds": out,
        "sampled": len(ids),
        "finished": finished,
        "running": running_total,
        "sample": sample,
    }


async def _kinds(w: Web, queue: str) -> list[dict[str, Any]]:
    """The job types with options in this queue (or defaults for every queue)."""
    out = []
    for kind, entry in sorted((await w.engine.reads.kinds([queue])).items()):
        options = entry["queues"].get(queue)
        if options is not None or entry["defaults"] is not None:
            out.append({"kind": kind, "options": options, "defaults": entry["defaults"]})
    return out


def merged_kinds(seen: list[dict[str, Any]], configured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every kind seen or configured: what ran (empty counts for a configured kind not seen) and its
    options (None: the queue's settings)."""
    options = {k["kind"]: k for k in configured}
    rows = [{**k, "config": options.pop(k["kind"], None)} for k in seen]
    empty = {"finished": 0, "completed": 0, "errored": 0, "canceled": 0, "expired": 0, "attempts": 0}
    for kind, conf in sorted(options.items()):
        rows.append(
            {
                "kind": kind,
                **empty,
                "failed_attempts": 0,
                "running": 0,
                "failure_rate": None,
                "p50_ms": None,
                "p95_ms": None,
                "config": conf,
            }
        )
    return rows


@routes.get("/queues/{queue}", policy=Policy("read", (path_queue,)))
async def queue_page(request: web.Request) -> web.Response:
    w = request.app[WEB]
    queue = await _known(w, request.match_info["queue"])
    row = await queue_row(w.engine, queue)
    row["throughput"] = (await _sparks(w.client, [queue]))[queue]
    row["held"] = (await _held(w, [queue])).get(queue)
    _, entry = await w.consul.kv.get(w.sources.relay.queue_rate_key(queue))
    rate_text = ((entry or {}).get("Value") or b"").decode()
    seen = await kinds_seen(w.engine, queue)
    stats = await w.engine.reads.queue_stats(queue)
    context = {
        "queue": row,
        "config": (await w.engine.reads.queue_config(queue)).as_dict(),
        "stats": stats,
        "mean_wait_ms": round(stats["wait_ms"] / stats["claimed"]) if stats.get("claimed") else None,
        "kinds": merged_kinds(seen.pop("kinds"), await _kinds(w, queue)),
        "kinds_sample": seen,
        "rate": describe_rate(rate_text),
        "topic": topic_of(w.sources.routing, queue),
        "settings": {
            k: {"low": lo, "high": hi, "duration": k in DURATIONS} for k, (lo, hi) in SETTINGS.items()
        },
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


def _shown(name: str, value: int) -> str:
    return format_ms(value) if name in DURATIONS else f"{value:,}"


def settings_changes(fields: dict[str, str]) -> dict[str, Any]:
    """The settings posted (empty or absent: unchanged), checked; 400 ``form_invalid`` naming the field.
    A duration (:data:`DURATIONS`) is ``30s``, ``24h``, ``1h30m`` or a number of ms."""
    changes: dict[str, Any] = {}
    for name, (low, high) in SETTINGS.items():
        raw = fields.get(name, "").strip()
        if raw == "":
            continue
        try:
            value = parse_ms(raw, plain_ms=True) if name in DURATIONS else int(raw)
        except ValueError as exc:
            what = str(exc) if name in DURATIONS else f"an integer, not {raw[:40]!r}"
            raise HttpError(400, "form_invalid", f"{name}: {what}", details={"field": name}) from None
        if not low <= value <= high:
            a, b, v = (_shown(name, x) for x in (low, high, value))
            raise HttpError(400, "form_invalid", f"{name} must be {a}..{b}, not {v}", details={"field": name})
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

    said = (
        ", ".join(f"{k}={format_ms(v) if k in DURATIONS else v}" for k, v in changes.items())
        or "nothing changed"
    )
    return await act(
        request,
        "queue.settings",
        f"{queue}: {said}",
        run,
        done=lambda _: f"queue {queue}: {said}",
        back=f"{w.base}/queues/{queue}",
        next_url=fields.get("next"),
    )
