"""Processes announce themselves so ``jobq status`` and the dashboard's Workers page can list them.

* **Heartbeat** (what counts a process alive): a sorted set per role (``jobq:presence:<role>``: ``worker``,
  ``http-worker``, ``relay``, ``scheduler``, ``canary``, ``dispatcher``, ``gate``, ``web``), member = the
  process's name, score = its last beat (ms), every :data:`BEAT_S`; members older than :data:`ALIVE_S` no
  longer count, members older than :data:`FORGET_S` are dropped by the next beat.
* **Record** (what the process is): beside the heartbeat, in the same round trip, a hash per process
  (:func:`jqcore.keys.presence_record_key`): host, pid, when it started, jobq's version and what the
  process adds of its own through ``facts`` (its queues or topics, busy and total slots, jobs processed,
  its state), each a JSON value; a process that claims jobs also writes, per queue it serves, when it
  last claimed from it (``q:<queue>``), its busy and total slots (``load``) and whether it is
  ``filtered``. It expires :data:`FORGET_S` after the last beat, so the record of a process killed
  without leaving goes by itself. Fields are added, never renamed: a reader takes what it knows.
* **Control** (what the process is asked to do): a worker pool reads :func:`jqcore.keys.control_key` at
  each beat (``quiet``: claim nothing more and finish what runs; ``stop``: shut down gracefully), written
  by the dashboard (:func:`send_control`) for the process's own start (a later process of the same name
  is not asked), and kept a week at most.

**Silent workers.** :func:`silent_queues` is the one judgment of a silent worker, O(1) per worker and queue
from the record of a claiming process (a worker pool, the push dispatcher, an HTTP worker noted by the
gateway it claims at, :func:`seen`) and the queue's oldest pending age (:mod:`jqengine.signals`): ``jobq
status``, the dashboard's Workers page and the scheduler's ``jobq_worker_silent_seconds`` (read by the
alert ``JobqWorkerSilent``) all call it. A worker whose event loop is stuck stops beating as it stops
claiming: its record, frozen at the last beat, is judged all the same
(``docs/operations.md#jobqworkersilent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from jqcore.aio import cancel_and_wait
from jqcore.clock import now_ms
from jqcore.keys import control_key, presence_key, presence_record_key
from jqcore.log import get_logger
from jqcore.release import version
from jqengine import RedisClient, text
from jqruntime.lifecycle import Service

__all__ = [
    "ALIVE_S",
    "BEAT_S",
    "CLAIMERS",
    "CONTROLS",
    "FORGET_S",
    "SEEN_ALIVE_S",
    "SILENT_AFTER_S",
    "Alive",
    "Claimer",
    "Control",
    "Presence",
    "alive",
    "alive_s",
    "claimers",
    "count_alive",
    "process_name",
    "seen",
    "send_control",
    "silent_queues",
]

log = get_logger("jqruntime.presence")

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
CONTROL_TTL_S = 7 * 86_400
"""A control a process never read (it was gone) is dropped after a week."""
Action = Literal["quiet", "stop"]
CONTROLS: tuple[Action, ...] = ("quiet", "stop")


@dataclass(frozen=True)
class Control:
    """What a process was asked to do, by whom and when."""

    action: Action
    by: str
    at_ms: int


def process_name(extra: str = "") -> str:
    return f"{socket.gethostname()}:{os.getpid()}" + (f":{extra}" if extra else "")


def alive_s(role: str) -> float:
    """How recent a beat of ``role`` must be to count alive."""
    return SEEN_ALIVE_S if role == "http-worker" else ALIVE_S


Load = Callable[[], tuple[int, int]]
"""A claiming process's busy and total slots now (claimed jobs held, and how many it may hold)."""


class Presence(Service):
    """One process's heartbeat and record: ``facts`` (called at each beat) adds what the process says of
    itself; with ``queues``, also what :func:`silent_queues` judges: :meth:`claimed` at each claimed job,
    ``load`` read at each beat, ``filtered`` for a process that claims only some jobs of its queues (a
    pool's ``filter``: it cannot be judged by their head); ``on_control`` (called at each beat) gets what
    the process is asked to do now (None: nothing, or asked no more)."""

    def __init__(
        self,
        client: RedisClient,
        role: str,
        name: str,
        *,
        queues: Sequence[str] = (),
        load: Load | None = None,
        filtered: bool = False,
        facts: Callable[[], Mapping[str, Any]] | None = None,
        on_control: Callable[[Control | None], None] | None = None,
    ) -> None:
        super().__init__()
        self.client, self.role, self.key, self.name = client, role, presence_key(role), name
        self.record = presence_record_key(role, name)
        self.queues, self._load, self.filtered = tuple(queues), load, filtered
        self.facts, self.on_control = facts, on_control
        self.started_ms = now_ms()
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
            try:
                await self.beat()
            except Exception as exc:  # Redis away: status will show us missing, nothing else
                log.debug("presence beat failed", role=self.role, error=repr(exc))
            await asyncio.sleep(BEAT_S)

    def describe(self) -> dict[str, Any]:
        """What the process says of itself (the record's JSON fields)."""
        return {
            "role": self.role,
            "name": self.name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_ms": self.started_ms,
            "version": version(),
            "every_s": BEAT_S,
            **(self.facts() if self.facts is not None else {}),
        }

    async def beat(self) -> None:
        """One heartbeat, the record and (with ``on_control``) the control read back: one round trip."""
        now, forget_ms = now_ms(), int(FORGET_S * 1000)
        fields: dict[str, bytes | int] = {k: orjson.dumps(v) for k, v in self.describe().items()}
        if self.queues:
            fields |= {_QUEUE + q: at for q, at in self.last_claim.items()}
            if self._load is not None:
                fields["busy"], fields["slots"] = self._load()
            if self.filtered:
                fields["filtered"] = 1
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(self.key, {self.name: now})
            pipe.zremrangebyscore(self.key, "-inf", now - forget_ms)
            pipe.hset(self.record, mapping=fields)  # type: ignore[arg-type]
            pipe.pexpire(self.record, forget_ms)
            if self.on_control is not None:
                pipe.get(control_key(self.role, self.name))
            replies = await pipe.execute()
        if self.on_control is not None:
            self.on_control(self._control(replies[-1]))

    def _control(self, raw: Any) -> Control | None:
        if not raw:
            return None
        try:
            doc = orjson.loads(raw)
            if doc.get("started_ms") != self.started_ms or doc.get("action") not in CONTROLS:
                return None  # for an earlier process of the same name, or nothing this one knows
            return Control(doc["action"], str(doc.get("by", "")), int(doc.get("at_ms", 0)))
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            return None

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)
        with contextlib.suppress(Exception):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.zrem(self.key, self.name)
                pipe.delete(self.record)
                if self.on_control is not None:
                    pipe.delete(control_key(self.role, self.name))
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


@dataclass(frozen=True)
class Alive:
    """A live process as its heartbeat and record say: ``record`` holds its fields (JSON values read back;
    ``{}`` for a process of an earlier release)."""

    role: str
    name: str
    beat_ms: int
    record: dict[str, Any] = field(default_factory=dict)
    control: dict[str, Any] | None = None
    """The control waiting for it (``action``, ``by``, ``at_ms``), if any."""


async def alive(client: RedisClient, role: str) -> list[Alive]:
    """The live processes of ``role`` (:func:`alive_s`) with their records and pending controls, by name
    (two round trips)."""
    since = now_ms() - int(alive_s(role) * 1000)
    found: list[Any] = await client.zrangebyscore(presence_key(role), since, "+inf", withscores=True)
    beats = sorted((text(m), int(score)) for m, score in found)
    if not beats:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for name, _ in beats:
            pipe.hgetall(presence_record_key(role, name))
            pipe.get(control_key(role, name))
        raw = await pipe.execute()
    out = []
    for i, (name, beat) in enumerate(beats):
        record = {text(k): _value(v) for k, v in raw[2 * i].items()}
        control = _json(raw[2 * i + 1])
        mine = control if control and control.get("started_ms") == record.get("started_ms") else None
        out.append(Alive(role, name, beat, record, mine))
    return out


def _value(raw: Any) -> Any:
    """A record's field: its JSON value (a field written otherwise, as text)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return text(raw)


def _json(raw: Any) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


async def send_control(
    client: RedisClient, role: str, name: str, action: Action | None, started_ms: int, by: str
) -> None:
    """Ask the process ``name`` (the one that started at ``started_ms``) to ``quiet`` or ``stop`` at its
    next beat; None takes a ``quiet`` back (the process claims again)."""
    key = control_key(role, name)
    if action is None:
        await client.delete(key)
        return
    doc = {"action": action, "by": by, "at_ms": now_ms(), "started_ms": started_ms}
    await client.set(key, orjson.dumps(doc), ex=CONTROL_TTL_S)
