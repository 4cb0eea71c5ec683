"""The engine: the one door to queue state in Redis or Redis Cluster.

Every state change is one script call (``lua/<name>.lua``, declared with its ``KEYS`` in
:mod:`jqengine.scripts`), so there is never a half-done transition; its reply becomes a typed value in
:mod:`jqengine.replies`. Reads (a job by id, depths, the dead list, configuration) and waits (a
worker's wake-up, the scheduler) are methods too, so nothing outside ``jqengine`` touches a queue key
or needs the raw client for queue state; their implementations live in :mod:`jqengine.reads` and
:mod:`jqengine.waiting`. Time comes from the caller (``now_ms``, which keeps tests in control of it),
by default from Redis's own clock (:class:`jqcore.clock.ServerClock`): a caller whose clock is wrong
cannot make a lease expire early, a delayed job run early or a lease live on.

The engine's methods live in parts by concern over :class:`~jqengine.core.EngineCore` (the client,
the clock, the script runner): :mod:`~jqengine.transitions` (worker pools),
:mod:`~jqengine.admin` (cancels, timers' steps, dead letters, configuration),
:mod:`~jqengine.queries` (reads, waits, event streams, leases), :mod:`~jqengine.switches` (kill
switches); this module adds the enqueue and puts them together. The keys services keep beside the queues
(stage counters, idempotency records, presence, far-tier scan markers, push-dispatch configurations) are
not the engine's: their owners write them with a plain client (:mod:`jqcore.keys`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from jqcore import metrics
from jqcore.admission import RESERVED_PREFIX, reserved_problem
from jqcore.envelope import Envelope, encode
from jqcore.graphs import GRAPH_KIND
from jqengine import codes, farreads, replies
from jqengine.admin import AdminTransitions
from jqengine.core import Triple
from jqengine.graphs import REPLICA_WAIT_MS, Graphs
from jqengine.models import EnqueueOutcome, EnqueueResult
from jqengine.queries import Queries
from jqengine.redisconn import RedisClient
from jqengine.switches import SwitchBoard
from jqengine.switchrules import queue_list
from jqengine.tails import Tails
from jqengine.transitions import WorkerTransitions

__all__ = ["Engine", "Triple"]


class Engine(WorkerTransitions, AdminTransitions, Queries, SwitchBoard):
    """Typed access to the Lua transitions of every queue in one Redis (or Redis Cluster)."""

    def __init__(self, client: RedisClient) -> None:
        super().__init__(client)
        hand_offs = self.replica_wait(None, REPLICA_WAIT_MS)  # cross-slot steps wait for a replica
        self.tails = Tails(client, self.run_script, self.enqueue_batch, self._report, hand_offs)
        """Tail calls (:mod:`jqengine.tails`)."""
        self.graphs = Graphs(
            client,
            self.run_script,
            self.enqueue_batch,
            self.cancel,
            self.clock.now,
            self.tails.settle,
            hand_offs,
        )
        """Task graphs (:mod:`jqengine.graphs`)."""

    async def _report(self, queue: str, ids: Sequence[str]) -> int:
        return await self.graphs.report_finished(queue, ids)

    # ---- enqueue -----------------------------------------------------------------------------------
    async def enqueue_batch(
        self,
        envelopes: Sequence[Envelope],
        *,
        fence: int = 0,
        source: str = "",
        origins: Mapping[str, str] | None = None,
        parents: Mapping[str, str] | None = None,
        now_ms: int | None = None,
        graphs: bool = False,
    ) -> EnqueueResult:
        """Store jobs (grouped per queue, one script call each). ``source`` names the fence's scope
        (the relay's topic); ``""`` is an unfenced tool write. ``origins`` maps a job id to the Kafka
        record it was read from (``topic/partition/offset``): the same record read again is always a
        duplicate, a new record with a finished job's id follows the queue's dedup policy (an unknown
        origin counts as a re-read). ``parents`` maps a tail call's child (:mod:`jqengine.tails`) to
        the queue and id (tab-separated) of the job that deferred to it. Kinds under ``jobq.`` are jobq's own
        and ``refused`` — but with ``graphs`` (a caller that admitted its records: ``jqcore.admission``) a
        ``jobq.graph`` envelope creates the task graph it carries (``stored``, ``duplicate``,
        ``refused``). Raises :class:`codes.FenceRejected`."""
        by_queue: dict[str, list[Envelope]] = defaultdict(list)
        outcomes: list[EnqueueOutcome] = []
        for env in envelopes:
            if not env.kind.startswith(RESERVED_PREFIX):
                by_queue[env.queue].append(env)
            elif graphs and env.kind == GRAPH_KIND:
                outcomes.append(await self.graphs.create_from(env.id, env.queue, env.args, env.enqueued_at))
            elif (why := reserved_problem(env.kind, env.queue)) is None:  # the canary's heartbeat
                by_queue[env.queue].append(env)
            else:
                outcomes.append(EnqueueOutcome(env.id, env.queue, "refused", f"kind_reserved: {why}"))
        created: list[str] = []
        switches = await self._announce(list(by_queue)) if by_queue else []
        for queue, batch in by_queue.items():
            rows = _job_rows(batch, origins or {}, parents or {})
            listed = queue_list(queue, switches)
            reply = await self._run("enqueue_batch", queue, [source, fence, len(batch), rows, listed], now_ms)
            new, stored = replies.enqueue(batch, reply, source, fence)
            if new:
                created.append(queue)
            outcomes += stored
            metrics.ENQUEUE_BATCH_SIZE.observe(len(batch))
        await self._register(by_queue, again=created)
        for (queue, outcome), n in Counter((o.queue, o.outcome) for o in outcomes).items():
            metrics.child(metrics.JOBS_ENQUEUED, queue, outcome).inc(n)
        return EnqueueResult(outcomes, created)

    async def schedule_far(
        self, queue: str, items: Sequence[tuple[str, int]], *, now_ms: int | None = None
    ) -> list[str]:
        """Index far-future jobs whose records the schedule topic keeps (``(id, run_at)`` each); per job
        ``scheduled``, or ``held`` when Redis already has the job (its record wins)."""
        if not items:
            return []
        args = [len(items), *(x for item in items for x in item)]
        outcomes = replies.far(await self._run("schedule_far", queue, args, now_ms))
        await self._register([queue])
        return outcomes

    async def drop_far(self, queue: str, ids: Sequence[str], *, now_ms: int | None = None) -> int:
        """Forget index entries of far-future jobs whose records the schedule topic tombstoned."""
        if not ids:
            return 0
        return int((await self._run("drop_far", queue, list(ids), now_ms))[1])

    async def far_run_at(self, queue: str, job_id: str) -> int | None:
        """The ``run_at`` of a far-future job still in the schedule topic (None: not there)."""
        async with codes.redis_errors("far"):
            return await farreads.far_run_at(self._client, queue, job_id)

    async def raise_fence(self, queues: Iterable[str], *, fence: int, source: str) -> None:
        """Record ``fence`` as the newest for ``source`` in each queue (a new relay term does this before
        its first write, so a stale holder is refused even in queues the new one has not written yet).
        Raises :class:`codes.FenceRejected` when a newer fence is already there."""
        for queue in queues:
            replies.fence(await self._run("enqueue_batch", queue, [source, fence, 0], None), source, fence)


_ROWS = msgspec.msgpack.Encoder()


def _job_rows(batch: Sequence[Envelope], origins: Mapping[str, str], parents: Mapping[str, str]) -> bytes:
    """``enqueue_batch.lua``'s rows (its header names the 14 values), packed as one MessagePack array.
    The envelope goes as a MessagePack string (Redis's cmsgpack reads no binary type; it is UTF-8 JSON)."""
    rows = []
    for env in batch:
        meta = "\n".join(f"{k}={v}" for k, v in env.meta.items()) if env.meta else ""
        graph = f"{env.graph['id']}\t{env.graph['node']}" if env.graph else ""
        rows.append(
            (
                env.id,
                encode(env).decode(),
                env.priority,
                "" if env.run_at is None else env.run_at,
                "" if env.expires_at is None else env.expires_at,
                env.excl or "",
                env.kind,
                "" if env.max_attempts is None else env.max_attempts,
                "" if env.lease_ms is None else env.lease_ms,
                meta,
                origins.get(env.id, ""),
                env.enqueued_at,
                graph,
                parents.get(env.id, ""),
            )
        )
    return _ROWS.encode(rows)
