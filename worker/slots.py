"""Handler slots: a pool that holds more claimed jobs than it runs at once — prefetched jobs
(``PoolConfig.prefetch``), a batch kind's gathering room — starts its single jobs through these, at most
its concurrency at a time, first come first served. A slot is handed straight to the oldest waiter (no
wake-up of every waiter per freed slot); a waiter gives up after its own timeout."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

__all__ = ["HandlerSlots"]


class HandlerSlots:
    def __init__(self, limit: Callable[[], int]) -> None:
        """``limit()``: the slots there are now (the pool's concurrency, which may change while it runs)."""
        self._limit = limit
        self.taken = 0
        self._waiters: deque[asyncio.Future[bool]] = deque()

    def try_take(self) -> bool:
        """Take a free slot now, if there is one and nobody waits for it first."""
        while self._waiters and self._waiters[0].done():  # gave up (timed out, cancelled)
            self._waiters.popleft()
        if self.taken < self._limit() and not self._waiters:
            self.taken += 1
            return True
        return False

    async def take(self, timeout_s: float) -> bool:
        """A slot, in the order asked; False when none came within ``timeout_s`` (nothing taken)."""
        if self.try_take():
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(timeout_s, _give_up, waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.give()  # handed a slot while being cancelled: pass it on
            raise
        finally:
            timer.cancel()

    def give(self) -> None:
        """A slot taken is free again: the oldest waiter gets it."""
        self.taken -= 1
        self.poke()

    def poke(self) -> None:
        """Hand the free slots to the waiters (also when the limit was raised)."""
        while self._waiters and self.taken < self._limit():
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.taken += 1
                waiter.set_result(True)
        while self._waiters and self._waiters[0].done():  # timed out or cancelled at the head
            self._waiters.popleft()


def _give_up(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
