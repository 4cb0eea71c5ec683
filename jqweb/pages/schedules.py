"""Schedules: what waits for its time. Per queue the delayed jobs (in Redis) and the far-future tier (jobs
kept in the schedule topic, only indexed in Redis) with the next run of each; and the cron schedules
(Consul KV) with their last and next slot, which an admin pauses, resumes or triggers once now."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from jqcore.clock import now_ms
from jqcore.cron import CronSchedule, check_name
from jqcore.errors import CronInvalid, JobqError
from jqengine import Engine
from jqruntime.authz import Policy, Touch, owner
from jqruntime.http import HttpError
from jqruntime.stores.cron import fire_now, overview
from jqruntime.tokens import Token
from jqweb.context import WEB
from jqweb.render import act, form, page
from jqweb.routes import Pages
from jqweb.security import READ, principal

__all__ = ["routes"]

routes = Pages()

READS_AT_ONCE = 32
BACK = "/schedules"


async def _next_run(engine: Engine, queue: str, state: str) -> int | None:
    """When the first job of ``delayed`` or ``far`` runs (None: there is none, or too many far-future
    jobs to read their unordered index)."""
    if state == "far":
        return await engine.reads.far_next(queue)
    ids, _ = await engine.reads.list_ids(queue, state, 0, 1)
    if not ids:
        return None
    job = await engine.reads.get_job(queue, ids[0])
    return job.run_at if job is not None else None


async def _waiting(engine: Engine) -> list[dict[str, Any]]:
    """The queues with delayed or far-future jobs: how many and when the next one runs."""
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def one(queue: str) -> dict[str, Any] | None:
        async with gate:
            depth = await engine.reads.depth(queue)
            if not depth.delayed and not depth.far:
                return None
            return {
                "queue": queue,
                "delayed": depth.delayed,
                "next_delayed_at": await _next_run(engine, queue, "delayed") if depth.delayed else None,
                "far": depth.far,
                "next_far_at": await _next_run(engine, queue, "far") if depth.far else None,
            }

    rows = await asyncio.gather(*(one(q) for q in await engine.reads.queues()))
    return [r for r in rows if r is not None]


@routes.get("/schedules", policy=READ)
async def schedules(request: web.Request) -> web.Response:
    w = request.app[WEB]
    cron: list[dict[str, Any]] = []
    cron_error = None
    try:
        cron = await overview(w.cron(), now_ms())
    except JobqError as exc:  # Consul away: the queues' timers still show
        cron_error = f"{exc.code}: {exc.message}"
    p = principal(request)
    context = {
        "waiting": [r for r in await _waiting(w.engine) if p.allows_queue(r["queue"])],
        "cron": [r for r in cron if p.allows_queue(r["queue"])],
        "cron_error": cron_error,
        "kv_prefix": w.sources.cron.kv_prefix,
    }
    return page(request, "schedules.html", context)


def _name(request: web.Request) -> str:
    try:
        return check_name(request.match_info["name"])
    except CronInvalid as exc:
        raise HttpError(400, "schedule_name_invalid", exc.message) from None


def _missing(name: str) -> HttpError:
    return HttpError(404, "schedule_not_found", f"no cron schedule named {name!r}")


async def schedule_owner(request: web.Request, _: Token) -> Iterable[Touch]:
    """The queue of the schedule the path names (404 ``schedule_not_found`` for none)."""
    name = _name(request)
    schedule = await request.app[WEB].cron().get(name)
    if schedule is None:
        raise _missing(name)
    return [owner(schedule.queue, f"schedule {name!r}")]


async def _set_paused(request: web.Request, paused: bool) -> web.Response:
    w = request.app[WEB]
    name = _name(request)
    data = await form(request)

    async def run() -> int:
        if await w.cron().set_paused(name, paused, now_ms()) is None:
            raise _missing(name)
        return 0

    verb = "paused" if paused else "resumed"
    return await act(
        request,
        "cron.pause" if paused else "cron.resume",
        name,
        run,
        done=lambda _: f"schedule {name} {verb}",
        back=f"{w.base}{BACK}",
        next_url=data.get("next"),
    )


@routes.post("/schedules/{name}/pause", policy=Policy("admin", (schedule_owner,)))
async def pause(request: web.Request) -> web.Response:
    return await _set_paused(request, True)


@routes.post("/schedules/{name}/resume", policy=Policy("admin", (schedule_owner,)))
async def resume(request: web.Request) -> web.Response:
    return await _set_paused(request, False)


@routes.post("/schedules/{name}/trigger", policy=Policy("admin", (schedule_owner,)))
async def trigger(request: web.Request) -> web.Response:
    """Enqueue one job of the schedule now (id ``cron:<name>:<now>:manual``), paused or not."""
    w = request.app[WEB]
    name = _name(request)
    data = await form(request)
    fired: list[str] = []
    found: list[CronSchedule] = []

    async def run() -> int:
        schedule = await w.cron().get(name)
        if schedule is None:
            raise _missing(name)
        found.append(schedule)
        fired.extend(await fire_now(w.engine, schedule, [now_ms()], manual=True))
        return len(fired)

    return await act(
        request,
        "cron.trigger",
        name,
        run,
        done=lambda _: f"schedule {name} triggered: job {fired[0]} in {found[0].queue}",
        back=f"{w.base}{BACK}",
        next_url=data.get("next"),
    )
