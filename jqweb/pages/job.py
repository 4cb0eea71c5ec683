"""One job: its state, times, worker, the args/meta/kind of its envelope, its result exactly as stored,
each attempt's error and traceback, and its timeline across hops (the history tables; else the job's own
attempt records). A job GC removed from Redis is shown as the history last saw it. Actions: cancel,
retry (a dead job), replay (a finished job: a new job with the same kind, args, meta, priority, lease and
expiry, through Kafka)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from jqcore.envelope import decode
from jqcore.errors import EnvelopeError
from jqengine import JobInfo
from jqrecover.replay import ReplayError, replayed
from jqruntime.authz import Policy, Touch, kind, path_queue
from jqruntime.http import HttpError
from jqruntime.kafka import job_record
from jqruntime.tokens import Token
from jqweb.context import WEB, Web
from jqweb.pages.jobs import CANCELABLE, cancel_one
from jqweb.render import act, form, page, wants_json
from jqweb.routes import Pages
from jqweb.search import FINISHED, split_error
from jqweb.security import principal

__all__ = ["routes"]

routes = Pages()


def _where(request: web.Request) -> tuple[str, str]:
    return request.match_info["queue"], request.match_info["id"]


def _here(w: Web, queue: str, job_id: str) -> str:
    return f"{w.base}/jobs/{quote(queue, safe='')}/{quote(job_id, safe='')}"


def _not_found(queue: str, job_id: str) -> HttpError:
    return HttpError(404, "job_not_found", f"no job {job_id!r} in queue {queue!r} (not relayed yet, or GC'd)")


def _envelope(info: JobInfo) -> dict[str, Any] | None:
    if info.envelope is None:
        return None
    try:
        env = decode(info.envelope)
    except EnvelopeError as exc:
        return {"problem": exc.message}
    return {
        "kind": env.kind,
        "args": env.args,
        "meta": dict(env.meta),
        "excl": env.excl,
        "priority": env.priority,
        "enqueued_at": env.enqueued_at,
        "run_at": env.run_at,
        "expires_at": env.expires_at,
        "max_attempts": env.max_attempts,
        "lease_ms": env.lease_ms,
        "graph": dict(env.graph) if env.graph else None,
        "trace": env.trace,
    }


def _attempts(info: JobInfo) -> list[dict[str, Any]]:
    out = []
    for h in info.history:
        error = h.get("error")
        message, traceback = split_error(error if isinstance(error, str) else None)
        out.append({**h, "message": message, "traceback": traceback})
    return out


async def _timeline(request: web.Request, w: Web, queue: str, job_id: str) -> list[dict[str, Any]] | None:
    history = w.history()
    if history is None:
        return None
    entries = await w.in_history(request, lambda: history.timeline(job_id, queue))
    return [dataclasses.asdict(e) for e in entries] or None


async def _archived(request: web.Request, w: Web, queue: str, job_id: str) -> dict[str, Any] | None:
    """The job as the history last saw it, or None (a miss is remembered a few seconds)."""
    history = w.history()
    misses = w.archive_misses()
    if history is None or misses.missed(queue, job_id):
        return None
    snap = await w.in_history(request, lambda: history.current(queue, job_id))
    if snap is None:
        misses.note(queue, job_id)
        return None
    return snap.as_dict()


@routes.get("/jobs/{queue}/{id}", policy=Policy("read", (path_queue,)))
async def job_page(request: web.Request) -> web.Response:
    w = request.app[WEB]
    queue, job_id = _where(request)
    info = await w.engine.reads.get_job(queue, job_id)
    # a person's page loads the timeline (a scan of the history's event files) after it showed: the
    # job itself renders from Redis at once; a script asking for JSON gets everything in one answer
    deferred = not wants_json(request)
    ctx: dict[str, Any] = {
        "queue": queue,
        "id": job_id,
        "timeline": None if deferred else await _timeline(request, w, queue, job_id),
        "timeline_deferred": deferred,
        "can_act": principal(request).admin,
    }
    if info is None:
        snapshot = await _archived(request, w, queue, job_id)
        if snapshot is None:
            raise _not_found(queue, job_id)
        ctx.update(source="archive", job=None, archived=snapshot, envelope=None, attempts=[])
        ctx.update(cancelable=False, retryable=False, replayable=False)
        return page(request, "job.html", ctx)
    job = info.as_dict()
    job.pop("envelope", None)
    ctx.update(source="redis", job=job, archived=None, envelope=_envelope(info), attempts=_attempts(info))
    ctx.update(
        cancelable=info.state in CANCELABLE and not info.cancel_requested,
        retryable=info.state == "errored",
        replayable=info.state in FINISHED and info.envelope is not None,
    )
    return page(request, "job.html", ctx)


@routes.get("/jobs/{queue}/{id}/timeline", policy=Policy("read", (path_queue,)))
async def timeline(request: web.Request) -> web.Response:
    """The job's timeline from the history tables (the job page loads it into itself)."""
    w = request.app[WEB]
    queue, job_id = _where(request)
    ctx = {"queue": queue, "id": job_id, "timeline": await _timeline(request, w, queue, job_id)}
    return page(request, "job_timeline.html", ctx, partial="job_timeline_table.html")


async def _existing(w: Web, queue: str, job_id: str) -> JobInfo:
    info = await w.engine.reads.get_job(queue, job_id)
    if info is None:
        raise _not_found(queue, job_id)
    return info


@routes.post("/jobs/{queue}/{id}/cancel", policy=Policy("admin", (path_queue,)))
async def cancel(request: web.Request) -> web.Response:
    w = request.app[WEB]
    queue, job_id = _where(request)
    data = await form(request)
    here = _here(w, queue, job_id)
    outcome: list[str] = []

    async def run() -> int:
        info = await _existing(w, queue, job_id)
        if info.state not in CANCELABLE:
            outcome.append(f"already {info.state}: nothing to cancel")
            return 0
        reason = f"canceled from the dashboard by {principal(request).who}"
        changed = await cancel_one(w, w.engine, queue, job_id, reason)
        outcome.append(
            "cancel requested (it stops at its next lease extension)"
            if info.state == "running"
            else "canceled"
        )
        return int(changed)

    return await act(
        request,
        "jobs.cancel",
        f"{queue}/{job_id}",
        run,
        done=lambda n: f"job {job_id}: {outcome[0] if outcome else n}",
        back=here,
        next_url=data.get("next"),
    )


@routes.post("/jobs/{queue}/{id}/retry", policy=Policy("admin", (path_queue,)))
async def retry(request: web.Request) -> web.Response:
    w = request.app[WEB]
    queue, job_id = _where(request)
    data = await form(request)
    here = _here(w, queue, job_id)

    async def run() -> int:
        info = await _existing(w, queue, job_id)
        if info.state != "errored":
            raise HttpError(409, "job_not_dead", f"job {job_id!r} is {info.state}; only dead jobs retry")
        return await w.engine.admin.dead_retry(queue, [job_id], 1)

    return await act(
        request,
        "jobs.retry",
        f"{queue}/{job_id}",
        run,
        done=lambda n: f"job {job_id}: back to pending" if n else f"job {job_id}: not retried",
        back=here,
        next_url=data.get("next"),
    )


async def replayed_kind(request: web.Request, _: Token) -> Iterable[Touch]:
    """The kind of the job a replay would enqueue again (none: no such job, the handler's 404)."""
    queue, job_id = _where(request)
    info = await request.app[WEB].engine.reads.get_job(queue, job_id)
    return [kind(info.kind, "the job's kind")] if info is not None and info.kind else []


async def _replay(w: Web, queue: str, job_id: str) -> dict[str, Any]:
    info = await _existing(w, queue, job_id)
    try:
        env = replayed(queue, info)
    except ReplayError as exc:
        raise HttpError(exc.http_status, exc.code, exc.message) from exc
    topic, _ = w.sources.routing.route(queue)
    (d,) = await w.producer().produce_many([job_record(topic, env)])
    return {"id": env.id, "topic": d.topic, "partition": d.partition, "offset": d.offset}


@routes.post("/jobs/{queue}/{id}/replay", policy=Policy("admin", (path_queue, replayed_kind)))
async def replay(request: web.Request) -> web.Response:
    w = request.app[WEB]
    queue, job_id = _where(request)
    data = await form(request)
    here = _here(w, queue, job_id)
    made: dict[str, Any] = {}

    async def run() -> int:
        made.update(await _replay(w, queue, job_id))
        return 1

    def done(_: int) -> str:
        return (
            f"job {job_id} replayed as {made['id']} "
            f"({made['topic']} partition {made['partition']} offset {made['offset']})"
        )

    return await act(
        request, "jobs.replay", f"{queue}/{job_id}", run, done=done, back=here, next_url=data.get("next")
    )
