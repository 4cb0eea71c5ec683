"""Workers: every process alive — worker pools, HTTP workers, dispatchers, relays, schedulers, canaries,
gateways and dashboards — from their presence records (:mod:`jqruntime.stores.presence`): host and pid,
what each serves, busy and total slots, jobs processed, uptime, version and state; what each worker runs
now (the running jobs of every queue, grouped by the worker that claimed them) and the queues it is silent
on (:func:`jqruntime.stores.presence.silent_queues`); and the scheduler instances with the queues each
keeps. An admin quiets a worker pool (it claims nothing more and finishes what it runs), lets it claim
again, or stops it (a graceful shutdown, confirmed first): a control the pool reads at its next heartbeat,
audited."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from jqcore.clock import now_ms
from jqengine import Engine, JobInfo, RedisClient
from jqruntime.authz import Policy, Touch, owner
from jqruntime.http import HttpError
from jqruntime.stores import membership, presence
from jqruntime.stores.presence import Alive, alive, send_control
from jqruntime.tokens import Token
from jqweb.context import WEB
from jqweb.narrow import everything
from jqweb.pages.jobs import confirm_page
from jqweb.render import act, form, page
from jqweb.routes import Pages
from jqweb.security import READ, Principal, principal, visible

__all__ = ["ROLES", "routes"]

routes = Pages()

ROLES = {
    "worker": "worker pool",
    "http-worker": "HTTP worker",
    "dispatcher": "dispatcher",
    "relay": "relay",
    "scheduler": "scheduler",
    "canary": "canary",
    "gate": "gateway",
    "web": "dashboard",
}
"""Every kind of process that announces itself (its presence role → what the page calls it)."""
SHOW_PER_WORKER = 100
"""Running jobs listed per worker in the HTML table (the JSON has them all)."""
RUNNING_PER_QUEUE = 200
"""Running jobs read per queue (the oldest lease deadlines first)."""
READS_AT_ONCE = 32
UNNAMED = "(no worker named)"
"""Running jobs claimed without a worker identity (tools, tests, old workers) are listed under this."""


async def _running(engine: Engine, queues: list[str]) -> tuple[list[JobInfo], list[str]]:
    """The running jobs of every queue (at most ``RUNNING_PER_QUEUE`` each) and the queues cut short."""
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def one(queue: str) -> tuple[list[JobInfo], bool]:
        async with gate:
            ids, total = await engine.reads.list_ids(queue, "running", 0, RUNNING_PER_QUEUE)
            jobs = await engine.reads.get_jobs(queue, ids) if ids else []
        return [j for j in jobs if j is not None], total > len(ids)

    found = await asyncio.gather(*(one(q) for q in queues))
    jobs = [j for js, _ in found for j in js]
    return jobs, [q for q, (_, cut) in zip(queues, found, strict=True) if cut]


def _job_row(job: JobInfo, now: int) -> dict[str, Any]:
    return {
        "queue": job.queue,
        "id": job.id,
        "kind": job.kind,
        "attempt": job.attempt,
        "started_at": job.started_at,
        "lease_deadline": job.lease_deadline,
        "lease_over": job.lease_deadline is not None and job.lease_deadline < now,
        "cancel_requested": job.cancel_requested,
    }


def _workers(
    alive: list[str], jobs: list[JobInfo], silent: dict[str, list[str]] | None = None
) -> list[dict[str, Any]]:
    """One row per worker: the announced ones (alive), any other that holds a running job, and those
    ``silent`` names (name → the queues it is silent on)."""
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    now = now_ms()
    for job in sorted(jobs, key=lambda j: (j.started_at or 0, j.queue, j.id)):
        by_worker[job.worker or UNNAMED].append(_job_row(job, now))
    silent = silent or {}
    names = sorted(set(alive) | set(by_worker) | set(silent))
    return [
        {"name": n, "alive": n in alive, "jobs": by_worker.get(n, []), "silent": silent.get(n, [])}
        for n in names
    ]


async def _silent(engine: Engine, client: RedisClient, queues: list[str]) -> dict[str, list[str]]:
    """Each claiming process silent on some of ``queues`` → those queues (judged against their signals)."""
    claimers = await presence.claimers(client)
    served = sorted({q for c in claimers for q in c.last_claim} & set(queues))
    signals = await engine.reads.queue_signals(served)
    waited = {s.queue: s.oldest_pending_age_ms for s in signals}
    paused = {s.queue for s in signals if s.paused}
    now = now_ms()
    found = {c.name: presence.silent_queues(c, now, waited, paused) for c in claimers}
    return {name: queues for name, queues in found.items() if queues}


def _schedulers(
    groups: dict[str, dict[str, str]], queues: list[str], records: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each live instance of each group with the queues it keeps: as its own presence record says (it
    applies its ``JOBQ_SCHEDULER_QUEUES`` patterns), else the assignment over every queue."""
    rows = []
    for group, members in groups.items():
        names = sorted(members)
        for member in names:
            record = records.get(member)
            if record is not None:
                owned = [q for q in record.get("queues", []) if q in queues]
                count = int(record.get("owned", len(owned)))
            else:
                owned = membership.owned_by(member, names, queues)
                count = len(owned)
            rows.append(
                {
                    "group": group,
                    "member": member,
                    "note": members[member],
                    "owned": owned,
                    "count": count,
                    "reported": record is not None,
                }
            )
    return rows


def _mine(p: Principal, served: list[str]) -> bool:
    """Whether the token may see this process's name: every queue it serves is one of the token's."""
    return everything(p) or (bool(served) and all(p.allows_queue(q) for q in served))


def process_row(a: Alive, p: Principal, now: int, n: int) -> dict[str, Any]:
    """A process as the page shows it; one serving a queue the token may not see is counted, not named
    (its name says where another team runs), and shows only the token's queues."""
    r = a.record
    served = [str(q) for q in r.get("queues", [])] or sorted(k[2:] for k in r if k.startswith("q:"))
    if a.role == "worker" and not served:  # a record-less pool: its queues are in its name
        served = [q for q in a.name.split(":", 2)[-1].split(",") if q] if a.name.count(":") >= 2 else []
    named = _mine(p, served)
    started = r.get("started_ms")
    return {
        "role": a.role,
        "kind": ROLES[a.role],
        "name": a.name if named else f"{ROLES[a.role]} {n}",
        "named": named,
        "host": r.get("host") if named else None,
        "pid": r.get("pid") if named else None,
        "queues": [q for q in served if p.allows_queue(q)],
        "topics": r.get("topics", []) if everything(p) else [],
        "held": r.get("held", []) if everything(p) else [],
        "busy": r.get("busy"),
        "slots": r.get("slots"),
        "processed": r.get("processed"),
        "state": r.get("state") or ("running" if r else "alive"),
        "beat_ms": a.beat_ms,
        "started_ms": started,
        "uptime_ms": now - int(started) if started else None,
        "version": r.get("version"),
        "detail": _detail(a.role, r) if named else "",
        "asked": a.control.get("action") if a.control else None,
        "asked_by": a.control.get("by") if a.control else None,
        "can_control": a.role == "worker" and named and p.admin and bool(started),
    }


def _detail(role: str, r: dict[str, Any]) -> str:
    """What else a kind's record says, in a few words."""
    if role == "scheduler":
        return f"group {r.get('group', '?')}, keeps {r.get('owned', 0)} queues"
    if role == "canary":
        healthy, every = r.get("healthy", 0), r.get("interval_s", "?")
        return f"{healthy} of {r.get('partitions', 0)} partitions healthy, a round every {every} s"
    if role == "gate":
        return " ".join(x for x in (f"zone {r['az']}" if r.get("az") else "", f"port {r.get('port')}") if x)
    waiting = int(r.get("busy") or 0) - int(r.get("running") or 0)
    if role == "worker" and "running" in r and waiting > 0:
        return f"{waiting} claimed and waiting for a slot (concurrency {r.get('concurrency')})"
    return ""


async def processes(request: web.Request) -> list[dict[str, Any]]:
    """Every live process the token may see (counted where it may not see the name)."""
    w, p = request.app[WEB], principal(request)
    found = await asyncio.gather(*(alive(w.client, role) for role in ROLES))
    now, rows = now_ms(), []
    for procs in found:
        rows += [process_row(a, p, now, i + 1) for i, a in enumerate(procs)]
    return rows


@routes.get("/workers", policy=READ)
async def workers(request: web.Request) -> web.Response:
    w = request.app[WEB]
    engine = w.engine
    procs = await processes(request)
    queues = visible(request, await engine.reads.queues())
    jobs, cut = await _running(engine, queues)
    silent = await _silent(engine, w.client, queues)
    if not everything(principal(request)):  # only the workers listed anyway (by their jobs) show theirs
        silent = {name: qs for name, qs in silent.items() if any(j.worker == name for j in jobs)}
    groups = await membership.groups(w.client)
    records = {
        str(r.record.get("member")): r.record
        for r in await alive(w.client, "scheduler")
        if r.record.get("member")
    }
    for r in procs:  # the silent flag beside each claiming process the token may name
        r["silent"] = silent.get(r["name"], []) if r["named"] else []
    pools = [r["name"] for r in procs if r["role"] == "worker"]
    by_role: dict[str, list[str]] = {role: [] for role in ROLES}
    for r in procs:
        by_role[r["role"]].append(r["name"])
    context = {
        "processes": by_role,
        "rows": procs,
        "kinds": ROLES,
        "workers": _workers(pools, jobs, silent),
        "running": len(jobs),
        "running_cut": cut,
        "per_queue": RUNNING_PER_QUEUE,
        "show_per_worker": SHOW_PER_WORKER,
        "unnamed": UNNAMED,
        "schedulers": _schedulers(groups, queues, records),
        "queues": len(queues),
    }
    return page(request, "workers.html", context)


# ---- quiet, resume, stop a worker pool --------------------------------------------------------------
async def _pool(request: web.Request) -> Alive:
    """The live worker pool the path names (404 ``worker_not_found``; one that writes no record, of an
    older release, cannot be asked either)."""
    name = request.match_info["name"]
    for a in await alive(request.app[WEB].client, "worker"):
        if a.name == name and a.record.get("started_ms"):
            return a
    raise HttpError(404, "worker_not_found", f"no live worker pool {name[:200]!r} (it may have stopped)")


async def pool_owner(request: web.Request, _: Token) -> Iterable[Touch]:
    """The queues the pool serves: a token acts on a pool only when it may act on every one of them."""
    a = await _pool(request)
    return [owner(str(q), f"worker pool {a.name!r}") for q in a.record.get("queues", [])] or [
        Touch("every_queue", where="a worker pool that names no queue")
    ]


WORDS = {
    "quiet": "quieted: it claims nothing more and finishes what it runs",
    "resume": "claims again",
    "stop": "asked to stop: it finishes what it runs (within its grace period) and exits",
}


async def _control(request: web.Request, action: str) -> web.Response:
    w = request.app[WEB]
    pool = await _pool(request)
    fields = await form(request)
    back = f"{w.base}/workers"
    if action == "stop" and fields.get("confirm") != "stop":
        return confirm_page(
            request,
            action="stop",
            question=(
                f"Stop worker pool {pool.name}? It claims nothing more, finishes what it runs within its "
                "grace period and exits (its supervisor may start it again)."
            ),
            count=1,
            matched=None,
            url=f"/workers/{quote(pool.name, safe='')}/stop",
            fields=[],
            next_url=fields.get("next") or back,
            button="Yes, stop it",
            confirm="stop",
        )
    who = principal(request).who
    started = int(pool.record["started_ms"])

    async def run() -> int:
        asked = None if action == "resume" else action
        await send_control(w.client, "worker", pool.name, asked, started, who)  # type: ignore[arg-type]
        return 0

    every_s = pool.record.get("every_s", 5)
    return await act(
        request,
        f"worker.{action}",
        pool.name,
        run,
        done=lambda _: f"worker pool {pool.name} {WORDS[action]} (at its next heartbeat, within {every_s} s)",
        back=back,
        next_url=fields.get("next"),
    )


@routes.post("/workers/{name}/quiet", policy=Policy("admin", (pool_owner,)))
async def quiet(request: web.Request) -> web.Response:
    return await _control(request, "quiet")


@routes.post("/workers/{name}/resume", policy=Policy("admin", (pool_owner,)))
async def resume(request: web.Request) -> web.Response:
    return await _control(request, "resume")


@routes.post("/workers/{name}/stop", policy=Policy("admin", (pool_owner,)))
async def stop(request: web.Request) -> web.Response:
    return await _control(request, "stop")
