"""The engine: the one door to queue state in Redis or Redis Cluster.

Every state change is one script call (``lua/<name>.lua``, declared with its ``KEYS`` in
:mod:`jqengine.scripts`), so there is never a half-done transition; its reply becomes a typed value in
:mod:`jqengine.replies`. Time comes from the caller (``now_ms``, which keeps tests in control of it),
by default from Redis's own clock (:class:`jqcore.clock.ServerClock`): a caller whose clock is wrong
cannot make a lease expire early, a delayed job run early or a lease live on.

The engine is composed of parts, each over the one :class:`~jqengine.core.Core` (the client, the clock,
the script runner) and none knowing another:

* ``engine.jobs`` (:mod:`~jqengine.jobs`): what a worker does to the jobs it runs — claim, wait for work
  and hand-offs, extend, complete, fail, settle, snooze, hand back, release, cancel running;
* ``engine.timers`` (:mod:`~jqengine.timers`): the scheduler's steps — promote, reap, collect, drop far;
* ``engine.admin`` (:mod:`~jqengine.admin`): cancel, dead letters, forget, configuration, kill switches;
* ``engine.reads`` (:mod:`~jqengine.queries`): jobs, depths, lists, configuration, counters, leases;
* ``engine.events`` (:mod:`~jqengine.streams`): the lifecycle event streams the shipper drains;
* ``engine.graphs`` (:mod:`~jqengine.graphs`) and ``engine.tails`` (:mod:`~jqengine.tails`).

The relay's three calls are the engine's own: :meth:`Engine.enqueue_batch`, :meth:`Engine.schedule_far`
and :meth:`Engine.raise_fence`. The keys services keep beside the queues (stage counters, idempotency
records, presence, far-tier scan markers, push-dispatch configurations) are not the engine's: their owners
in :mod:`jqruntime.stores` write them with a plain client.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import msgspec

from jqcore import metrics
from jqcore.envelope import RESERVED_PREFIX, Envelope, encode
from jqcore.graphs import GRAPH_KIND
from jqengine import replies, waiting
from jqengine.admin import Admin
from jqengine.codes import Code
from jqengine.core import Core, Triple
from jqengine.graphs import REPLICA_WAIT_MS, Graphs
from jqengine.jobs import Jobs
from jqengine.models import EnqueueOutcome, EnqueueResult
from jqengine.queries import Reads
from jqengine.redisconn import RedisClient
from jqengine.replication import ReplicaWait
from jqengine.streams import Events
from jqengine.switchrules import queue_list
from jqengine.tails import Tails
from jqengine.timers import Timers

__all__ = ["Engine", "Triple"]


def _reserved_problem(kind: str, queue: str) -> str | None:
    """:func:`jqcore.admission.reserved_problem`, imported when a ``jobq.*`` kind comes (admission imports
    the routing's settings, which a worker's start-up has no use for)."""
    from jqcore.admission import reserved_problem

    return reserved_problem(kind, queue)


class Engine:
    """Typed access to the Lua transitions of every queue in one Redis (or Redis Cluster)."""

    def __init__(self, client: RedisClient) -> None:
        self.core = core = Core(client)
        self._client = client
        self.clock = core.clock
        """Redis's clock: the ``now`` of every transition a caller does not give one."""
        self.jobs = Jobs(core)
        self.timers = Timers(core)
        self.admin = Admin(core)
        self.reads = Reads(core)
        self.events = Events(core)
        hand_offs = core.replica_wait(None, REPLICA_WAIT_MS)  # cross-slot steps wait for a replica
        self.tails = Tails(client, core.run_script, self.enqueue_batch, self._report, hand_offs)
        self.graphs = Graphs(
            client,
            core.run_script,
            self.enqueue_batch,
            self.admin.cancel,
            core.clock.now,
            self.tails.settle,
            hand_offs,
        )

    @property
    def before_new_queues(self) -> Callable[[list[str]], Awaitable[Sequence[str]]] | None:
        """Called by an enqueue with the queues Redis has no configuration of (see
        :attr:`jqengine.core.Core.before_new_queues`): the relay restores their kept settings here."""
        return self.core.before_new_queues

    @before_new_queues.setter
    def before_new_queues(self, hook: Callable[[list[str]], Awaitable[Sequence[str]]] | None) -> None:
        self.core.before_new_queues = hook

    async def now(self) -> int:
        """Redis's clock now (ms)."""
        return await self.core.now()

    def replica_wait(self, replicas: int | None, timeout_ms: int) -> ReplicaWait:
        """``WAIT`` on the masters a task wrote: the relay's check that a batch reached the replicas."""
        return self.core.replica_wait(replicas, timeout_ms)

    def block_limit_s(self, wanted_s: float) -> float:
        """``wanted_s`` capped below the client's socket timeout (see :func:`waiting.block_limit_s`)."""
        return waiting.block_limit_s(self._client, wanted_s)

    async def ping(self) -> None:
        """One ``PING`` (readiness checks: does Redis answer this client)."""
        await self.core.ping()

    async def aclose(self) -> None:
        """Close the engine's Redis client (a process that made the engine for itself)."""
        await self.core.aclose()

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
            elif (why := _reserved_problem(env.kind, env.queue)) is None:  # the canary's heartbeat
                by_queue[env.queue].append(env)
            else:
                outcomes.append(EnqueueOutcome(env.id, env.queue, "refused", f"kind_reserved: {why}"))
        created: list[str] = []
        announce = self.core.unannounced(by_queue)
        switches = await self.core.announce(announce) if announce else []
        for queue, batch in by_queue.items():
            args = [source, fence, len(batch), _job_rows(batch, origins or {}, parents or {})]
            listed = [queue_list(queue, switches)] if queue in announce else []
            reply = await self.core.run("enqueue_batch", queue, [*args, *listed], now_ms)
            if replies.code(reply) == Code.UNANNOUNCED:  # its configuration is gone: announce it again
                listed = [queue_list(queue, await self.core.announce([queue]))]
                reply = await self.core.run("enqueue_batch", queue, [*args, *listed], now_ms)
            new, stored = replies.enqueue(batch, reply, source, fence)
            if new:
                created.append(queue)
            outcomes += stored
            metrics.ENQUEUE_BATCH_SIZE.observe(len(batch))
        await self.core.register(by_queue, again=created)
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
        outcomes = replies.far(await self.core.run("schedule_far", queue, args, now_ms))
        await self.core.register([queue])
        return outcomes

    async def raise_fence(self, queues: Iterable[str], *, fence: int, source: str) -> None:
        """Record ``fence`` as the newest for ``source`` in each queue (a new relay term does this before
        its first write, so a stale holder is refused even in queues the new one has not written yet).
        Raises :class:`codes.FenceRejected` when a newer fence is already there."""
        for queue in queues:
            replies.fence(
                await self.core.run("enqueue_batch", queue, [source, fence, 0], None), source, fence
            )


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
