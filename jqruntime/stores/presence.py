"""Processes announce themselves so ``jobq status`` and the dashboard's Workers page can list them.

* **Heartbeat** (what counts a process alive): a sorted set per role (``jobq:presence:<role>``: ``worker``,
  ``http-worker``, ``relay``, ``scheduler``, ``canary``, ``dispatcher``, ``gate``, ``web``), member = the
  process's name, score = its last beat (ms), every few seconds; members older than ``stale_s`` no longer
  count. These fields are unchanged from the first release: readers of the sorted set alone go on working.
* **Record** (what the process is): beside the heartbeat, in the same round trip, a hash per process
  (``jqcore.keys.presence_record_key``), each field a JSON value: host, pid, when it started, jobq's
  version, and what the process adds of its own through ``facts`` (its queues or topics, busy and total
  slots, jobs processed, its state). It expires a minute after the last beat, so a killed process leaves
  nothing behind. Fields are added, never renamed: a reader takes what it knows.
* **Control** (what the process is asked to do): a worker pool reads ``jqcore.keys.control_key`` at each
  beat (``quiet``: claim nothing more and finish what runs; ``stop``: shut down gracefully), written by the
  dashboard (:func:`send_control`) for the process's own start (a name reused by a later process, the same
  pid on the same host, is not asked), and kept a week at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Mapping
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
    "CONTROLS",
    "Alive",
    "Control",
    "Presence",
    "alive",
    "count_alive",
    "process_name",
    "seen",
    "send_control",
]

log = get_logger("jqruntime.presence")

RECORD_TTL_MS = 60_000
"""A record outlives its process's last beat this long (a few missed beats keep it)."""
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


class Presence(Service):
    """A process's heartbeat and record; ``facts`` (called at each beat) adds what the process does;
    ``on_control`` (called at each beat) gets what it is asked to do now (None: nothing, or asked no more)."""

    def __init__(
        self,
        client: RedisClient,
        role: str,
        name: str,
        every_s: float = 5.0,
        *,
        facts: Callable[[], Mapping[str, Any]] | None = None,
        on_control: Callable[[Control | None], None] | None = None,
    ) -> None:
        super().__init__()
        self.client, self.role, self.name, self.every_s = client, role, name, every_s
        self.key = presence_key(role)
        self.facts, self.on_control = facts, on_control
        self.started_ms = now_ms()
        self._task: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._beat(), name=f"presence:{self.key}")

    def record(self) -> dict[str, Any]:
        """What the process says of itself (the record's fields)."""
        return {
            "role": self.role,
            "name": self.name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_ms": self.started_ms,
            "version": version(),
            "every_s": self.every_s,
            **(self.facts() if self.facts is not None else {}),
        }

    async def beat(self) -> None:
        """One heartbeat: the sorted set, the record, and (with ``on_control``) the control read back."""
        now = now_ms()
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(self.key, {self.name: now})
            record = presence_record_key(self.role, self.name)
            pipe.hset(record, mapping={k: orjson.dumps(v) for k, v in self.record().items()})
            pipe.pexpire(record, RECORD_TTL_MS)
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

    async def _beat(self) -> None:
        while True:
            try:
                await self.beat()
            except Exception as exc:  # Redis away: status will show us missing, nothing else
                log.debug("presence beat failed", role=self.role, error=repr(exc))
            await asyncio.sleep(self.every_s)

    async def _stop(self) -> None:
        await cancel_and_wait(self._task)
        with contextlib.suppress(Exception):
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.zrem(self.key, self.name)
                pipe.delete(presence_record_key(self.role, self.name))
                if self.on_control is not None:
                    pipe.delete(control_key(self.role, self.name))
                await pipe.execute()


async def count_alive(client: RedisClient, role: str, stale_s: float = 20.0) -> list[str]:
    since = now_ms() - int(stale_s * 1000)
    return [
        m.decode() if isinstance(m, bytes) else str(m)
        for m in await client.zrangebyscore(presence_key(role), since, "+inf")
    ]


@dataclass(frozen=True)
class Alive:
    """A live process as its heartbeat and record say: ``record`` is ``{}`` for a process that writes
    none (an HTTP worker seen by a gateway; a process of an older release)."""

    role: str
    name: str
    beat_ms: int
    record: dict[str, Any] = field(default_factory=dict)
    control: dict[str, Any] | None = None
    """The control waiting for it (``action``, ``by``, ``at_ms``), if any."""


async def alive(client: RedisClient, role: str, stale_s: float = 20.0) -> list[Alive]:
    """The live processes of ``role`` with their records and pending controls, by name (two round trips)."""
    since = now_ms() - int(stale_s * 1000)
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


async def seen(client: RedisClient, role: str, name: str, forget_s: float = 3600.0) -> None:
    """Someone else's heartbeat, noted for it (an HTTP worker seen claiming at a gateway); members silent
    for ``forget_s`` are dropped in the same round trip, so names chosen by clients cannot pile up."""
    now = now_ms()
    async with client.pipeline(transaction=False) as pipe:
        pipe.zadd(presence_key(role), {name: now})
        pipe.zremrangebyscore(presence_key(role), "-inf", now - int(forget_s * 1000))
        await pipe.execute()
