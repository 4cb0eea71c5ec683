"""Dead letters: how many errored jobs each queue holds, one queue's dead jobs with their last error
(paged), and retry (back to pending with fresh attempts) or purge (deleted; confirmed with the count
first) of all of them or of the selected ones."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from aiohttp import web

from jqengine import Engine
from jqruntime.authz import Policy, path_queue
from jqruntime.http import HttpError
from jqweb.context import WEB
from jqweb.pages.jobs import BATCH, confirm_count, confirm_page, too_many
from jqweb.render import PAGE_SIZE, act, form, page, query_int
from jqweb.routes import Pages
from jqweb.search import job_row
from jqweb.security import principal, query_queue, visible

__all__ = ["routes"]

routes = Pages()


async def _known(engine: Engine, queue: str) -> None:
    if queue not in await engine.reads.queues():
        raise HttpError(404, "queue_not_found", f"no queue {queue!r}")


@routes.get("/dead", policy=Policy("read", (query_queue,)))
async def dead(request: web.Request) -> web.Response:
    w = request.app[WEB]
    engine = w.engine
    queue = request.query.get("queue") or None
    offset = query_int(request, "offset", 0)
    size = PAGE_SIZE
    dead_per_queue = await engine.reads.dead_counts(visible(request, await engine.reads.queues()))
    counts = [{"queue": q, "dead": n} for q, n in dead_per_queue.items() if n or q == queue]
    if queue is not None and queue not in {c["queue"] for c in counts}:
        raise HttpError(404, "queue_not_found", f"no queue {queue!r}")
    rows: list[dict[str, Any]] = []
    if queue is not None:
        rows = [job_row(j) for j in await engine.reads.dead_list(queue, offset, size)]
    ctx = {
        "counts": counts,
        "queue": queue,
        "rows": rows,
        "offset": offset,
        "next_offset": offset + size if len(rows) == size else None,
        "can_act": principal(request).admin,
    }
    return page(request, "dead.html", ctx)


def _ids(data: Mapping[str, str], queue: str) -> list[str]:
    """The selected ids (``<id>`` or ``<queue>/<id>``), or 400 when nothing is selected."""
    out = []
    for item in data.get("id", "").replace(",", "\n").split():
        q, slash, job_id = item.rpartition("/")
        if slash and q != queue:
            raise HttpError(400, "form_invalid", f"id: {item[:80]!r} is not a job of queue {queue!r}")
        out.append(job_id)
    if not out:
        raise HttpError(400, "form_invalid", "select dead jobs (id) or send all=1")
    return list(dict.fromkeys(out))


def _back(base: str, queue: str) -> str:
    return f"{base}/dead?queue={quote(queue, safe='')}"


@routes.post("/dead/{queue}/retry", policy=Policy("admin", (path_queue,)))
async def retry(request: web.Request) -> web.Response:
    w = request.app[WEB]
    engine = w.engine
    queue = request.match_info["queue"]
    await _known(engine, queue)
    data = await form(request)
    every = data.get("all") == "1"
    ids = [] if every else _ids(data, queue)
    dead_now = (await engine.reads.depth(queue)).errored
    if every and dead_now > w.settings.bulk_limit:
        raise too_many(dead_now, w.settings.bulk_limit)

    return await act(
        request,
        "dead.retry",
        queue if every else f"{queue}: {len(ids)} selected",
        lambda: _in_batches(engine.admin.dead_retry, queue, ids, dead_now if every else None),
        done=lambda n: f"{n:,} dead jobs of {queue} retried",
        back=_back(w.base, queue),
        next_url=data.get("next"),
    )


DeadOp = Callable[[str, Sequence[str], int], Awaitable[int]]


async def _in_batches(op: DeadOp, queue: str, ids: list[str], oldest: int | None) -> int:
    """Retry or purge (``op``) the dead jobs ``ids``, or, with ``oldest``, that many of the oldest ones,
    :data:`BATCH` per script call; how many it changed."""
    n = 0
    if oldest is not None:
        while n < oldest:
            got = await op(queue, [], min(BATCH, oldest - n))
            n += got
            if got == 0:
                break
        return n
    for i in range(0, len(ids), BATCH):
        part = ids[i : i + BATCH]
        n += await op(queue, part, len(part))
    return n


async def _purge_count(engine: Engine, queue: str, ids: list[str]) -> int:
    if not ids:
        return (await engine.reads.depth(queue)).errored
    return sum(1 for j in await engine.reads.get_jobs(queue, ids) if j is not None and j.state == "errored")


@routes.post("/dead/{queue}/purge", policy=Policy("admin", (path_queue,)))
async def purge(request: web.Request) -> web.Response:
    w = request.app[WEB]
    engine = w.engine
    queue = request.match_info["queue"]
    await _known(engine, queue)
    data = await form(request)
    every = data.get("all") == "1"
    ids = [] if every else _ids(data, queue)
    count = await _purge_count(engine, queue, ids)
    if count > w.settings.bulk_limit:
        raise too_many(count, w.settings.bulk_limit)
    next_url = data.get("next") or _back(w.base, queue)
    confirmed = confirm_count(data)
    if confirmed is None:
        what = f"dead jobs of {queue}" if every else f"selected dead jobs of {queue}"
        return confirm_page(
            request,
            action="purge",
            question=f"Purge {count:,} {what}? They are deleted for good.",
            count=count,
            matched=count,
            url=f"/dead/{quote(queue, safe='')}/purge",
            fields=[("all", "1")] if every else [("id", i) for i in ids],
            next_url=next_url,
        )

    # everything: the oldest ``confirmed`` (a job that died after the confirmation stays)
    return await act(
        request,
        "dead.purge",
        queue if every else f"{queue}: {len(ids)} selected",
        lambda: _in_batches(engine.admin.dead_purge, queue, ids, confirmed if every else None),
        done=lambda n: f"{n:,} dead jobs of {queue} purged",
        back=_back(w.base, queue),
        next_url=next_url,
    )
