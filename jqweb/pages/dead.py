"""Dead letters: how many errored jobs each queue holds, one queue's dead jobs grouped by their error
(the digest of its class and message, :func:`jqcore.events.failure`: what ``jobq history errors`` and
``jobq dead ls`` group by) and listed with their last error (paged, or one error's), and retry (back to
pending with fresh attempts) or purge (deleted; confirmed with the count first) of all of them, of one
error's ("retry these") or of the selected ones."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from aiohttp import web

from jqcore.events import Failure, failure
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

GROUP_SCAN = 1000
"""The newest dead jobs a page groups by error (one pipelined read of three fields each)."""
CHUNK = 500


async def _errors(engine: Engine, queue: str, offset: int, count: int) -> list[tuple[str, Failure, str, int]]:
    """(id, its failure, kind, died at) of ``count`` dead jobs from ``offset``, newest first."""
    ids, _ = await engine.reads.list_ids(queue, "dead", offset, count, newest=True)
    rows = await engine.reads.job_fields(queue, ids, ("kind", "last_error", "finished_at"))
    out = []
    for job_id, (kind, error, died) in zip(ids, rows, strict=True):
        if kind is None:  # collected between the two reads
            continue
        text = error.decode(errors="replace") if error else None
        out.append((job_id, failure(text), kind.decode(), int(died or 0)))
    return out


def group_errors(found: list[tuple[str, Failure, str, int]]) -> list[dict[str, Any]]:
    """The dead jobs by error digest, the most frequent first: class, message, kinds, count, newest."""
    groups: dict[str, dict[str, Any]] = {}
    for job_id, f, kind, died in found:
        g = groups.setdefault(
            f.digest,
            {
                "digest": f.digest,
                "error": f.error,
                "message": f.message,
                "kinds": [],
                "count": 0,
                "last_at": 0,
                "example": job_id,
            },
        )
        g["count"] += 1
        if kind not in g["kinds"]:
            g["kinds"].append(kind)
        g["last_at"] = max(g["last_at"], died)
    return sorted(groups.values(), key=lambda g: (-g["count"], -g["last_at"], g["digest"]))


async def digest_ids(engine: Engine, queue: str, digest: str, most: int) -> list[str]:
    """Every dead job of ``queue`` whose error has ``digest`` (the whole list read :data:`CHUNK` at a time),
    stopping once more than ``most`` were found."""
    out: list[str] = []
    offset = 0
    while len(out) <= most:
        found = await _errors(engine, queue, offset, CHUNK)
        out += [job_id for job_id, f, _, _ in found if f.digest == digest]
        if not found:
            break
        offset += CHUNK
    return out


def _digest(data: Mapping[str, str], code: str = "form_invalid") -> str | None:
    raw = data.get("digest", "").strip()
    if not raw:
        return None
    if len(raw) != 12 or any(c not in "0123456789abcdef" for c in raw):
        raise HttpError(400, code, f"digest: 12 hex digits (an error's digest), not {raw[:40]!r}")
    return raw


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
    digest = _digest(request.query, "query_invalid")
    rows: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    scanned = 0
    if queue is not None:
        found = await _errors(engine, queue, 0, GROUP_SCAN)
        scanned, groups = len(found), group_errors(found)
        if digest is None:
            rows = [job_row(j) for j in await engine.reads.dead_list(queue, offset, size)]
        else:  # one error's: the newest of them
            ids = (await digest_ids(engine, queue, digest, offset + size))[offset : offset + size]
            rows = [job_row(j) for j in await engine.reads.get_jobs(queue, ids) if j is not None]
    ctx = {
        "counts": counts,
        "queue": queue,
        "digest": digest,
        "groups": groups,
        "scanned": scanned,
        "dead": next((c["dead"] for c in counts if c["queue"] == queue), 0),
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
    digest = _digest(data)
    every = data.get("all") == "1" and digest is None
    if digest is not None:
        ids = await digest_ids(engine, queue, digest, w.settings.bulk_limit)
        if len(ids) > w.settings.bulk_limit:
            raise too_many(len(ids), w.settings.bulk_limit)
    else:
        ids = [] if every else _ids(data, queue)
    dead_now = (await engine.reads.depth(queue)).errored
    if every and dead_now > w.settings.bulk_limit:
        raise too_many(dead_now, w.settings.bulk_limit)
    said = f"{queue}: error {digest}" if digest else queue if every else f"{queue}: {len(ids)} selected"

    return await act(
        request,
        "dead.retry",
        said,
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
    digest = _digest(data)
    every = data.get("all") == "1" and digest is None
    if digest is not None:
        ids = await digest_ids(engine, queue, digest, w.settings.bulk_limit)
    else:
        ids = [] if every else _ids(data, queue)
    count = len(ids) if digest is not None else await _purge_count(engine, queue, ids)
    if count > w.settings.bulk_limit:
        raise too_many(count, w.settings.bulk_limit)
    next_url = data.get("next") or _back(w.base, queue)
    confirmed = confirm_count(data)
    if confirmed is None:
        what = (
            f"dead jobs of {queue} with error {digest}"
            if digest
            else f"dead jobs of {queue}"
            if every
            else f"selected dead jobs of {queue}"
        )
        again = [("digest", digest)] if digest else [("all", "1")] if every else [("id", i) for i in ids]
        return confirm_page(
            request,
            action="purge",
            question=f"Purge {count:,} {what}? They are deleted for good.",
            count=count,
            matched=count,
            url=f"/dead/{quote(queue, safe='')}/purge",
            fields=again,
            next_url=next_url,
        )
    if digest is not None and count > confirmed:
        raise HttpError(
            409, "confirm_stale", f"{count:,} jobs have this error now, {confirmed:,} were confirmed: again"
        )
    said = f"{queue}: error {digest}" if digest else queue if every else f"{queue}: {len(ids)} selected"

    # everything: the oldest ``confirmed`` (a job that died after the confirmation stays)
    return await act(
        request,
        "dead.purge",
        said,
        lambda: _in_batches(engine.admin.dead_purge, queue, ids, confirmed if every else None),
        done=lambda n: f"{n:,} dead jobs of {queue} purged",
        back=_back(w.base, queue),
        next_url=next_url,
    )
