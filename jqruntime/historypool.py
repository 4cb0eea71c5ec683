"""Where a server runs its history queries (``jqruntime.stores.history``): a small pool of threads of its
own, behind a count of slots, fair between tokens, and a short memory of archive misses.

A DuckDB query can take seconds and hundreds of megabytes. Run on the event loop's default executor (as
``asyncio.to_thread`` does) a burst of them would queue ahead of what the process needs to stay up —
``/readyz``'s and the enqueues' Kafka metadata look-ups use that executor — and run all at once. Here:

* :class:`HistoryPool` runs at most ``slots`` queries at once (``JOBQ_HISTORY_QUERY_SLOTS``) on its own
  threads; one more is refused at once (the server's 429 with ``Retry-After``), never queued. One token
  (the request's :data:`~jqruntime.http.TOKEN_NAME`) holds at most half of the slots (at least one), so a
  single client cannot take the archive from the others. A slot is given back when the query's thread is
  done, not when the request goes away: a client that hangs up cannot start more than ``slots`` queries.
* :class:`MissCache` remembers, per (queue, id) and for a few seconds, that the history has no such job
  (:data:`MISS_TTL_S`): ``GET`` of unknown ids in a loop costs one query per id and TTL.

The time limit of each query is the store's (``QueryLimits.timeout_s``: DuckDB is interrupted).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["MISSES_MAX", "MISS_TTL_S", "HistoryPool", "MissCache"]

_T = TypeVar("_T")

MISS_TTL_S = 5.0
"""How long a ``GET`` of a job neither Redis nor the history has is answered 404 without asking the
history again (per queue and id): unknown ids in a loop then cost no DuckDB query each, and a job the
history takes in is found within seconds."""
MISSES_MAX = 10_000
"""Archive misses remembered at most (the oldest is forgotten first): the keys come from requests."""


class HistoryPool:
    """At most ``slots`` history queries at once on threads of their own, at most half of them (at least
    one) for one token; ``busy(what)`` makes the refusal past either limit (a 429 with ``Retry-After``)."""

    def __init__(self, slots: int, busy: Callable[[str], Exception], *, setting: str) -> None:
        if slots < 1:
            raise ValueError("a history pool needs at least one slot")
        self.slots = slots
        self.per_token = max(1, slots // 2)
        self._busy = busy
        self._setting = setting
        self._executor = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="jobq-history")
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._used = 0

    @property
    def used(self) -> int:
        """Slots held now (queries running, or refused by the time they would start)."""
        return self._used

    def _take(self, token: str) -> None:
        with self._lock:
            if self._used >= self.slots:
                raise self._busy(f"{self.slots} history queries at once ({self._setting})")
            if self._held.get(token, 0) >= self.per_token:
                raise self._busy(
                    f"{self.per_token} history queries at once for one token (half of {self._setting})"
                )
            self._used += 1
            self._held[token] = self._held.get(token, 0) + 1

    def _give(self, token: str) -> None:
        with self._lock:
            self._used -= 1
            left = self._held[token] - 1
            if left:
                self._held[token] = left
            else:
                del self._held[token]

    async def run(self, token: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` on the pool for ``token`` (a token's name); refused at once when every slot, or the
        token's share, is taken."""
        self._take(token)
        try:
            future: Future[_T] = self._executor.submit(fn)
        except BaseException:  # shut down: nothing will run, the slot is free again
            self._give(token)
            raise
        future.add_done_callback(lambda _: self._give(token))  # also when it never started (canceled)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop taking queries; those not started are dropped, running ones end by their time limit."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class MissCache:
    """Keys (queue, job id) the history had no row for, each remembered ``ttl_s`` seconds, at most
    :data:`MISSES_MAX` of them (0 s: nothing is remembered)."""

    def __init__(self, ttl_s: float = MISS_TTL_S, max_entries: int = MISSES_MAX) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._until: OrderedDict[tuple[str, str], float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._until)

    def missed(self, queue: str, job_id: str, now: float | None = None) -> bool:
        """Whether the history had no such job less than ``ttl_s`` ago."""
        key = (queue, job_id)
        until = self._until.get(key)
        if until is None:
            return False
        if (time.monotonic() if now is None else now) < until:
            return True
        del self._until[key]
        return False

    def note(self, queue: str, job_id: str, now: float | None = None) -> None:
        """The history has no such job now."""
        if self.ttl_s <= 0:
            return
        key = (queue, job_id)
        self._until.pop(key, None)
        self._until[key] = (time.monotonic() if now is None else now) + self.ttl_s
        while len(self._until) > self.max_entries:
            self._until.popitem(last=False)
