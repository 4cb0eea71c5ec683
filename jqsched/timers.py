"""The timers of a set of queues (promote due delayed jobs, reap expired leases, collect garbage), run by
the scheduler service over the engine: they sleep until the next due time (a delayed job's ``run_at``, a
lease deadline, the next GC, :data:`jqengine.timers.STEP_HORIZON_MS` at the latest) or until a script tells
them an earlier one appeared (:meth:`jqengine.Engine.wait_for_due`). Idle timers cost one blocking command
per ``max_idle_s`` and a step of each queue per horizon.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from jqcore.aio import wait_event
from jqcore.log import get_logger
from jqcore.testsignal import TestSignal
from jqengine import STEP_HORIZON_MS, Engine
from jqruntime.lifecycle import Service

__all__ = ["StepResult", "TimerSignals", "Timers"]

log = get_logger("jqsched.timers")

PRECISE_SLEEP_S = 0.15
"""Waits shorter than this are local sleeps: more precise than a Redis blocking timeout."""


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step of a queue's timers did (for metrics and tests)."""

    queue: str
    promoted: int
    reaped: int
    lateness_ms: tuple[int, ...]
    """Per promoted job: when it was promoted minus its ``run_at`` (never negative: never early)."""


@dataclass
class TimerSignals:
    """What the timers report to a test that listens (:mod:`jqcore.testsignal`)."""

    stepped: TestSignal[StepResult] = field(default_factory=lambda: TestSignal("timers stepped"))
    """A queue's step finished (promotions, reaping and any garbage collection due): what it did."""


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
        self.signals = TimerSignals()

    @property
    def queues(self) -> list[str]:
        return sorted(self._next)

    def set_queues(self, queues: Iterable[str]) -> None:
        """Keep exactly ``queues`` from now on: new ones are stepped at once, dropped ones no more. Either
        change ends the current wait: a dropped queue's wake-ups are its new keeper's to take."""
        wanted = set(queues)
        dropped = [q for q in self._next if q not in wanted]
        for queue in dropped:
            del self._next[queue]
            self._next_gc.pop(queue, None)
        added = wanted - self._next.keys()
        for queue in added:
            self._next[queue] = 0
        if added or dropped:
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
            if woken in self._next:
                self._next[woken] = 0
            elif woken is not None:  # dropped as the token came: its keeper's (else stepped at its horizon)
                await self.engine.timers.wake(woken)
        elif timeout_s > 0:
            await asyncio.sleep(timeout_s)

    async def _wait(self, timeout_s: float) -> str | None:
        """Until a queue's ``sched`` token (that queue), a change of the queue set, or ``timeout_s``."""
        queues = list(self._next)
        if not queues:
            await wait_event(self._changed, timeout_s)
            return None
        signal = asyncio.ensure_future(self.engine.timers.wait_for_due(queues, timeout_s))
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
        promoted, next_due, lateness = await self.engine.timers.promote_due(queue, self.batch, now_ms=now)
        reaped, next_deadline = await self.engine.timers.reap_expired(queue, self.batch, now_ms=now)
        next_gc = self._next_gc.get(queue, 0)
        if now >= next_gc:
            await self.engine.timers.gc(queue, self.batch, now_ms=now)
            next_gc = self._next_gc[queue] = now + self.gc_every_ms
        step = StepResult(queue, promoted, reaped, lateness)
        if self.on_step is not None and (promoted or reaped):
            self.on_step(step)
        self.signals.stepped.signal(step)
        if promoted >= self.batch or reaped >= self.batch:
            return now  # more is due: step again at once
        # at the horizon at the latest: a lease given since, further out, woke nobody (STEP_HORIZON_MS)
        due = [t for t in (next_due, next_deadline + 1 if next_deadline >= 0 else -1, next_gc) if t >= 0]
        return min(*due, now + STEP_HORIZON_MS)
