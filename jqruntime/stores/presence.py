"""Processes announce themselves (gateways, worker pools, dispatchers, dashboards) so ``jobq status`` can
count them: a heartbeat into a sorted set per role every :data:`BEAT_S`; members older than
:data:`ALIVE_S` no longer count, members older than :data:`FORGET_S` are dropped by the next beat.

**Silent workers.** A process that claims jobs — a worker pool, the push dispatcher, an HTTP worker (noted
by the gateway it claims at, :func:`seen`) — keeps a *record* beside its heartbeat
(:func:`jqcore.keys.presence_record_key`): for each queue it serves, when it last claimed a job from it
(or began serving it), and its busy and total slots. A pool writes it with its heartbeat, in the same
round trip (a claim only sets a number in memory); it expires :data:`FORGET_S` after the last beat, so the
record of a process killed without leaving goes by itself.

:func:`silent_queues` is the one judgment of a silent worker, O(1) per worker and queue from that record
and the queue's oldest pending age (:mod:`jqengine.signals`): ``jobq status``, the dashboard's Workers
page and the scheduler's ``jobq_worker_silent_seconds`` (read by the alert ``JobqWorkerSilent``) all call
it. A worker whose event loop is stuck stops beating as it stops claiming: its record, frozen at the last
beat, is judged all the same (``docs/operations.md#jobqworkersilent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jqcore.aio import cancel_and_wait
from jqcore.clock import now_ms
from jqcore.keys import presence_key, presence_record_key
from jqengine import RedisClient, text
from jqruntime.lifecycle import Service

__all__ = [
    "ALIVE_S",
    "BEAT_S",
    "CLAIMERS",
    "FORGET_S",
    "SEEN_ALIVE_S",
    "SILENT_AFTER_S",
    "Claimer",
    "Presence",
    "claimers",
    "count_alive",
    "process_name",
    "seen",
    "silent_queues",
]

BEAT_S = 5.0
"""How often a process beats (and a claiming one writes its record)."""
ALIVE_S = 20.0
"""A process whose last beat is older than this is not counted alive (four beats missed)."""
SEEN_ALIVE_S = 60.0
"""The same for HTTP workers: a gateway notes a name at most every 5 s, and a long-poll lasts up to 30 s."""
FORGET_S = 3600.0
"""A member silent this long leaves its role's set (at the next beat of any member), and its record
expires: until then ``jobq status`` shows a process that stopped beating without leaving."""
SILENT_AFTER_S = 300.0
"""A worker that claimed nothing from a queue it serves for this long, while that queue's next job waited
at least as long, is silent (:func:`silent_queues`). Twice the queue's wait is the backlog alert's (600 s):
a silent worker is flagged before its backlog pages."""
CLAIMERS = ("worker", "dispatcher", "http-worker")
"""The roles that claim jobs, and so keep a record."""

_QUEUE = "q:"
"""A record's field per served queue: ``q:<queue>`` → when the process last claimed from it (ms)."""


def process_name(extra: str = "") -> str:
    return f"{socket.gethostname()}:{os.getpid()}" + (f":{extra}" if extra else "")


def alive_s(role: str) -> float:
    """How recent a beat of ``role`` must be to count alive."""
    return SEEN_ALIVE_S if role == "http-worker" else ALIVE_S


Load = Callable[[], tuple[int, int]]
"""A claiming process's busy and total slots now (claimed jobs held, and how many it may hold)."""


class Presence(Service):
    """One process's heartbeat; with ``queues``, also its record (:func:`silent_queues`): :meth:`claimed`
    at each claimed job, ``load`` read at each beat, ``filtered`` for a process that claims only some jobs
    of its queues (a pool's ``filter``: it cannot be judged by their head)."""

    def __init__(
        self,
        client: RedisClient,
        role: str,
        name: str,
        *,
        queues: Sequence[str] = (),
        load: Load | None = None,
        filtered: bool = False,
    ) -> None:
        super().__init__()
        self.client, self.role, self.key, self.name = client, role, presence_key(role), name
        self.record = presence_record_key(role, name)
        self.queues, self._load, self.filtered = tuple(queues), load, filtered
        self.last_claim: dict[str, int] = {}
        """Served queue → when this process last claimed a job from it (its start until the first)."""
        self._task: asyncio.Task[None] | None = None

    def claimed(self, queue: str, at_ms: int) -> None:
        """A job of ``queue`` was claimed at ``at_ms``: noted in memory, written at the next beat."""
        self.last_claim[queue] = at_ms

    async def _start(self) -> None:
        self.last_claim = dict.fromkeys(self.queues, now_ms())
        self._task = asyncio.create_task(self._beat(), name=f"presence:{self.key}")

    async def _beat(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # Redis away: status will show us missing, nothing else
                await self.beat()
            await asyncio.sleep(BEAT_S)

    async def beat(self) -> None:
        """One heartbeat (and the record): one pipelined round trip."""
        now, forget_ms = now_ms(), int(FORGET_S * 1000)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(self.key, {self.name: now})
            pipe.zremrangebyscore(self.key, "-inf", now - forget_ms)
            if self.queues:
                fields: dict[str, int] = {_QUEUE + q: at for q, at in self.last_claim.items()}
                if self._load is not None:
                    fields["busy"], fields["slots"] = self._load()
                if self.filtered:
                    fields["filtered"] = 1
                pipe.hset(self.record, mapping=fields)  # type: ignore[arg-type]
                pipe.pexpire(self.record, forget_ms)
            await pipe.execute()

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)
        with contextlib.suppress(Exception):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.zrem(self.key, self.name)
                pipe.delete(self.record)
                await pipe.execute()


async def count_alive(client: RedisClient, role: str, stale_s: float | None = None) -> list[str]:
    """The names of ``role`` that beat within ``stale_s`` (default :func:`alive_s`)."""
    since = now_ms() - int((alive_s(role) if stale_s is None else stale_s) * 1000)
    return [text(m) for m in await client.zrangebyscore(presence_key(role), since, "+inf")]


async def seen(
    client: RedisClient,
    role: str,
    name: str,
    queue: str | None = None,
    *,
    claimed: bool = False,
    filtered: bool = False,
) -> None:
    """Someone else's heartbeat, noted for it (an HTTP worker seen claiming at a gateway): with ``queue``,
    its record notes that it serves that queue (from now, if not yet noted) or, ``claimed``, that it
    claimed from it now. Members silent for :data:`FORGET_S` are dropped in the same round trip, so names
    chosen by clients cannot pile up."""
    now, forget_ms = now_ms(), int(FORGET_S * 1000)
    record = presence_record_key(role, name)
    async with client.pipeline(transaction=False) as pipe:
        pipe.zadd(presence_key(role), {name: now})
        pipe.zremrangebyscore(presence_key(role), "-inf", now - forget_ms)
        if queue is not None:
            if claimed:
                pipe.hset(record, _QUEUE + queue, now)
            else:
                pipe.hsetnx(record, _QUEUE + queue, now)
            if filtered:
                pipe.hset(record, "filtered", 1)
        pipe.pexpire(record, forget_ms)
        await pipe.execute()


@dataclass(frozen=True, slots=True)
class Claimer:
    """A claiming process as its heartbeat and record say (:func:`claimers`)."""

    role: str
    name: str
    beat_ms: int
    last_claim: Mapping[str, int] = field(default_factory=dict)
    """Served queue → when it last claimed from it (or began serving it), ms."""
    busy: int | None = None
    slots: int | None = None
    """Claimed jobs held and how many it may hold, at its last beat (None: not said, an HTTP worker)."""
    filtered: bool = False

    def alive(self, now_ms: int) -> bool:
        return now_ms - self.beat_ms <= alive_s(self.role) * 1000

    def as_dict(self, now_ms: int, silent: Sequence[str]) -> dict[str, Any]:
        """The row ``jobq status`` and the dashboard show (``silent``: :func:`silent_queues`)."""
        return {
            "role": self.role,
            "name": self.name,
            "alive": self.alive(now_ms),
            "beat_age_s": round((now_ms - self.beat_ms) / 1000, 1),
            "busy": self.busy,
            "slots": self.slots,
            "filtered": self.filtered,
            "idle_s": {q: round((now_ms - at) / 1000, 1) for q, at in sorted(self.last_claim.items())},
            "silent": list(silent),
        }


def silent_queues(
    c: Claimer,
    now_ms: int,
    waited_ms: Mapping[str, int | None],
    paused: Collection[str] = (),
) -> list[str]:
    """The queues ``c`` is silent on at ``now_ms``: it claimed nothing from one for
    :data:`SILENT_AFTER_S` while that queue's next job waited at least as long (``waited_ms``: each
    queue's oldest pending age, counted from when its head became due; a ``paused`` queue waits on
    purpose).

    Not judged: a process busy at a recent beat (every slot taken: it is not expected to claim, however long
    its jobs run) and a filtered one (it may rightly skip the head). A process that stopped beating — its
    event loop stuck, its Redis connection dead, killed without leaving — is judged by its last record,
    busy or not: it claims nothing any more."""
    if c.filtered or (c.alive(now_ms) and c.busy is not None and c.slots is not None and c.busy >= c.slots):
        return []
    after = SILENT_AFTER_S * 1000
    return sorted(
        q
        for q, at in c.last_claim.items()
        if now_ms - at >= after and (waited_ms.get(q) or 0) >= after and q not in paused
    )


async def claimers(client: RedisClient, roles: Sequence[str] = CLAIMERS) -> list[Claimer]:
    """Every claiming process of ``roles`` with a record (beat within :data:`FORGET_S`), by role and name:
    two pipelined round trips (the sets, then each member's record)."""
    async with client.pipeline(transaction=False) as pipe:
        for role in roles:
            pipe.zrange(presence_key(role), 0, -1, withscores=True)
        sets: list[Any] = await pipe.execute()
    members = [(role, text(m), int(score)) for role, got in zip(roles, sets, strict=True) for m, score in got]
    if not members:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for role, name, _ in members:
            pipe.hgetall(presence_record_key(role, name))
        records: list[Any] = await pipe.execute()
    out = []
    for (role, name, beat), raw in zip(members, records, strict=True):
        record = {text(k): text(v) for k, v in raw.items()}
        if not record:  # expired (forgotten), or a process of a version that keeps none
            continue
        last = {k.removeprefix(_QUEUE): int(v) for k, v in record.items() if k.startswith(_QUEUE)}
        busy, slots = record.get("busy"), record.get("slots")
        out.append(
            Claimer(
                role,
                name,
                beat,
                last,
                int(busy) if busy is not None else None,
                int(slots) if slots is not None else None,
                record.get("filtered") == "1",
            )
        )
    return sorted(out, key=lambda c: (c.role, c.name))
