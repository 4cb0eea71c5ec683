"""``engine.jobs``: the transitions of a running job, as the worker pools (and the dispatcher, and the
gateway for HTTP workers) make them: claim (and hand-offs, and the wait for work), extend, complete,
fail, cancel running, snooze, hand back, release."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster

from jqcore import metrics
from jqcore.backoff import Backoff
from jqengine import codes, replies, waiting
from jqengine.core import Part, Triple
from jqengine.models import ClaimedJob, Failed, HandedBack, NotExtended, Released, Settle

__all__ = ["MAX_ERROR_CHARS", "MAX_RESULT_BYTES", "Jobs"]

MAX_ERROR_CHARS = 4000
MAX_RESULT_BYTES = 65_536
"""The largest result the engine keeps with a job (one definition: the worker, the dispatcher and the
gateway's callbacks hold results to it before they write)."""


class Jobs(Part):
    """What a worker pool does to the jobs it runs (``engine.jobs``)."""

    async def claim(
        self,
        queue: str,
        n: int,
        *,
        lease_ms: int = 0,
        filter: Mapping[str, str] | None = None,
        worker: str = "",
        waiter: str = "",
        wait_ms: int = 0,
        now_ms: int | None = None,
    ) -> list[ClaimedJob]:
        """Up to ``n`` jobs, lowest priority value first, each with a lease and a fresh token.
        ``lease_ms=0``: each job's own ``lease_ms``, else the queue's default. Raises
        :class:`codes.FilterInvalid` for a filter on a key the queue does not index; ``filter`` may name
        any number of declared ``meta`` pairs, all of which a job must have (a deep match is reached
        within a few short claims, never starved: docs/engine.md, Filters). ``worker`` names the
        claimer in the job record and its lifecycle events. ``waiter`` (a pool's unique id) with ``wait_ms``
        > 0 and no filter: when the claim comes back short, the pool is registered for hand-offs for that
        long — new jobs are then claimed for it by the transition that makes them ready
        (:meth:`wait_for_handoff`); any other claim naming ``waiter`` deregisters it."""
        pairs = "\n".join(f"{k}={v}" for k, v in sorted((filter or {}).items()))  # one cursor per filter
        now = now_ms if now_ms is not None else await self._core.now()
        args = [n, lease_ms, secrets.token_hex(8), pairs, worker, wait_ms, waiter]
        return replies.claim(queue, await self._core.run("claim", queue, args, now), now)

    async def wait_for_handoff(self, queue: str, waiter: str, timeout_s: float) -> list[ClaimedJob] | None:
        """Block until jobs are handed to ``waiter`` (registered by a short :meth:`claim` with
        ``wait_ms``), a wake token signals other work in ``queue`` (``[]``: claim again), or ``timeout_s``
        (None). Handed jobs are leased to the worker already: run them (or release them)."""
        message = await waiting.wait_for_handoff(self._client, queue, waiter, timeout_s)
        if message is None:
            return None
        return replies.handed([message], self._core.clock.now()) if message else []

    async def wait_for_work(self, queues: Sequence[str], timeout_s: float) -> str | None:
        """Block until one of ``queues`` signals work; that queue, or None after ``timeout_s``."""
        return await waiting.wait_for_work(self._client, queues, timeout_s)

    async def nudge(self, queue: str, waiter: str) -> None:
        """End ``waiter``'s blocking :meth:`wait_for_handoff` at once with no jobs (``[]``: claim again),
        or its next one if it is not waiting now (a pool whose concurrency changed)."""
        await waiting.nudge(self._client, queue, waiter)

    async def unwait(self, queue: str, waiter: str, *, now_ms: int | None = None) -> list[ClaimedJob]:
        """``waiter`` stops waiting for hand-offs in ``queue``: deregistered; returns the jobs handed to
        it meanwhile (leased to it: run or release them)."""
        now = now_ms if now_ms is not None else await self._core.now()
        return replies.handed((await self._core.run("unwait", queue, [waiter], now))[1:], now)

    async def extend(
        self, queue: str, owned: Sequence[Triple], lease_ms: int, *, now_ms: int | None = None
    ) -> dict[str, int | NotExtended]:
        """Extend leases (``lease_ms=0``: each job's own lease, else the queue's default); per id the new
        deadline (ms) or why not (``stale`` / ``missing`` / ``canceled``)."""
        args: list[Any] = [lease_ms]
        for job_id, attempt, token in owned:
            args += [job_id, attempt, token]
        reply = await self._core.run("extend", queue, args, now_ms)
        return replies.extend([t[0] for t in owned], reply)

    async def complete(
        self, queue: str, job: Triple, result: bytes | str | None = None, *, now_ms: int | None = None
    ) -> None:
        """Mark a running job completed (raises StaleLease / JobNotFound)."""
        data = result.encode() if isinstance(result, str) else (result or b"")
        if len(data) > MAX_RESULT_BYTES:
            raise codes.ResultTooLarge(f"a result of {len(data)} bytes; at most {MAX_RESULT_BYTES} are kept")
        replies.single(await self._core.run("complete", queue, [*job, data], now_ms), job[0], "complete")

    async def complete_many(
        self, queue: str, items: Sequence[tuple[Triple, bytes | None]], *, now_ms: int | None = None
    ) -> list[codes.Code]:
        """Complete several running jobs of one queue in one round trip (a pipeline of the ``complete``
        transition, each call still atomic on its own). Returns each job's code for :func:`codes.check`."""
        if not items:
            return []
        if isinstance(self._client, RedisCluster):  # cluster pipelines do not load scripts: one call each
            one_by_one: list[codes.Code] = []
            for j, r in items:
                one_by_one.append(
                    replies.code(await self._core.run("complete", queue, [*j, r or b""], now_ms))
                )
            return one_by_one
        keys = self._core.keys_for("complete", queue)
        now = now_ms if now_ms is not None else await self._core.now()
        started = time.perf_counter()
        calls = [[now, *job, b"" if len(r or b"") > MAX_RESULT_BYTES else (r or b"")] for job, r in items]
        async with codes.redis_errors("complete"):
            answers = await self._core.functions.pipelined("complete", keys, calls)
        metrics.child(metrics.SCRIPT_CALLS, "complete", "ok").inc(len(items))
        metrics.child(metrics.SCRIPT_TIME, "complete").observe(time.perf_counter() - started)
        out: list[codes.Code] = []
        for reply in answers:
            if isinstance(reply, Exception):
                raise reply
            out.append(replies.code(reply))
        return out

    async def settle(
        self, queue: str, items: Sequence[Settle], *, now_ms: int | None = None
    ) -> list[tuple[codes.Code, int]]:
        """The outcomes of many running jobs of one queue in one script call (a batch handler's items):
        each completed (``error`` None; ``result`` kept, if any) or failed (retried after ``delay_ms``
        or errored, as :meth:`fail`). Per job, in order: its code (``OK``, ``RETRY``, ``ERRORED``,
        ``CANCELED``, ``STALE``, ``MISSING``) and the retry's run_at (0 otherwise)."""
        if not items:
            return []
        return replies.settled(await self._core.run("settle", queue, _settle_args(items), now_ms))

    async def settle_claim(
        self,
        queue: str,
        items: Sequence[Settle],
        n: int,
        *,
        lease_ms: int = 0,
        worker: str = "",
        now_ms: int | None = None,
    ) -> tuple[list[tuple[codes.Code, int]], list[ClaimedJob]]:
        """A pool's round in one script call: ``items``' outcomes written as :meth:`settle` writes them,
        then up to ``n`` jobs claimed as an unfiltered :meth:`claim` claims them (none while the queue is
        paused; no hand-off registration is made or dropped). Returns the outcomes' codes and run_ats, in
        order, and the claimed jobs."""
        now = now_ms if now_ms is not None else await self._core.now()
        args = [*_settle_args(items), n, lease_ms, secrets.token_hex(8), worker]
        reply = await self._core.run("settle_claim", queue, args, now)
        cut = 1 + 2 * len(items)
        return replies.settled(reply[:cut]), replies.claimed_rows(reply[cut:], now)

    async def fail(
        self,
        queue: str,
        job: Triple,
        error: str,
        *,
        retry_delay_ms: int | None = None,
        permanent: bool = False,
        now_ms: int | None = None,
    ) -> Failed:
        """Record a failed attempt; returns ``retry``, ``errored`` or ``canceled``."""
        delay = Backoff().delay_ms(int(job[1])) if retry_delay_ms is None else max(0, retry_delay_ms)
        args = [*job, error[:MAX_ERROR_CHARS], delay, int(permanent)]
        return replies.fail(await self._core.run("fail", queue, args, now_ms), job[0])

    async def cancel_running(
        self, queue: str, job: Triple, reason: str = "canceled by its handler", *, now_ms: int | None = None
    ) -> None:
        """The job's handler canceled it: its running attempt ends canceled, never retried (one
        transition; raises StaleLease / JobNotFound)."""
        reply = await self._core.run("cancel_running", queue, [*job, reason[:MAX_ERROR_CHARS]], now_ms)
        replies.cancel_running(reply, job[0])

    async def snooze(self, queue: str, job: Triple, delay_ms: int, *, now_ms: int | None = None) -> int:
        """Put a running job back for ``delay_ms`` without spending its attempt; returns run_at."""
        return replies.snooze(await self._core.run("snooze", queue, [*job, max(0, delay_ms)], now_ms), job[0])

    async def hand_back(
        self, queue: str, job: Triple, delay_ms: int, dead_after_ms: int, *, now_ms: int | None = None
    ) -> HandedBack:
        """Give back a job this pool has no handler for, attempt refunded, claimable again after
        ``delay_ms``; ``errored`` once pools kept handing it back for ``dead_after_ms``. Returns
        ``handed_back`` or ``errored``."""
        reply = await self._core.run(
            "hand_back", queue, [*job, max(0, delay_ms), max(0, dead_after_ms)], now_ms
        )
        return replies.hand_back(reply, job[0])

    async def release(
        self, queue: str, jobs: Sequence[tuple[str, int, str, bool]], *, now_ms: int | None = None
    ) -> dict[str, Released]:
        """Give running jobs back (shutdown): (id, attempt, token, started) → released / errored /
        stale / missing per id."""
        args: list[Any] = []
        for job_id, attempt, token, started in jobs:
            args += [job_id, attempt, token, int(started)]
        reply = await self._core.run("release", queue, args, now_ms)
        return replies.release([j[0] for j in jobs], reply)


def _settle_args(items: Sequence[Settle]) -> list[Any]:
    """``settle``'s and ``settle_claim``'s ARGV for the outcomes (after ``now``): N, then 7 values a job."""
    args: list[Any] = [len(items)]
    for it in items:
        if it.error is None:
            result = it.result or b""
            args += [*it.job, "c", b"" if len(result) > MAX_RESULT_BYTES else result, 0, 0]
        else:
            args += [*it.job, "f", it.error[:MAX_ERROR_CHARS], max(0, it.delay_ms), int(it.permanent)]
    return args
