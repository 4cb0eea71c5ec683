"""Waiting without polling: workers block on a queue's wake list; the timers of a set of queues sleep
until the next due time (a delayed job's ``run_at``, a lease deadline, the next GC) or until a script
tells them an earlier one appeared. Idle pools and timers cost one blocking command per ``max_idle_s``.

Callers outside ``jqcore.state`` reach these through the engine (``engine.wait_for_work``,
``engine.timers``), never with a raw client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.asyncio.cluster import RedisCluster

from jqcore.keys import QueueKeys
from jqcore.lifecycle import Service
from jqcore.log import get_logger
from jqcore.redisconn import RedisClient

if TYPE_CHECKING:
    from jqcore.state.engine import Engine

__all__ = ["StepResult", "Timers", "block_limit_s", "wait_for_due", "wait_for_handoff", "wait_for_work"]

log = get_logger("jqcore.timers")

REDIS_PY_DEFAULT_TIMEOUT_S = 5.0
PRECISE_SLEEP_S = 0.15
"""Waits shorter than this are local sleeps: more precise than a Redis blocking timeout."""


async def wait_for_work(client: RedisClient, queues: Sequence[str], timeout_s: float) -> str | None:
    """Block until one of ``queues`` signals work; return that queue, or None after ``timeout_s``."""
    index = await _first_signal(client, [QueueKeys(q).wake for q in queues], timeout_s)
    return None if index is None else queues[index]


async def wait_for_handoff(client: RedisClient, queue: str, waiter: str, timeout_s: float) -> bytes | None:
    """Block on ``waiter``'s hand-off inbox and ``queue``'s wake list (one BLPOP: same slot): the
    hand-off message, ``b""`` for a wake token, or None after ``timeout_s``."""
    keys = QueueKeys(queue)
    reply = await client.blpop([keys.inbox(waiter), keys.wake], timeout=block_limit_s(client, timeout_s))
    if not reply:
        return None
    key, value = reply
    if _text(key) == keys.wake:
        return b""
    return value.encode() if isinstance(value, str) else value


async def wait_for_due(client: RedisClient, queues: Sequence[str], timeout_s: float) -> str | None:
    """Block until a script signals an earlier due time in one of ``queues`` (its ``sched`` token);
    return that queue, or None after ``timeout_s``."""
    index = await _first_signal(client, [QueueKeys(q).sched for q in queues], timeout_s)
    return None if index is None else queues[index]


async def _first_signal(client: RedisClient, keys: Sequence[str], timeout_s: float) -> int | None:
    """One BLPOP over all ``keys`` on a single Redis; on a Cluster the lists live in different slots, so
    each is waited on by its own command and the first answer wins. Returns the index of the key that
    answered, or None after ``timeout_s``."""
    if not keys:
        await asyncio.sleep(timeout_s)
        return None
    keys = list(keys)
    timeout_s = block_limit_s(client, timeout_s)
    if not isinstance(client, RedisCluster) or len(keys) == 1:
        reply = await client.blpop(keys, timeout=timeout_s)
        return keys.index(_text(reply[0])) if reply else None
    tasks = [asyncio.ensure_future(client.blpop([k], timeout=timeout_s)) for k in keys]
    try:
        for done in asyncio.as_completed(tasks):
            reply = await done
            if reply:
                return keys.index(_text(reply[0]))
        return None
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def wait_for_events(client: RedisClient, queues: Sequence[str], timeout_s: float) -> bool:
    """Block until one of ``queues`` has a lifecycle event in its stream (at once if one has already);
    False after ``timeout_s``. One XREAD over every stream on a single Redis, one per stream on a
    Cluster (first answer wins)."""
    if not queues:
        await asyncio.sleep(timeout_s)
        return False
    keys = [QueueKeys(q).events for q in queues]
    block_ms = max(1, int(block_limit_s(client, timeout_s) * 1000))
    if not isinstance(client, RedisCluster) or len(keys) == 1:
        return bool(await client.xread(dict.fromkeys(keys, "0-0"), count=1, block=block_ms))
    tasks = [asyncio.ensure_future(client.xread({k: "0-0"}, count=1, block=block_ms)) for k in keys]
    try:
        for done in asyncio.as_completed(tasks):
            if await done:
                return True
        return False
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def block_limit_s(client: RedisClient, wanted_s: float) -> float:
    """``wanted_s`` capped below the client's socket timeout, so a blocking command never trips it
    (redis-py 8 defaults to a 5 s socket timeout; jobq's settings default to 35 s)."""
    kwargs = (
        client.connection_kwargs
        if isinstance(client, RedisCluster)
        else client.connection_pool.connection_kwargs
    )
    socket_timeout = kwargs.get(
        "socket_timeout", kwargs.get("orig_socket_timeout", REDIS_PY_DEFAULT_TIMEOUT_S)
    )
    if not socket_timeout:
        return wanted_s
    return max(0.01, min(wanted_s, float(socket_timeout) - 1.0))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step of a queue's timers did (for metrics and tests)."""

    queue: str
    promoted: int
    reaped: int
    lateness_ms: tuple[int, ...]
    """Per promoted job: when it was promoted minus its ``run_at`` (never negative: never early)."""


class Timers(Service):
    """Keeps the timers of a changing set of queues: promotes due delayed jobs, reaps expired leases,
    collects garbage.

    One loop serves every queue: it steps the queues whose next due time has come, then sleeps in Redis
    (one BLPOP over the queues' ``sched`` tokens) until the earliest next due time, an earlier one
    signalled by a script, or a change of the queue set. Any number may run at once, over the same queues
    or not: every step is one atomic script, so a queue kept twice is only work done twice.
    """

    def __init__(
        self,
        engine: Engine,
        queues: Iterable[str] = (),
        *,
        max_idle_s: float = 5.0,
        gc_every_s: float = 60.0,
        batch: int = 1000,
        clock: Callable[[], int] | None = None,
        on_step: Callable[[StepResult], None] | None = None,
    ) -> None:
        super().__init__()
        self.engine, self.max_idle_s, self.batch = engine, max_idle_s, batch
        self._fixed_clock = clock is not None
        self.clock = clock or engine.clock.now
        """The due times' clock: Redis's (the engine's), unless a test gives its own."""
        self.gc_every_ms = int(gc_every_s * 1000)
        self.on_step = on_step
        self._next: dict[str, int] = dict.fromkeys(queues, 0)
        """Queue → when it must be stepped next (ms; 0 = now)."""
        self._next_gc: dict[str, int] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def queues(self) -> list[str]:
        return sorted(self._next)

    def set_queues(self, queues: Iterable[str]) -> None:
        """Keep exactly ``queues`` from now on: new ones are stepped at once, dropped ones no more."""
        wanted = set(queues)
        for queue in [q for q in self._next if q not in wanted]:
            del self._next[queue]
            self._next_gc.pop(queue, None)
        added = wanted - self._next.keys()
        for queue in added:
            self._next[queue] = 0
        if added:
            self._changed.set()

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="timers")

    async def _stop(self) -> None:
        self._stopping = True  # redis-py may turn a cancellation into ConnectionError: the loop checks this
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while not self._is_stopping():
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: log, back off, keep going
                if self._is_stopping():
                    return
                log.warning("timers step failed", error=repr(exc))
                await asyncio.sleep(1.0)

    def _is_stopping(self) -> bool:
        return self._stopping

    async def _round(self) -> None:
        self._changed.clear()  # a change from here on ends this round's wait at once
        if not self._fixed_clock:
            await self.engine.now()  # keeps the engine's view of Redis's clock fresh
        now = self.clock()
        for queue in [q for q, at in self._next.items() if at <= now]:
            next_at = await self._step(queue, now)
            if queue in self._next:  # still ours after the await
                self._next[queue] = next_at
        wake_at = min([*self._next.values(), now + int(self.max_idle_s * 1000)])
        timeout_s = min(self.engine.block_limit_s(self.max_idle_s), (wake_at - self.clock()) / 1000)
        if timeout_s > PRECISE_SLEEP_S:
            # Redis times blocked clients out at its own tick (~100 ms at hz 10): wake a little early and
            # finish the wait in the next round with a precise local sleep.
            woken = await self._wait(timeout_s - PRECISE_SLEEP_S)
            if woken is not None and woken in self._next:
                self._next[woken] = 0
        elif timeout_s > 0:
            await asyncio.sleep(timeout_s)

    async def _wait(self, timeout_s: float) -> str | None:
        """Until a queue's ``sched`` token (that queue), a change of the queue set, or ``timeout_s``."""
        queues = list(self._next)
        if not queues:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout_s)
            return None
        signal = asyncio.ensure_future(self.engine.wait_for_due(queues, timeout_s))
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({signal, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (signal, changed):
                task.cancel()
            await asyncio.gather(signal, changed, return_exceptions=True)
        if signal.cancelled() or signal.exception() is not None:
            return None
        return signal.result()

    async def _step(self, queue: str, now: int) -> int:
        """One queue's due work; returns when it must be stepped next."""
        promoted, next_due, lateness = await self.engine.promote_due(queue, self.batch, now_ms=now)
        reaped, next_deadline = await self.engine.reap_expired(queue, self.batch, now_ms=now)
        next_gc = self._next_gc.get(queue, 0)
        if now >= next_gc:
            await self.engine.gc(queue, self.batch, now_ms=now)
            next_gc = self._next_gc[queue] = now + self.gc_every_ms
        if self.on_step is not None and (promoted or reaped):
            self.on_step(StepResult(queue, promoted, reaped, lateness))
        if promoted >= self.batch or reaped >= self.batch:
            return now  # more is due: step again at once
        due = [t for t in (next_due, next_deadline + 1 if next_deadline >= 0 else -1, next_gc) if t >= 0]
        return min(due)
