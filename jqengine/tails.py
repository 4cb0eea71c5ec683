"""Tail calls: a running job hands its completion to a job it spawns (``worker.defer_to``, Chapman's
dynamic tail call).

The parent and its child may live in different queues, so in different Redis Cluster slots: like a task
graph's hand-offs (:mod:`jqengine.graphs`) each step is one atomic, idempotent script with a durable
record in between, kept in the queue's ``gdone`` hash (the cross-slot outbox), and a repair that redoes
the second step:

* **spawn** (parent's slot, ``defer.lua``): the parent leaves the running set for state ``deferred`` (no
  lease, no worker slot), naming its child, and leaves the child's envelope in its queue's ``gdone``
  under ``">" + child id``. The caller then enqueues the child (its record carries the parent's queue and
  id; the same child enqueued twice is a duplicate) and deletes the entry.
* **report** (child's slot, ``lua/lib/finish.lua``): the child's terminal transition leaves its
  outcome in its queue's ``gdone`` under its id; the caller (the worker that finished it, else the
  scheduler) runs ``tail_done.lua`` in the parent's slot, which ends the parent with the child's result or
  by its failure policy, and only then deletes the entry. A parent that is itself a child (a chain)
  leaves its own entry at that moment, handed on the same way.

Each second step waits until the first step's writes are on a replica (as a graph's do: the record must
outlive a failover that loses the step). A crash between two steps leaves a ``gdone`` entry; the scheduler's
graph repair round
(:meth:`jqengine.graphs.Graphs.report_finished`, entries older than ``REPAIR_AFTER_MS``) finishes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, cast

from jqcore.envelope import Envelope, decode, encode
from jqengine import codes
from jqengine.core import Triple
from jqengine.keys import KeyName, QueueKeys
from jqengine.models import EnqueueResult
from jqengine.redisconn import RedisClient
from jqengine.replication import ReplicaWait, first_step_replicated, recording_writes
from jqengine.scripts import SCRIPTS

__all__ = ["TAIL_ID_PREFIX", "Tails"]

TAIL_ID_PREFIX = "tail@"
"""The ids jobq gives the children of tail calls: a worker reports such a job's outcome at once."""

Policy = Literal["fail", "retry"]
RunScript = Callable[[str, Sequence[str], Sequence[Any], "int | None"], Awaitable[Any]]
EnqueueLinked = Callable[..., Awaitable[EnqueueResult]]
"""The engine's ``enqueue_batch`` (called with ``parents=``)."""
Report = Callable[[str, Sequence[str]], Awaitable[int]]
"""The engine's report of ``gdone`` entries: (queue, ids) → how many were handed on."""


class Tails:
    """The tail-call operations of one :class:`~jqengine.Engine` (``engine.tails``)."""

    def __init__(
        self,
        client: RedisClient,
        run_script: RunScript,
        enqueue: EnqueueLinked,
        report: Report,
        replicas: ReplicaWait | None = None,
    ) -> None:
        self._client = client
        self._run_script = run_script
        self._enqueue = enqueue
        self._report = report
        self.replicas = replicas
        """Confirms a spawned child on the replicas before its ``gdone`` entry goes (None: never waits)."""

    async def _run(self, name: str, queue: str, args: Sequence[Any], now: int | None) -> Any:
        keys = QueueKeys(queue).for_script(cast("tuple[KeyName, ...]", SCRIPTS[name].keys))
        return await self._run_script(name, keys, args, now)

    async def defer(
        self,
        queue: str,
        job: Triple,
        child: Envelope,
        *,
        on_failure: Policy = "fail",
        retry_delay_ms: int = 0,
        now_ms: int | None = None,
    ) -> Literal["deferred", "canceled"]:
        """Park the running ``job`` until ``child`` finishes, then spawn ``child``. ``canceled``: a cancel
        was requested meanwhile (nothing spawned). Raises StaleLease / JobNotFound."""
        if on_failure not in ("fail", "retry"):
            raise codes.QueueConfigInvalid(f"on_failure must be fail or retry, not {on_failure!r}")
        args = [*job, child.queue, child.id, encode(child), on_failure, max(0, retry_delay_ms)]
        reply = await self._run("defer", queue, args, now_ms)
        code = codes.Code(int(reply[0]))
        if code == codes.Code.CANCELED:
            return "canceled"
        codes.check(int(code), job[0], "defer")
        await self.spawn(queue, job[0], child)
        return "deferred"

    async def spawn(self, parent_queue: str, parent_id: str, child: Envelope) -> None:
        """Enqueue a deferred job's child (again: a duplicate then), then drop its ``gdone`` entry. A
        child that can never run (refused, canceled before it arrived) ends its parent at once."""
        with recording_writes() as written:
            result = await self._enqueue([child], parents={child.id: f"{parent_queue}\t{parent_id}"})
        outcome = result.outcomes[0]
        if outcome.outcome == "refused":
            await self.done(parent_queue, parent_id, child.id, "errored", error=outcome.reason or "refused")
        elif outcome.outcome in ("canceled", "expired"):  # finished on arrival: its report is there
            await self._report(child.queue, [child.id])
        if not await first_step_replicated(self.replicas, written, "tail spawn", child.id):
            return
        async with codes.redis_errors("tail spawn"):
            await self._client.hdel(QueueKeys(parent_queue).gdone, ">" + child.id)

    async def done(
        self,
        parent_queue: str,
        parent_id: str,
        child_id: str,
        state: str,
        *,
        result: str = "",
        error: str = "",
        now_ms: int | None = None,
    ) -> codes.Code:
        """End a deferred parent with its child's outcome (``tail_done.lua``); a parent that is itself a
        child reports on (a chain). Returns the script's code (OK, ERRORED, RETRY, or STALE / FINAL /
        MISSING when the parent no longer waits on this child)."""
        args = [parent_id, child_id, state, result, error]
        reply = await self._run("tail_done", parent_queue, args, now_ms)
        code = codes.Code(int(reply[0]))
        if code in (codes.Code.OK, codes.Code.ERRORED):
            await self._report(parent_queue, [parent_id])
        return code

    async def settle(self, queue: str, field: str, entry: Mapping[str, Any]) -> None:
        """Hand on one of ``queue``'s ``gdone`` entries that is a tail call's (the graph report's reader
        calls this; it deletes the entry after)."""
        if "spawn" in entry:
            await self.spawn(queue, str(entry["parent"]), decode(str(entry["spawn"]).encode()))
        elif "parent" in entry:
            parent_queue, _, parent_id = str(entry["parent"]).partition("\t")
            await self.done(
                parent_queue,
                parent_id,
                field,
                str(entry["state"]),
                result=str(entry.get("result", "")),
                error=str(entry.get("error", "")),
            )
