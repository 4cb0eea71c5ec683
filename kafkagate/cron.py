"""Cron schedules over HTTP: the same operations as ``jobq cron`` (schedules in Consul KV, fired by the
scheduler service). ``GET`` needs ``read``, everything else ``admin``."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from jqcore.clock import now_ms
from jqcore.cron import CronSchedule
from jqcore.errors import CronNotFound
from jqruntime.authz import Policy
from jqruntime.http import json_response
from jqruntime.stores.cron import CronStore, fire_now, overview
from kafkagate import admin_models as m
from kafkagate.api import Api
from kafkagate.auth import cron_owner, cron_put, visible
from kafkagate.requests import engine_call, name_of, schedule_of
from kafkagate.state import GATE

__all__ = ["routes", "schedule_body_schema"]

routes = Api()


def schedule_body_schema() -> dict[str, Any]:
    """The JSON Schema of a ``PUT /v1/cron/{name}`` body: a schedule without its name (the path's)."""
    schema = CronSchedule.model_json_schema()
    for server_side in ("name", "created_ms"):
        schema["properties"].pop(server_side, None)
    schema["required"] = [r for r in schema.get("required", []) if r not in ("name", "created_ms")]
    return schema


def _store(request: web.Request) -> CronStore:
    return request.app[GATE].cron()


async def _existing(request: web.Request) -> CronSchedule:
    name = name_of(request)
    schedule = await _store(request).get(name)
    if schedule is None:
        raise CronNotFound(f"no cron schedule named {name!r}")
    return schedule


@routes.get(
    "/v1/cron",
    policy=Policy("read"),
    summary="every cron schedule with its last and next run",
    answer=m.ScheduleList,
)
async def list_schedules(request: web.Request) -> web.Response:
    rows = await overview(_store(request), now_ms())
    shown = set(visible(request, {r["queue"] for r in rows}))
    return json_response({"schedules": [r for r in rows if r["queue"] in shown]})


@routes.get(
    "/v1/cron/{name}",
    policy=Policy("read", (cron_owner,)),
    summary="one cron schedule with its last and next run",
    answer=m.ScheduleRun,
    errors={404: "cron_not_found: no such cron schedule"},
)
async def get_schedule(request: web.Request) -> web.Response:
    name = (await _existing(request)).name
    rows = [r for r in await overview(_store(request), now_ms()) if r["name"] == name]
    if not rows:
        raise CronNotFound(f"no cron schedule named {name!r}")
    return json_response(rows[0])


@routes.put(
    "/v1/cron/{name}",
    policy=Policy("admin", (cron_put,)),
    summary="create or replace a schedule (cron + tz, or every_s; queue, kind, args, misfire policy);"
    " its first slot comes after now",
    body=schedule_body_schema(),
    body_example={"cron": "0 3 * * *", "tz": "Europe/Paris", "queue": "default", "kind": "report"},
    answer=m.Schedule,
    errors={400: "cron_invalid: an invalid schedule (fields named)"},
)
async def put_schedule(request: web.Request) -> web.Response:
    """Create or replace a schedule; its first slot comes after now."""
    schedule = await schedule_of(request)
    stored = await _store(request).put(schedule, now_ms())
    return json_response(stored.model_dump())


@routes.delete(
    "/v1/cron/{name}",
    policy=Policy("admin", (cron_owner,)),
    summary="remove a schedule (jobs already enqueued stay)",
    answer=m.ScheduleRemoved,
    errors={404: "cron_not_found: no such cron schedule"},
)
async def delete_schedule(request: web.Request) -> web.Response:
    name = (await _existing(request)).name
    if not await _store(request).delete(name):
        raise CronNotFound(f"no cron schedule named {name!r}")
    return json_response({"name": name, "removed": True})


@routes.post(
    "/v1/cron/{name}/pause",
    policy=Policy("admin", (cron_owner,)),
    summary="stop firing a schedule",
    answer=m.Schedule,
    errors={404: "cron_not_found: no such cron schedule"},
)
async def pause_schedule(request: web.Request) -> web.Response:
    return await _set_paused(request, True)


@routes.post(
    "/v1/cron/{name}/resume",
    policy=Policy("admin", (cron_owner,)),
    summary="fire from the next slot on",
    answer=m.Schedule,
    errors={404: "cron_not_found: no such cron schedule"},
)
async def resume_schedule(request: web.Request) -> web.Response:
    return await _set_paused(request, False)


async def _set_paused(request: web.Request, paused: bool) -> web.Response:
    name = (await _existing(request)).name
    changed = await _store(request).set_paused(name, paused, now_ms())
    if changed is None:
        raise CronNotFound(f"no cron schedule named {name!r}")
    return json_response(changed.model_dump())


@routes.post(
    "/v1/cron/{name}/trigger",
    policy=Policy("admin", (cron_owner,)),
    summary="enqueue one job of the schedule now",
    answer=m.ScheduleTriggered,
    ok=202,
    errors={404: "cron_not_found: no such cron schedule"},
)
async def trigger_schedule(request: web.Request) -> web.Response:
    """Enqueue one job of the schedule now (id ``cron:<name>:<now>:manual``), paused or not."""
    schedule = await _existing(request)
    ids = await engine_call(fire_now(request.app[GATE].engine, schedule, [now_ms()], manual=True))
    return json_response({"name": schedule.name, "queue": schedule.queue, "id": ids[0]}, status=202)
