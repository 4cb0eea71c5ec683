"""Jobs: search (every filter in the URL; live jobs scanned a bounded number per request, or the history
tables) with a tab per state and its count, each job's run time and a preview of its arguments; bulk
actions on the selected jobs or on everything matching (retry, cancel, delete), each confirmed with the
exact count first and offered only where the filter can match a job it changes (no "Cancel all" on
finished jobs)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from jqcore.settings.common import load
from jqcore.settings.pipeline import FarSettings
from jqengine import Engine, Forgotten, JobInfo
from jqruntime.authz import EVERY_QUEUE, Policy, Touch
from jqruntime.authz import queue as queue_touch
from jqruntime.http import HttpError
from jqruntime.kafka import Record, schedule_key
from jqruntime.tokens import Token
from jqweb.context import WEB, Web
from jqweb.render import PAGE_SIZE, act, form, page, query_int
from jqweb.routes import Pages
from jqweb.search import (
    FIELDS,
    FINISHED,
    LIVE_STATES,
    Filters,
    archive_page,
    job_row,
    live_page,
    matching,
    parse_filters,
)
from jqweb.security import principal, search_queue, visible

__all__ = ["ACTIONS", "cancel_one", "confirm_page", "routes"]

routes = Pages()

CANCELABLE = frozenset({"pending", "waiting", "parked", "delayed", "running", "deferred", "scheduled"})
BATCH = 500
COUNTS_AT_ONCE = 32
LIST_STATES: dict[str, frozenset[str]] = {
    "pending": frozenset({"pending", "waiting", "parked"}),
    "delayed": frozenset({"delayed", "deferred"}),
    "far": frozenset({"scheduled"}),
    "running": frozenset({"running"}),
    "done": FINISHED,
    "dead": frozenset({"errored"}),
}
"""The job states each listed state's jobs may be in (what a bulk action on them can change)."""
TABS = (
    ("", "all", ""),
    ("pending", "pending", "pending"),
    ("delayed", "delayed", "delayed"),
    ("far", "far future", "far"),
    ("running", "running", "running"),
    ("done", "finished", "finished"),
    ("dead", "dead", "errored"),
)
"""The state tabs: ``state=``, its label, and the depth field that counts it (``""``: the sum)."""
SCAN_LIMIT = 5000
"""Most live jobs one search request examines (``?scan=`` may ask fewer): a page of matches on a sparse
filter may need several requests; the page says where it stopped and links the next."""


@dataclass(frozen=True)
class Action:
    label: str
    audit: str
    applies: frozenset[str]
    """The job states the action changes."""
    run: Callable[[Web, Sequence[JobInfo], str], Awaitable[int]]
    past: str


def _by_queue(jobs: Sequence[JobInfo]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for j in jobs:
        out[j.queue].append(j.id)
    return out


async def _retry(w: Web, jobs: Sequence[JobInfo], _: str) -> int:
    engine, n = w.engine, 0
    for queue, ids in _by_queue(jobs).items():
        for i in range(0, len(ids), BATCH):
            part = ids[i : i + BATCH]
            n += await engine.admin.dead_retry(queue, part, len(part))
    return n


async def cancel_one(w: Web, engine: Engine, queue: str, job_id: str, reason: str) -> bool:
    """Cancel a job; a far-future one is first tombstoned in the schedule topic (as the gateway does:
    no rebuild of the tier brings it back). Whether anything changed."""
    if await engine.reads.far_run_at(queue, job_id) is not None:
        topic = load(FarSettings).topic
        await w.producer().produce_many([Record(topic, None, schedule_key(queue, job_id))])
    return (await engine.admin.cancel(queue, job_id, reason)).changed


async def _cancel(w: Web, jobs: Sequence[JobInfo], who: str) -> int:
    engine, n = w.engine, 0
    for j in jobs:
        n += await cancel_one(w, engine, j.queue, j.id, f"canceled from the dashboard by {who}")
    return n


async def _delete(w: Web, jobs: Sequence[JobInfo], _: str) -> int:
    engine, n = w.engine, 0
    for queue, ids in _by_queue(jobs).items():
        for i in range(0, len(ids), BATCH):
            got = await engine.admin.forget(queue, ids[i : i + BATCH])
            n += sum(1 for g in got if g is Forgotten.FORGOTTEN)
    return n


ACTIONS = {
    "retry": Action("Retry", "jobs.retry", frozenset({"errored"}), _retry, "retried"),
    "cancel": Action("Cancel", "jobs.cancel", CANCELABLE, _cancel, "canceled"),
    "delete": Action("Delete", "jobs.delete", FINISHED, _delete, "deleted"),
}


# --- search ---------------------------------------------------------------------------------------


def _url(base: str, params: Mapping[str, str]) -> str:
    return f"{base}/jobs?{urlencode(params)}"


async def _exact(engine: Engine, f: Filters) -> list[dict[str, Any]]:
    """The job whose id is exactly the ``id`` filter, in each queue searched (found at once)."""
    if not f.id:
        return []
    queues = [f.queue] if f.queue else await engine.reads.queues()
    out = []
    for queue in await engine.reads.queues_holding(queues, f.id):
        job = await engine.reads.get_job(queue, f.id)
        if job is not None:
            out.append(job_row(job))
    return out


async def _live(request: web.Request, w: Web, f: Filters, ctx: dict[str, Any]) -> None:
    limit, cursor = ctx["limit"], ctx["cursor"]
    budget = query_int(request, "scan", SCAN_LIMIT, 1, SCAN_LIMIT)
    engine = w.engine
    found = await live_page(engine, f, cursor, limit, budget)
    ctx.update(rows=found.rows, examined=found.examined, scan=budget, stopped_at=found.stopped_at)
    ctx["exact"] = [] if cursor else await _exact(engine, f)
    if found.next_cursor is not None:
        ctx["next_cursor"] = found.next_cursor
        extra = {"scan": str(budget)} if "scan" in request.query else {}
        ctx["next_url"] = _url(w.base, {**f.raw, **extra, "limit": str(limit), "cursor": found.next_cursor})


async def _archive(request: web.Request, w: Web, f: Filters, ctx: dict[str, Any]) -> None:
    history = w.history()
    if history is None:
        ctx["archive_missing"] = True
        return
    rows, after = await archive_page(
        history, f, ctx["cursor"], ctx["limit"], lambda search: w.in_history(request, search)
    )
    ctx["rows"] = rows
    if after is not None:
        ctx["next_cursor"] = after
        ctx["next_url"] = _url(w.base, {**f.raw, "limit": str(ctx["limit"]), "cursor": after})


def possible_states(f: Filters) -> frozenset[str]:
    """The job states the filter's jobs may be in."""
    if f.accepted is not None:
        return f.accepted
    return frozenset().union(*(LIST_STATES[s] for s in f.lists))


def offered(f: Filters) -> list[str]:
    """The bulk actions that can change a job this search matches (live jobs only)."""
    if f.source != "live":
        return []
    states = possible_states(f)
    return [name for name, a in ACTIONS.items() if a.applies & states]


async def _depths(engine: Engine, queues: Sequence[str]) -> dict[str, int]:
    """Jobs per depth field summed over ``queues`` (the tabs' counts)."""
    gate = asyncio.Semaphore(COUNTS_AT_ONCE)

    async def one(queue: str) -> dict[str, Any]:
        async with gate:
            return (await engine.reads.depth(queue)).as_dict()

    total: dict[str, int] = defaultdict(int)
    for d in await asyncio.gather(*(one(q) for q in queues)):
        for field in ("pending", "delayed", "far", "running", "finished", "errored"):
            total[field] += int(d.get(field) or 0)
    total["finished"] += total["errored"]  # depth's "finished" leaves the dead out; the done list has them
    return total


async def tabs(request: web.Request, w: Web, f: Filters) -> list[dict[str, Any]]:
    """A tab per listed state with its count (over the filter's queue, else every visible queue), each
    linking to the same search in that state."""
    known = visible(request, await w.engine.reads.queues())
    queues = [f.queue] if f.queue else known
    counts = await _depths(w.engine, [q for q in queues if q in known]) if f.source == "live" else {}
    base = {k: v for k, v in f.raw.items() if k not in ("state", "cursor")}
    out = []
    for state, label, field in TABS:
        every = sum(counts.get(x, 0) for x in ("pending", "delayed", "far", "running", "finished"))
        n = counts.get(field) if field else every
        url = _url(w.base, {**base, **({"state": state} if state else {})})
        out.append({"state": state, "label": label, "count": n if counts else None, "url": url})
    return out


@routes.get("/jobs", policy=Policy("read", (search_queue,)))
async def jobs(request: web.Request) -> web.Response:
    w = request.app[WEB]
    f = parse_filters(request.query)
    ctx: dict[str, Any] = {
        "filters": f.raw,
        "describe": f.describe(),
        "source": f.source,
        "states": [s for s in LIVE_STATES if s],
        "fields": list(FIELDS),
        "limit": query_int(request, "limit", PAGE_SIZE, 1, 500),
        "cursor": request.query.get("cursor") or None,
        "rows": [],
        "exact": [],
        "examined": None,
        "scan": None,
        "stopped_at": None,
        "next_cursor": None,
        "next_url": None,
        "archive_missing": False,
        "can_act": principal(request).admin,
        "actions": offered(f),
        "tabs": await tabs(request, w, f),
        "queues": visible(request, await w.engine.reads.queues()),
    }
    if f.source == "archive":
        await _archive(request, w, f, ctx)
    else:
        await _live(request, w, f, ctx)
    return page(request, "jobs.html", ctx)


# --- bulk -----------------------------------------------------------------------------------------


def _selected(data: Mapping[str, str]) -> list[tuple[str, str]]:
    out = []
    for item in data.get("id", "").replace(",", "\n").split():
        queue, slash, job_id = item.partition("/")
        if not slash or not queue or not job_id:
            raise HttpError(400, "form_invalid", f"id: each selected job is <queue>/<id>, not {item[:80]!r}")
        out.append((queue, job_id))
    return out


async def _selected_jobs(engine: Engine, pairs: Sequence[tuple[str, str]]) -> list[JobInfo]:
    by_queue: dict[str, list[str]] = defaultdict(list)
    for queue, job_id in dict.fromkeys(pairs):
        by_queue[queue].append(job_id)
    out: list[JobInfo] = []
    for queue, ids in by_queue.items():
        out += [j for j in await engine.reads.get_jobs(queue, ids) if j is not None]
        missing = set(ids) - {j.id for j in out if j.queue == queue}
        out += [j for j in await engine.reads.far_jobs(queue, sorted(missing)) if j is not None]
    return out


@dataclass
class Targets:
    jobs: list[JobInfo]
    matched: int
    what: str
    """What was asked for: ``3 selected jobs`` or ``jobs matching queue=… state=dead``."""
    fields: list[tuple[str, str]]
    """The form fields naming the same jobs again (for the confirmation)."""


async def _targets(w: Web, data: Mapping[str, str], action: Action) -> Targets:
    engine = w.engine
    if data.get("all") == "1":
        f = parse_filters(data, "form_invalid")
        if f.source != "live":
            raise HttpError(400, "form_invalid", "source: bulk actions change live jobs (source=live)")
        found, matched = await matching(engine, f, action.applies, w.settings.bulk_limit)
        fields = [("all", "1"), *f.raw.items()]
        return Targets(found, matched, f"jobs matching {f.describe()}", fields)
    pairs = _selected(data)
    if not pairs:
        raise HttpError(400, "form_invalid", "select jobs (id=<queue>/<id>) or send all=1 with the filters")
    jobs = await _selected_jobs(engine, pairs)
    found = [j for j in jobs if j.state in action.applies]
    fields = [("id", f"{q}/{i}") for q, i in dict.fromkeys(pairs)]
    return Targets(found, len(jobs), f"selected jobs ({len(pairs)} selected)", fields)


def too_many(count: int, limit: int) -> HttpError:
    more = "more than " if count > limit else ""
    return HttpError(
        400, "too_many", f"{more}{limit:,} jobs match; at most {limit:,} change at once: narrow the filter"
    )


def confirm_count(data: Mapping[str, str]) -> int | None:
    """The count a confirmation carries back (None: not confirmed yet)."""
    raw = data.get("confirm")
    if raw is None:
        return None
    if not raw.isdigit():
        raise HttpError(400, "form_invalid", f"confirm: the count confirmed, not {raw[:40]!r}")
    return int(raw)


def confirm_page(
    request: web.Request,
    *,
    action: str,
    question: str,
    count: int,
    matched: int | None,
    url: str,
    fields: Sequence[tuple[str, str]],
    next_url: str,
    button: str = "",
    confirm: str = "",
) -> web.Response:
    """The confirmation: what would change and how many, and the form that does it (``confirm=count``,
    or ``confirm``'s word for an action that changes no jobs); ``button``: what its button says
    (default ``Yes, <action> <count> jobs``)."""
    base = request.app[WEB].base
    if not next_url.startswith(f"{base}/") or next_url.startswith("//") or "\\" in next_url:
        next_url = f"{base}/jobs"  # shown as a link: only a page of the dashboard
    info = {
        "action": action,
        "count": count,
        "matched": matched,
        "question": question,
        "button": button or f"Yes, {action} {count:,} jobs",
        "url": url,
        "fields": [[k, v] for k, v in fields] + [["next", next_url], ["confirm", confirm or str(count)]],
        "next": next_url,
    }
    return page(request, "confirm.html", {"confirm": info})


async def bulk_targets(request: web.Request, _: Token) -> Iterable[Touch]:
    """The queue of each selected job (``id=<queue>/<id>``), or with ``all=1`` the filter's queue — else
    every queue (a token held to some queues acts on one of them at a time)."""
    data = await form(request)
    if data.get("all") == "1":
        named = data.get("queue")
        return [queue_touch(named, "queue")] if named else [EVERY_QUEUE]
    return [queue_touch(q, f"id={q}/{i}") for q, i in dict.fromkeys(_selected(data))]


@routes.post("/jobs/bulk", policy=Policy("admin", (bulk_targets,)))
async def bulk(request: web.Request) -> web.Response:
    w = request.app[WEB]
    data = await form(request)
    name = data.get("action", "")
    action = ACTIONS.get(name)
    if action is None:
        raise HttpError(400, "form_invalid", f"action: one of {', '.join(ACTIONS)}, not {name[:40]!r}")
    t = await _targets(w, data, action)
    count, limit = len(t.jobs), w.settings.bulk_limit
    if count > limit:
        raise too_many(count, limit)
    next_url = data.get("next") or f"{w.base}/jobs"
    confirmed = confirm_count(data)
    if confirmed is None:
        return confirm_page(
            request,
            action=name,
            question=f"{action.label} {count:,} {t.what}?",
            count=count,
            matched=t.matched,
            url="/jobs/bulk",
            fields=[("action", name), *t.fields],
            next_url=next_url,
        )
    if count > confirmed:
        raise HttpError(
            409, "confirm_stale", f"{count:,} jobs match now, {confirmed:,} were confirmed: confirm again"
        )
    who = principal(request).who

    async def run() -> int:
        return await action.run(w, t.jobs, who)

    return await act(
        request,
        action.audit,
        t.what,
        run,
        done=lambda n: f"{n:,} jobs {action.past}",
        back=f"{w.base}/jobs",
        next_url=next_url,
    )
