"""Parked long-poll claims: one Redis wait per gateway process, fanned out to every parked request.

A claim with ``wait_ms`` that finds nothing parks here instead of holding a Redis connection of its own
(300 parked polls used to hold the gateway's whole pool: every other request then failed with
``Too many connections``, blamed on Redis). One watcher task blocks on the wake lists of every queue
that has a parked poll (one ``BLPOP`` on a single Redis; one per queue on a Cluster), on a client of its
own (:attr:`LongPolls.engine`), and hands each wake token to the oldest poll parked on that queue — one
token, one woken poll, as when each poll popped its own token. A token popped while no poll of that
queue is parked is kept for the next one that parks (it must not miss work made ready between its
claim and its parking).

At most ``JOBQ_GATE_LONG_POLLS_MAX`` polls park per gateway process, and at most its share
(``JOBQ_GATE_TOKEN_SHARE``, half by default) for one token; one more is a 429 ``gateway_busy`` with
``Retry-After`` (:func:`kafkagate.limits.busy`) — for that token only, while the others still park.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator
from typing import Any

from jqcore.aio import cancel_and_wait
from jqcore.log import get_logger
from jqengine import Engine
from kafkagate.limits import busy

__all__ = ["LongPolls"]

log = get_logger("kafkagate.longpoll")

WATCH_ERROR_PAUSE_S = 0.5
"""After a failed wait the watcher wakes every parked poll (their claims then meet Redis themselves)
and waits this long before blocking again."""
PENDING_MAX = 64
"""Most wake tokens kept for a queue with no parked poll (the wake list itself holds at most 64)."""
PENDING_QUEUES_MAX = 10_000


def _discard(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and retrieve what it ends with (no "exception never retrieved")."""
    task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


class LongPolls:
    """The parked long-polls of one gateway process and the watcher that wakes them."""

    def __init__(self, engine: Engine, cap: int, per_token: int | None = None) -> None:
        self.engine = engine
        """An engine on a Redis client of its own: only the watcher's blocking wait uses it."""
        self.cap = cap
        self.per_token = cap if per_token is None else per_token
        """Most polls one token parks at once."""
        self._waiters: dict[str, deque[asyncio.Future[None]]] = {}
        self._pending: dict[str, int] = {}
        self._parked = 0
        self._by_token: dict[str, int] = {}
        self._changed = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def parked(self) -> int:
        """Polls parked now."""
        return self._parked

    def parked_by(self, token: str) -> int:
        """Polls ``token`` has parked now."""
        return self._by_token.get(token, 0)

    @contextlib.contextmanager
    def slot(self, token: str) -> Iterator[None]:
        """One long-poll's place for its whole life (claims and waits), for the token named ``token``; 429
        when all are taken, or when that token holds its share of them."""
        if self._parked >= self.cap:
            raise busy(f"{self.cap} parked long-poll claims (JOBQ_GATE_LONG_POLLS_MAX)")
        mine = self._by_token.get(token, 0)
        if mine >= self.per_token:
            raise busy(
                f"{self.per_token} parked long-poll claims for one token (JOBQ_GATE_TOKEN_SHARE of "
                "JOBQ_GATE_LONG_POLLS_MAX)"
            )
        self._parked += 1
        self._by_token[token] = mine + 1
        try:
            yield
        finally:
            self._parked -= 1
            left = self._by_token[token] - 1
            if left:
                self._by_token[token] = left
            else:
                del self._by_token[token]

    async def wait(self, queue: str, timeout_s: float) -> bool:
        """Park until a wake token for ``queue`` reaches this poll (True) or ``timeout_s`` passed or the
        gateway is stopping (False)."""
        if self._stopping:
            return False
        pending = self._pending.get(queue, 0)
        if pending:
            self._take_pending(queue, pending)
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.get(queue)
        if waiters is None:
            waiters = self._waiters[queue] = deque()
            self._changed.set()
        waiters.append(future)
        self._ensure_watcher()
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(future)
            return True
        except TimeoutError:
            return False
        finally:
            if not future.done():
                future.cancel()
            with contextlib.suppress(ValueError):
                waiters.remove(future)
            if not waiters and self._waiters.get(queue) is waiters:
                del self._waiters[queue]

    def _take_pending(self, queue: str, pending: int) -> None:
        if pending > 1:
            self._pending[queue] = pending - 1
        else:
            del self._pending[queue]

    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(), name="gate:long-polls")

    def _signal(self, queue: str) -> None:
        """A wake token for ``queue``: to its oldest parked poll, else kept for the next one."""
        waiters = self._waiters.get(queue, deque())
        while waiters:
            future = waiters.popleft()
            if not future.done():
                future.set_result(None)
                return
        if queue not in self._pending and len(self._pending) >= PENDING_QUEUES_MAX:
            self._pending.clear()
        self._pending[queue] = min(PENDING_MAX, self._pending.get(queue, 0) + 1)

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    async def _watch(self) -> None:
        """Block on the wake lists of the queues with parked polls; start again when a queue is added."""
        while self._waiters:
            self._changed.clear()
            queues = list(self._waiters)
            wait = asyncio.create_task(
                self.engine.jobs.wait_for_work(queues, self.engine.block_limit_s(30.0))
            )
            changed = asyncio.create_task(self._changed.wait())
            try:
                await asyncio.wait([wait, changed], return_when=asyncio.FIRST_COMPLETED)
            except BaseException:  # stopped: the wait goes too
                _discard(wait)
                raise
            finally:
                changed.cancel()
            if not wait.done():  # a queue was added: wait again over the new set
                with contextlib.suppress(Exception):  # redis-py may turn the cancel into an error
                    await cancel_and_wait(wait)
                continue
            try:
                queue = wait.result()
            except Exception as exc:
                log.warning("long-poll wait failed; parked polls claim again", error=repr(exc))
                self._wake_all()
                await asyncio.sleep(WATCH_ERROR_PAUSE_S)
                continue
            if queue is not None:
                self._signal(queue)

    def stop(self) -> None:
        """The gateway is stopping: every parked poll answers now with what it has (its worker asks
        another gateway), not at its deadline, up to ``claim_wait_max_ms`` into the shutdown."""
        self._stopping = True
        self._wake_all()

    async def close(self) -> None:
        await cancel_and_wait(self._watcher)
        self._watcher = None
        self._wake_all()
