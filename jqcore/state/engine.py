"""The engine: the one door to queue state in Redis or Redis Cluster.

Every state change is one script call (``lua/<name>.lua``, declared with its ``KEYS`` in
:mod:`jqcore.state.scripts`), so there is never a half-done transition; its reply becomes a typed value in
:mod:`jqcore.state.replies`. Reads (a job by id, depths, the dead list, configuration) and waits (a
worker's wake-up, the scheduler) are methods too, so nothing outside ``jqcore.state`` touches a queue key
or needs the raw client for queue state; their implementations live in :mod:`jqcore.state.reads` and
:mod:`jqcore.state.waiting`. Time comes from the caller (``now_ms``, which keeps tests in control of it),
by default from Redis's own clock (:class:`jqcore.clock.ServerClock`): a caller whose clock is wrong
cannot make a lease expire early, a delayed job run early or a lease live on.
"""

from __future__ import annotations

import secrets
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from jqcore import metrics
from jqcore.backoff import Backoff
from jqcore.clock import ServerClock
from jqcore.envelope import Envelope, encode
from jqcore.graphs import GRAPH_KIND
from jqcore.keys import KINDS_KEY, QUEUES_KEY, KeyName, QueueKeys
from jqcore.redisconn import RedisClient
from jqcore.state import codes, reads, replies, waiting
from jqcore.state.graphs import Graphs
from jqcore.state.models import (
    CancelResult,
    ClaimedJob,
    EnqueueOutcome,
    EnqueueResult,
    Failed,
    Forgotten,
    HandedBack,
    JobInfo,
    NotExtended,
    Promoted,
    QueueConfig,
    QueueDepth,
    Released,
    StreamEvent,
)
from jqcore.state.scripts import SCRIPTS, source

__all__ = ["Engine", "Triple"]

Triple = tuple[str, int, str]
"""(job id, attempt, lease token): what proves a worker owns a running job."""

MAX_ERROR_CHARS = 4000
MAX_RESULT_BYTES = 65_536


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Engine:
    """Typed access to the Lua transitions of every queue in one Redis (or Redis Cluster)."""

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self.clock = ServerClock()
        """Redis's clock: the ``now`` of every transition a caller does not give one."""
        self._scripts = {name: client.register_script(source(name)) for name in SCRIPTS}
        self._known_queues: set[str] = set()
        self.graphs = Graphs(self)
        """Task graphs (:mod:`jqcore.state.graphs`)."""

    async def now(self) -> int:
        """Redis's clock now (ms): a ``TIME`` round trip at most every :data:`~jqcore.clock.RESYNC_S`."""
        await self.clock.sync(self.client.time)
        return self.clock.now()

    @staticmethod
    def _keys(name: str, queue: str) -> list[str]:
        return QueueKeys(queue).for_script(cast("tuple[KeyName, ...]", SCRIPTS[name].keys))

    async def _run(self, name: str, queue: str, args: Sequence[Any], now: int | None) -> Any:
        return await self.run_script(name, self._keys(name, queue), args, now)

    async def run_script(self, name: str, keys: Sequence[str], args: Sequence[Any], now: int | None) -> Any:
        """One script call (``now`` first in ``ARGV``), timed and counted; Redis errors mapped. For the
        modules of :mod:`jqcore.state` (queue transitions here, graph ones in :mod:`~jqcore.state.graphs`)."""
        started = time.perf_counter()
        outcome = "ok"
        try:
            async with codes.redis_errors(name):
                return await self._scripts[name](keys=keys, args=[now or await self.now(), *args])
        except Exception:
            outcome = "error"
            raise
        finally:
            metrics.child(metrics.SCRIPT_CALLS, name, outcome).inc()
            metrics.child(metrics.SCRIPT_TIME, name).observe(time.perf_counter() - started)

    # ---- enqueue -----------------------------------------------------------------------------------
    async def enqueue_batch(
        self,
        envelopes: Sequence[Envelope],
        *,
        fence: int = 0,
        source: str = "",
        origins: Mapping[str, str] | None = None,
        now_ms: int | None = None,
    ) -> EnqueueResult:
        """Store jobs (grouped per queue, one script call each). ``source`` names the fence's scope
        (the relay's topic); ``""`` is an unfenced tool write. ``origins`` maps a job id to the Kafka
        record it was read from (``topic/partition/offset``): the same record read again is always a
        duplicate, a new record with a finished job's id follows the queue's dedup policy (an unknown
        origin counts as a re-read). A ``jobq.graph`` envelope creates the task graph it carries
        (``stored``, ``duplicate``, ``refused``). Raises :class:`codes.FenceRejected`."""
        by_queue: dict[str, list[Envelope]] = defaultdict(list)
        outcomes: list[EnqueueOutcome] = []
        for env in envelopes:
            if env.kind == GRAPH_KIND:
                outcomes.append(await self.graphs.create_from(env.id, env.queue, env.args, env.enqueued_at))
            else:
                by_queue[env.queue].append(env)
        created: list[str] = []
        for queue, batch in by_queue.items():
            reply = await self._run(
                "enqueue_batch", queue, [source, fence, len(batch), *_job_args(batch, origins or {})], now_ms
            )
            new, stored = replies.enqueue(batch, reply, source, fence)
            if new:
                created.append(queue)
            outcomes += stored
            metrics.ENQUEUE_BATCH_SIZE.observe(len(batch))
        await self._register(by_queue, again=created)
        for o in outcomes:
            metrics.child(metrics.JOBS_ENQUEUED, o.queue, o.outcome).inc()
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
            score = await self.client.zscore(QueueKeys(queue).far, job_id)
        return None if score is None else int(score)

    async def raise_fence(self, queues: Iterable[str], *, fence: int, source: str) -> None:
        """Record ``fence`` as the newest for ``source`` in each queue (a new relay term does this before
        its first write, so a stale holder is refused even in queues the new one has not written yet).
        Raises :class:`codes.FenceRejected` when a newer fence is already there."""
        for queue in queues:
            replies.fence(await self._run("enqueue_batch", queue, [source, fence, 0], None), source, fence)

    async def _register(self, queues: Iterable[str], again: Iterable[str] = ()) -> None:
        """Add queues to the queue list once per engine; ``again``: queues whose configuration the write
        just created (new to Redis — or Redis lost everything since): registered whatever was known."""
        self._known_queues.difference_update(again)
        new = [q for q in queues if q not in self._known_queues]
        if not new:
            return
        async with codes.redis_errors("register"):  # Redis away here is an outage, not a refusing queue
            await self.client.sadd(QUEUES_KEY, *new)
            defaults = await self.client.hgetall(KINDS_KEY)
        for queue in new:
            # a kind configured for this queue already (before its first job created the queue's
            # configuration) keeps its own options: the defaults only fill in the kinds it lacks
            own = {_s(f).rpartition("|")[0] for f in await self.client.hkeys(QueueKeys(queue).kinds)}
            for kind, options in _kind_defaults(defaults).items():
                if kind not in own:
                    await self._configure_kind_in(queue, kind, options)
        self._known_queues.update(new)

    # ---- worker transitions ----------------------------------------------------------------------------
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
        :class:`codes.FilterInvalid` for a filter on a key the queue does not index. ``worker`` names the
        claimer in the job record and its lifecycle events. ``waiter`` (a pool's unique id) with ``wait_ms``
        > 0 and no filter: when the claim comes back short, the pool is registered for hand-offs for that
        long — new jobs are then claimed for it by the transition that makes them ready
        (:meth:`wait_for_handoff`); any other claim naming ``waiter`` deregisters it."""
        pairs = "\n".join(f"{k}={v}" for k, v in (filter or {}).items())
        now = now_ms if now_ms is not None else await self.now()
        args = [n, lease_ms, secrets.token_hex(8), pairs, worker, wait_ms, waiter]
        return replies.claim(queue, await self._run("claim", queue, args, now), now)

    async def wait_for_handoff(self, queue: str, waiter: str, timeout_s: float) -> list[ClaimedJob] | None:
        """Block until jobs are handed to ``waiter`` (registered by a short :meth:`claim` with
        ``wait_ms``), a wake token signals other work in ``queue`` (``[]``: claim again), or ``timeout_s``
        (None). Handed jobs are leased to the worker already: run them (or release them)."""
        message = await waiting.wait_for_handoff(self.client, queue, waiter, timeout_s)
        if message is None:
            return None
        return replies.handed([message], self.clock.now()) if message else []

    async def unwait(self, queue: str, waiter: str, *, now_ms: int | None = None) -> list[ClaimedJob]:
        """``waiter`` stops waiting for hand-offs in ``queue``: deregistered; returns the jobs handed to
        it meanwhile (leased to it: run or release them)."""
        now = now_ms if now_ms is not None else await self.now()
        return replies.handed((await self._run("unwait", queue, [waiter], now))[1:], now)

    async def extend(
        self, queue: str, owned: Sequence[Triple], lease_ms: int, *, now_ms: int | None = None
    ) -> dict[str, int | NotExtended]:
        """Extend leases (``lease_ms=0``: each job's own lease, else the queue's default); per id the new
        deadline (ms) or why not (``stale`` / ``missing`` / ``canceled``)."""
        args: list[Any] = [lease_ms]
        for job_id, attempt, token in owned:
            args += [job_id, attempt, token]
        reply = await self._run("extend", queue, args, now_ms)
        return replies.extend([t[0] for t in owned], reply)

    async def complete(
        self, queue: str, job: Triple, result: bytes | str | None = None, *, now_ms: int | None = None
    ) -> None:
        """Mark a running job completed (raises StaleLease / JobNotFound)."""
        data = result.encode() if isinstance(result, str) else (result or b"")
        if len(data) > MAX_RESULT_BYTES:
            raise codes.QueueConfigInvalid(f"result of {len(data)} bytes exceeds {MAX_RESULT_BYTES}")
        replies.single(await self._run("complete", queue, [*job, data], now_ms), job[0], "complete")

    async def complete_many(
        self, queue: str, items: Sequence[tuple[Triple, bytes | None]], *, now_ms: int | None = None
    ) -> list[codes.Code]:
        """Complete several running jobs of one queue in one round trip (a pipeline of the ``complete``
        script, each call still atomic on its own). Returns each job's code for :func:`codes.check`."""
        if not items:
            return []
        if isinstance(self.client, RedisCluster):  # cluster pipelines do not load scripts: one call each
            one_by_one: list[codes.Code] = []
            for j, r in items:
                one_by_one.append(replies.code(await self._run("complete", queue, [*j, r or b""], now_ms)))
            return one_by_one
        keys = self._keys("complete", queue)
        now = now_ms if now_ms is not None else await self.now()
        started = time.perf_counter()
        calls = [[now, *job, b"" if len(r or b"") > MAX_RESULT_BYTES else (r or b"")] for job, r in items]
        async with codes.redis_errors("complete"):
            answers = await self._pipelined("complete", keys, calls)
        metrics.child(metrics.SCRIPT_CALLS, "complete", "ok").inc(len(items))
        metrics.child(metrics.SCRIPT_TIME, "complete").observe(time.perf_counter() - started)
        out: list[codes.Code] = []
        for reply in answers:
            if isinstance(reply, Exception):
                raise reply
            out.append(replies.code(reply))
        return out

    async def _pipelined(self, name: str, keys: Sequence[str], calls: Sequence[Sequence[Any]]) -> list[Any]:
        """One round trip of EVALSHA calls. (redis-py's own script pipelining asks SCRIPT EXISTS before
        every execute, a second round trip.) Calls refused with NOSCRIPT (a restarted or flushed Redis)
        did not run: the script is loaded and only those are sent again."""
        assert isinstance(self.client, aioredis.Redis)
        script = self._scripts[name]
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for attempt in range(2):
            pipe = self.client.pipeline(transaction=False)
            for i in todo:
                pipe.evalsha(script.sha, len(keys), *keys, *calls[i])
            got = await pipe.execute(raise_on_error=False)
            again = [
                i for i, r in zip(todo, got, strict=True) if isinstance(r, NoScriptError) and not attempt
            ]
            for i, reply in zip(todo, got, strict=True):
                replies[i] = reply
            if not again:
                break
            await self.client.script_load(script.script)
            todo = again
        return replies

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
        return replies.fail(await self._run("fail", queue, args, now_ms), job[0])

    async def cancel_running(
        self, queue: str, job: Triple, reason: str = "canceled by its handler", *, now_ms: int | None = None
    ) -> None:
        """The job's handler canceled it: its running attempt ends canceled, never retried (one
        transition; raises StaleLease / JobNotFound)."""
        reply = await self._run("cancel_running", queue, [*job, reason[:MAX_ERROR_CHARS]], now_ms)
        replies.cancel_running(reply, job[0])

    async def snooze(self, queue: str, job: Triple, delay_ms: int, *, now_ms: int | None = None) -> int:
        """Put a running job back for ``delay_ms`` without spending its attempt; returns run_at."""
        return replies.snooze(await self._run("snooze", queue, [*job, max(0, delay_ms)], now_ms), job[0])

    async def hand_back(
        self, queue: str, job: Triple, delay_ms: int, dead_after_ms: int, *, now_ms: int | None = None
    ) -> HandedBack:
        """Give back a job this pool has no handler for, attempt refunded, claimable again after
        ``delay_ms``; ``errored`` once pools kept handing it back for ``dead_after_ms``. Returns
        ``handed_back`` or ``errored``."""
        reply = await self._run("hand_back", queue, [*job, max(0, delay_ms), max(0, dead_after_ms)], now_ms)
        return replies.hand_back(reply, job[0])

    async def release(
        self, queue: str, jobs: Sequence[tuple[str, int, str, bool]], *, now_ms: int | None = None
    ) -> dict[str, Released]:
        """Give running jobs back (shutdown): (id, attempt, token, started) → released / errored /
        stale / missing per id."""
        args: list[Any] = []
        for job_id, attempt, token, started in jobs:
            args += [job_id, attempt, token, int(started)]
        reply = await self._run("release", queue, args, now_ms)
        return replies.release([j[0] for j in jobs], reply)

    # ---- admin transitions --------------------------------------------------------------------------
    async def cancel(
        self, queue: str, job_id: str, reason: str = "canceled", *, now_ms: int | None = None
    ) -> CancelResult:
        """Cancel/unschedule: ``canceled`` | ``flagged`` (running) | ``tombstoned`` (not yet here) |
        ``final`` (already finished: nothing changed), with the state the job was in."""
        return replies.cancel(await self._run("cancel", queue, [job_id, reason], now_ms))

    async def promote_due(self, queue: str, limit: int = 1000, *, now_ms: int | None = None) -> Promoted:
        """Delayed → pending for due jobs, never early."""
        return replies.promoted(await self._run("promote_due", queue, [limit], now_ms))

    async def reap_expired(
        self, queue: str, limit: int = 1000, *, now_ms: int | None = None
    ) -> tuple[int, int]:
        """Expired leases; returns (reaped, next lease deadline or -1)."""
        return replies.timer(await self._run("reap_expired", queue, [limit], now_ms))

    async def gc(self, queue: str, limit: int = 1000, *, now_ms: int | None = None) -> int:
        return int(await self._run("gc", queue, [limit], now_ms))

    async def dead_retry(
        self, queue: str, ids: Sequence[str] = (), limit: int = 1000, *, now_ms: int | None = None
    ) -> int:
        return int(await self._run("dead_retry", queue, [limit, *ids], now_ms))

    async def dead_purge(
        self, queue: str, ids: Sequence[str] = (), limit: int = 1000, *, now_ms: int | None = None
    ) -> int:
        return int(await self._run("dead_purge", queue, [limit, *ids], now_ms))

    async def forget(self, queue: str, ids: Sequence[str], *, now_ms: int | None = None) -> list[Forgotten]:
        """Delete finished jobs now so their ids can be enqueued again; per id ``forgotten``,
        ``active`` (not finished: left alone) or ``missing``."""
        if not ids:
            return []
        return replies.forget(await self._run("forget", queue, list(ids), now_ms))

    async def configure_queue(self, queue: str, config: QueueConfig) -> None:
        """Apply a queue's configuration (validated here; see :class:`QueueConfig`)."""
        fields = _config_fields(config)
        await self._run("configure_queue", queue, [x for kv in fields.items() for x in kv], None)
        await self._register([queue])

    async def pause(self, queue: str, paused: bool = True) -> None:
        """Stop (or resume) claims; enqueues are still accepted while paused."""
        await self._run("configure_queue", queue, ["paused", "1" if paused else "0"], None)

    async def configure_kind(
        self,
        kind: str,
        *,
        queues: Iterable[str] | None = None,
        concurrency: int | None = None,
        max_attempts: int | None = None,
        delivery: str = "at_least_once",
    ) -> None:
        """A job type's options in ``queues`` (default: every known queue, and every future one)."""
        if delivery not in ("at_least_once", "at_most_once"):
            raise codes.QueueConfigInvalid(
                f"delivery must be at_least_once or at_most_once, not {delivery!r}"
            )
        if (concurrency is not None and concurrency < 1) or (max_attempts is not None and max_attempts < 1):
            raise codes.QueueConfigInvalid("concurrency and max_attempts must be at least 1")
        options = {"limit": concurrency, "attempts": max_attempts, "delivery": delivery}
        if queues is None:
            await self.client.hset(KINDS_KEY, kind, _encode_kind(options))
            queues = [_s(q) for q in await self.client.smembers(QUEUES_KEY)]
        else:
            queues = list(queues)
            await self._register(queues)
        for queue in queues:
            await self._configure_kind_in(queue, kind, options)

    async def _configure_kind_in(self, queue: str, kind: str, options: Mapping[str, Any]) -> None:
        args = [kind, *("" if options[n] is None else options[n] for n in ("limit", "attempts", "delivery"))]
        await self._run("configure_kind", queue, args, None)

    async def queues(self) -> list[str]:
        async with codes.redis_errors("queues"):
            return sorted(_s(q) for q in await self.client.smembers(QUEUES_KEY))

    # ---- reads (plain commands: they change nothing) ---------------------------------------------------
    async def get_job(self, queue: str, job_id: str) -> JobInfo | None:
        """The job as an admin sees it; None when there is no such job (or GC removed it)."""
        return await reads.get_job(self.client, queue, job_id)

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[JobInfo | None]:
        """Many jobs of one queue, pipelined (benchmarks read thousands)."""
        return await reads.get_jobs(self.client, queue, ids)

    async def far_jobs(self, queue: str, ids: Sequence[str]) -> list[JobInfo | None]:
        """Far-future jobs by id (``list_ids(queue, "far")``), ``scheduled`` with their ``run_at``."""
        return await reads.far_jobs(self.client, queue, ids)

    async def queues_holding(self, queues: Sequence[str], job_id: str) -> list[str]:
        """Which of ``queues`` hold a job with this id (the dashboard's search by exact id)."""
        return await reads.queues_holding(self.client, queues, job_id)

    async def depth(
        self, queue: str, filter: Mapping[str, str] | None = None, *, now: int | None = None
    ) -> QueueDepth:
        """Jobs per state (``by_filter``: pending jobs matching one declared ``meta`` pair)."""
        return await reads.depth(self.client, queue, filter, now=now or await self.now())

    async def list_ids(
        self, queue: str, state: str, offset: int = 0, limit: int = 100, *, newest: bool = False
    ) -> tuple[list[str], int]:
        """Ids of the jobs in one listed state (``reads.LISTED``: pending, delayed, far, running, done,
        dead) in that state's order, and the state's total: the dashboard's lists and searches."""
        return await reads.list_ids(self.client, queue, state, offset, limit, newest=newest)

    async def dead_counts(self, queues: Sequence[str]) -> dict[str, int]:
        """Errored jobs per queue (the dead-letter lists' sizes), pipelined."""
        return await reads.dead_counts(self.client, queues)

    async def dead_list(self, queue: str, offset: int = 0, limit: int = 100) -> list[JobInfo]:
        """Errored jobs, oldest first."""
        return await reads.dead_list(self.client, queue, offset, limit)

    async def queue_config(self, queue: str) -> QueueConfig:
        return await reads.queue_config(self.client, queue)

    async def queue_stats(self, queue: str) -> dict[str, int]:
        """The queue's lifetime counters (enqueued, duplicates, claimed, completed, errored, ...)."""
        return await reads.queue_stats(self.client, queue)

    async def kinds(self, queues: list[str]) -> dict[str, dict[str, Any]]:
        """Every configured job type, its defaults and its options per queue (see :func:`reads.kinds`)."""
        return await reads.kinds(self.client, queues)

    # ---- waits ------------------------------------------------------------------------------------
    async def wait_for_work(self, queues: Sequence[str], timeout_s: float) -> str | None:
        """Block until one of ``queues`` signals work; that queue, or None after ``timeout_s``."""
        return await waiting.wait_for_work(self.client, queues, timeout_s)

    async def past_due(self, queue: str, late_ms: int = 1000, *, now: int | None = None) -> int:
        """Delayed jobs past ``run_at`` and leases past their deadline by more than ``late_ms``."""
        return await reads.past_due(self.client, queue, late_ms, now or await self.now())

    async def wait_for_due(self, queues: Sequence[str], timeout_s: float) -> str | None:
        """Block until a script signals an earlier due time in one of ``queues`` (that queue), or
        ``timeout_s`` passed (None)."""
        return await waiting.wait_for_due(self.client, queues, timeout_s)

    # ---- lifecycle events (jqcore.events; shipped to Kafka by the scheduler service) -----------------
    async def events(self, queue: str, count: int = 1000) -> list[StreamEvent]:
        """The oldest unshipped events of ``queue``."""
        return await reads.events(self.client, queue, count)

    async def trim_events(self, queue: str, upto: str) -> int:
        """Forget the events up to stream entry ``upto`` (Kafka has them)."""
        return await reads.trim_events(self.client, queue, upto)

    async def events_backlog(self, queues: Sequence[str]) -> dict[str, int]:
        return await reads.events_backlog(self.client, queues)

    async def wait_for_events(self, queues: Sequence[str], timeout_s: float) -> bool:
        return await waiting.wait_for_events(self.client, queues, timeout_s)

    def block_limit_s(self, wanted_s: float) -> float:
        """``wanted_s`` capped below the client's socket timeout (see :func:`waiting.block_limit_s`)."""
        return waiting.block_limit_s(self.client, wanted_s)


def _job_args(batch: Sequence[Envelope], origins: Mapping[str, str]) -> list[Any]:
    args: list[Any] = []
    for env in batch:
        meta = "\n".join(f"{k}={v}" for k, v in env.meta.items())
        opt = ["" if x is None else x for x in (env.run_at, env.expires_at)]
        args += [env.id, encode(env), env.priority, *opt, env.excl or "", env.kind]
        args += [
            "" if env.max_attempts is None else env.max_attempts,
            "" if env.lease_ms is None else env.lease_ms,
        ]
        graph = f"{env.graph['id']}\t{env.graph['node']}" if env.graph else ""
        args += [meta, origins.get(env.id, ""), env.enqueued_at, graph]
    return args


def _config_fields(config: QueueConfig) -> dict[str, str]:
    if len(config.filter_keys) > QueueConfig.MAX_FILTER_KEYS:
        raise codes.QueueConfigInvalid(f"at most {QueueConfig.MAX_FILTER_KEYS} filter keys")
    if config.mode == "exclusive" and not config.excl_key:
        raise codes.QueueConfigInvalid("an exclusive queue needs excl_key (the meta key it is exclusive on)")
    if config.lease_ms < 100 or config.max_attempts < 1 or config.retention_ms < 0:
        raise codes.QueueConfigInvalid(
            "lease_ms >= 100, max_attempts >= 1 and retention_ms >= 0 are required"
        )
    if config.dedup not in ("active", "finished"):
        raise codes.QueueConfigInvalid(f"dedup must be active or finished, not {config.dedup!r}")
    if config.dedup_window_ms < 0:
        raise codes.QueueConfigInvalid("dedup_window_ms must be >= 0")
    if config.events_cap < 0:
        raise codes.QueueConfigInvalid("events_cap must be >= 0 (0: no lifecycle events)")
    return {
        "mode": config.mode,
        "excl_key": config.excl_key or "",
        "lease_ms": str(config.lease_ms),
        "max_attempts": str(config.max_attempts),
        "filter_keys": ",".join(config.filter_keys),
        "paused": "1" if config.paused else "0",
        "retention_ms": str(config.retention_ms),
        "dead_retention_ms": str(config.dead_retention_ms),
        "dedup": config.dedup,
        "dedup_window_ms": str(config.dedup_window_ms),
        "events_cap": str(config.events_cap),
    }


def _encode_kind(options: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={'' if v is None else v}" for k, v in options.items())


def _kind_defaults(raw: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind, encoded in raw.items():
        parts = dict(p.split("=", 1) for p in _s(encoded).split(","))
        out[_s(kind)] = {k: (v or None) for k, v in parts.items()}
    return out
