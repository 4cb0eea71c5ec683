"""Workers: every process alive (worker pools, gateways, dashboards announce themselves in Redis), what
each worker runs now (the running jobs of every queue, grouped by the worker that claimed them) and the
queues it is silent on (:func:`jqruntime.stores.presence.silent_queues`), and the scheduler instances with
the queues each owns (rendezvous hashing over the group's live members)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from aiohttp import web

from jqcore.clock import now_ms
from jqengine import Engine, JobInfo, RedisClient
from jqruntime.stores import membership, presence
from jqruntime.stores.presence import count_alive
from jqweb.context import WEB
from jqweb.narrow import everything
from jqweb.render import page
from jqweb.routes import Pages
from jqweb.security import READ, principal, visible

__all__ = ["routes"]

routes = Pages()

ROLES = ("worker", "gate", "web")
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


def _schedulers(groups: dict[str, dict[str, str]], queues: list[str]) -> list[dict[str, Any]]:
    rows = []
    for group, members in groups.items():
        names = sorted(members)
        for member in names:
            owned = membership.owned_by(member, names, queues)
            rows.append({"group": group, "member": member, "note": members[member], "owned": owned})
    return rows


@routes.get("/workers", policy=READ)
async def workers(request: web.Request) -> web.Response:
    w = request.app[WEB]
    engine = w.engine
    processes = {role: sorted(await count_alive(w.client, role)) for role in ROLES}
    if not everything(principal(request)):  # names say where other teams run: counted, not named
        processes = {
            role: [f"{role} {i + 1}" for i in range(len(names))] for role, names in processes.items()
        }
    queues = visible(request, await engine.reads.queues())
    jobs, cut = await _running(engine, queues)
    silent = await _silent(engine, w.client, queues)
    if not everything(principal(request)):  # only the workers listed anyway (by their jobs) show theirs
        silent = {name: qs for name, qs in silent.items() if any(j.worker == name for j in jobs)}
    groups = await membership.groups(w.client)
    context = {
        "processes": processes,
        "workers": _workers(processes["worker"], jobs, silent),
        "running": len(jobs),
        "running_cut": cut,
        "per_queue": RUNNING_PER_QUEUE,
        "show_per_worker": SHOW_PER_WORKER,
        "unnamed": UNNAMED,
        "schedulers": _schedulers(groups, queues),
        "queues": len(queues),
    }
    return page(request, "workers.html", context)
