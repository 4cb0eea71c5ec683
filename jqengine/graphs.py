"""Task graphs in Redis: the graph's own slot, and the cross-slot hand-offs between it and its nodes' queues.

A graph's state (``jobq:graph:{<id>}:*``, :class:`jqengine.keys.GraphKeys`) and each node's job (in the
node's queue) live in different slots, so no script can touch both. Every hand-off is therefore two
atomic, idempotent steps with a durable record in between, and a repair that redoes the second:

* **graph → queue (release)**: ``graph_create`` / ``graph_report`` / ``graph_retry`` mark nodes ready and
  add them to the graph's ``rel`` set; the caller enqueues their jobs (ids derived from graph, node and
  generation: enqueuing twice is a duplicate) and only then removes them from ``rel``.
* **queue → graph (report)**: when a node's job finishes, the same script (``lua/lib/finish.lua``)
  writes its outcome into the queue's ``gdone`` hash; the caller (the worker right away, else the
  scheduler) runs ``graph_report`` (counted once per node and generation) and only then deletes the entry.

A crash between two steps leaves a ``rel`` member or a ``gdone`` entry; the scheduler service finds both
(:meth:`Graphs.report_finished`, :meth:`Graphs.repair_graph`) and finishes the hand-off. Nothing polls a
waiting node: it exists only in its graph until its parents finished.

The second step erases the only record of the first, so it waits until the first step's writes are on
the replicas (``WAIT``, :mod:`jqengine.replication`; where a master has an online replica): a master
that dies and is replaced by a replica that lacks the first step then still holds the record, and the
repair redoes the step — where otherwise a released node's job, or a node's report, would be gone for good
and the graph would never finish. Not confirmed in :data:`REPLICA_WAIT_MS`: the record stays for the repair.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from jqcore import metrics
from jqcore.clock import now_ms as _now
from jqcore.envelope import Envelope
from jqcore.errors import GraphConflict, GraphInvalid, GraphNotFound
from jqcore.graphs import GraphSpec, Node, node_job_id, parse
from jqcore.testsignal import TestSignal
from jqengine import codes, reads
from jqengine.graphmodels import (
    GraphInfo,
    NodeInfo,
    NodeInputs,
    ParentOutcome,
    Reply,
    node_of,
    parse_edges,
    parse_reply,
)
from jqengine.keys import ENDED_GRAPHS_KEY, GRAPHS_KEY, GraphKeyName, GraphKeys, QueueKeys
from jqengine.models import CancelResult, EnqueueOutcome, EnqueueResult, StreamEvent
from jqengine.redisconn import RedisClient, text
from jqengine.replication import ReplicaWait, first_step_replicated, recording_writes
from jqengine.scripts import SCRIPTS

__all__ = ["REPAIR_AFTER_MS", "GraphSignals", "Graphs", "RunScript"]

RunScript = Callable[[str, Sequence[str], Sequence[Any], "int | None"], Awaitable[Any]]
"""The engine's script runner: (script name, keys, args after ``now``, now or None) → the raw reply."""
EnqueueJobs = Callable[[Sequence[Envelope]], Awaitable[EnqueueResult]]
"""The engine's batch enqueue (a released node's job goes through it like any other job)."""
CancelJob = Callable[[str, str, str], Awaitable[CancelResult]]
"""The engine's cancel: (queue, job id, reason)."""
SettleOther = Callable[[str, str, dict[str, Any]], Awaitable[None]]
"""Hands on a ``gdone`` entry that is not a graph node's: (queue, field, entry)."""

REPLICA_WAIT_MS = 1000
"""How long a hand-off's second step waits for the first step's writes to reach a replica."""
REPAIR_AFTER_MS = 2000
"""A release or report older than this without its second step is repaired by the scheduler (younger:
the process that made it is most likely finishing it)."""
ENDED_GRAPHS_KEPT = 10_000
"""The ended graphs the dashboard can list (the newest; older ones are found by id while Redis keeps them)."""
_TERMINAL_JOB = {"completed", "errored", "canceled", "expired"}


@dataclass
class GraphSignals:
    """What the graph operations of one engine report to a test that listens (:mod:`jqcore.testsignal`)."""

    ended: TestSignal[tuple[str, str]] = field(default_factory=lambda: TestSignal("graph ended"))
    """A graph reached its end through this engine (a node's report, a cancel, its deadline):
    (graph id, state)."""


class Graphs:
    """The graph operations of one :class:`~jqengine.Engine` (``engine.graphs``). They reach the
    engine only through what it hands over: its client, its script runner, its batch enqueue and its
    cancel."""

    def __init__(
        self,
        client: RedisClient,
        run_script: RunScript,
        enqueue: EnqueueJobs,
        cancel_job: CancelJob,
        clock: Callable[[], int] = _now,
        settle_other: SettleOther | None = None,
        replicas: ReplicaWait | None = None,
    ) -> None:
        self._client = client
        self._replicas = replicas
        """Confirms a hand-off's first step on the replicas before its second step (None: never waits)."""
        self._clock = clock
        """The engine's reading of Redis's clock: a graph's stamps and deadlines are on the clock its
        jobs' transitions use, whatever this host's clock says."""
        self._run_script = run_script
        self._enqueue = enqueue
        self._cancel_job = cancel_job
        self._settle_other = settle_other
        """Hands on the ``gdone`` entries that are not a graph node's (tail calls: :mod:`~.tails`)."""
        self.signals = GraphSignals()

    async def _run(self, name: str, graph_id: str, args: Sequence[Any], now: int | None) -> Reply:
        keys = GraphKeys(graph_id).for_script(cast("tuple[GraphKeyName, ...]", SCRIPTS[name].keys))
        return parse_reply(await self._run_script(name, keys, args, now))

    # ---- submission ------------------------------------------------------------------------------
    async def create(self, spec: GraphSpec, *, now_ms: int | None = None) -> str:
        """Store a graph and release its roots; ``stored``, ``duplicate`` (the id exists: nothing
        changes, but its unconfirmed releases are finished) or ``taken`` (the id is a graph of another
        home queue: a graph id belongs to the queue it was made for)."""
        now = now_ms or self._clock()
        async with codes.redis_errors("graphs"):
            await self._client.zadd(GRAPHS_KEY, {spec.id: now}, nx=True)
        children = spec.children()
        args: list[Any] = [
            spec.id,
            spec.queue,
            spec.on_failure.name if spec.on_failure else "",
            spec.deadline_at or "",
            int(spec.cancel_on_failure),
            spec.retention_ms,
            len(spec.all_nodes()),
        ]
        for node in spec.all_nodes():
            doc = node.to_doc()
            doc.pop("parents", None)
            args += [
                node.name,
                orjson.dumps(doc),
                "\n".join(f"{e.parent} {e.policy}" for e in node.parents),
                "\n".join(f"{c} {p}" for c, p in children.get(node.name, [])),
                len(node.parents),
            ]
        reply = await self._run("graph_create", spec.id, args, now)
        if reply.code == codes.Code.STALE:
            return "taken"
        if reply.code == codes.Code.OK:
            metrics.GRAPHS.labels("submitted").inc()
        await self._release(spec.id, reply.released)
        return "stored" if reply.code == codes.Code.OK else "duplicate"

    async def create_from(self, env_id: str, queue: str, args: Any, enqueued_at: int) -> EnqueueOutcome:
        """A ``jobq.graph`` envelope read from Kafka and admitted (``jqcore.admission``: the relay, a
        replay, a rebuild): the graph it carries, refused when its document names another home queue than
        its record's (which is what the topic was checked for) or its id is another queue's graph."""
        try:
            spec = parse(args, now=enqueued_at)
        except GraphInvalid as exc:
            return EnqueueOutcome(env_id, queue, "refused", f"{exc.code}: {exc.message}")
        if spec.queue != queue:
            why = f"graph_invalid: the graph's queue {spec.queue!r} is not its record's {queue!r}"
            return EnqueueOutcome(env_id, queue, "refused", why)
        outcome = await self.create(spec)
        if outcome == "taken":
            why = f"graph_id_taken: graph {spec.id!r} belongs to another queue"
            return EnqueueOutcome(env_id, queue, "refused", why)
        return EnqueueOutcome(env_id, queue, "stored" if outcome == "stored" else "duplicate")

    async def home(self, graph_id: str) -> str | None:
        """The home queue of graph ``graph_id`` (None: no such graph)."""
        return (await self.homes([graph_id]))[0]

    async def homes(self, graph_ids: Sequence[str]) -> list[str | None]:
        """The home queue of each graph (None: no such graph), one pipelined round trip."""
        async with codes.redis_errors("graph"):
            pipe = self._client.pipeline(transaction=False)
            for graph_id in graph_ids:
                pipe.hget(GraphKeys(graph_id).named("graph"), "queue")
            found = await pipe.execute()
        return [text(q) if q is not None else None for q in found]

    # ---- hand-offs -------------------------------------------------------------------------------
    async def _node_jobs(self, graph_id: str, names: Sequence[str]) -> dict[str, tuple[str, Node, int]]:
        """Job id → (node name, definition, generation) of the named nodes that exist."""
        keys = GraphKeys(graph_id)
        async with codes.redis_errors("graph nodes"):
            pipe = self._client.pipeline(transaction=False)
            pipe.hmget(keys.named("nodes"), list(names))
            pipe.hmget(keys.named("gen"), list(names))
            defs, gens = await pipe.execute()
        out = {}
        for name, raw, gen in zip(names, defs, gens, strict=True):
            if raw is not None:
                out[node_job_id(graph_id, name, int(gen or 0))] = (name, node_of(raw), int(gen or 0))
        return out

    async def _release(self, graph_id: str, names: Sequence[str]) -> None:
        """Enqueue the jobs of released nodes, then confirm them (``rel``)."""
        if not names:
            return
        jobs = await self._node_jobs(graph_id, names)
        with recording_writes() as written:
            result = await self._enqueue([node.envelope(graph_id, gen) for _, node, gen in jobs.values()])
        for o in result.outcomes:  # a job that can never be stored (or a tombstone waited) ends its node now
            if o.outcome in ("refused", "canceled"):
                state = "errored" if o.outcome == "refused" else "canceled"
                await self.report(graph_id, jobs[o.id][0], o.id, state, error=o.reason or o.outcome)
        if not await first_step_replicated(self._replicas, written, "release", graph_id):
            return
        async with codes.redis_errors("graph release"):
            await self._client.srem(GraphKeys(graph_id).named("rel"), *names)
        metrics.GRAPH_NODES.labels("released").inc(len(jobs))

    async def report(
        self,
        graph_id: str,
        node: str,
        job_id: str,
        state: str,
        *,
        attempt: int = 0,
        result: bytes | str = b"",
        error: str = "",
        queue: str = "",
        now_ms: int | None = None,
    ) -> codes.Code:
        """Count a node's finished job in its graph (once), then release or cancel what that decides.
        ``queue``: where the job finished (a job of another queue than the node's is no report of it)."""
        args = [node, job_id, state, attempt, result, error, queue]
        reply = await self._run("graph_report", graph_id, args, now_ms)
        if reply.code == codes.Code.OK:
            metrics.GRAPH_NODES.labels(_node_state(state)).inc()
            await self._after(graph_id, reply)
        return reply.code

    async def _after(self, graph_id: str, reply: Reply) -> None:
        if reply.to_cancel:
            await self._cancel_jobs(graph_id, reply.to_cancel, f"graph {graph_id} ended its node")
        await self._release(graph_id, reply.released)
        if reply.state in ("completed", "failed", "canceled"):
            metrics.GRAPHS.labels(reply.state).inc()
            self.signals.ended.signal((graph_id, reply.state))

    async def _cancel_jobs(self, graph_id: str, names: Sequence[str], reason: str) -> None:
        for job_id, (_, node, _) in (await self._node_jobs(graph_id, names)).items():
            await self._cancel_job(node.queue, job_id, reason)

    async def report_finished(
        self, queue: str, ids: Iterable[str] | None = None, *, older_ms: int = 0
    ) -> int:
        """Report the finished graph-node jobs of ``queue`` waiting in its ``gdone`` hash (``ids``: only
        these; ``older_ms``: only entries at least that old), and hand on its tail calls' entries the same
        way (:mod:`jqengine.tails`). Returns how many were handed on."""
        key = QueueKeys(queue).gdone
        async with codes.redis_errors("graph report"):
            if ids is None:
                pairs = list((await self._client.hgetall(key)).items())
            else:
                wanted = list(ids)
                pairs = [
                    (i, v) for i, v in zip(wanted, await self._client.hmget(key, wanted), strict=True) if v
                ]
        now, done = self._clock(), 0
        for job_id, raw in pairs:
            entry = orjson.loads(raw)
            if older_ms and now - int(entry.get("at", 0)) < older_ms:
                continue
            if "graph" not in entry:  # a tail call's hand-off: the same outbox, another reader
                if self._settle_other is not None:
                    with recording_writes() as written:
                        await self._settle_other(queue, text(job_id), entry)
                    if not await first_step_replicated(self._replicas, written, "tail report", text(job_id)):
                        continue
                    async with codes.redis_errors("tail report"):
                        await self._client.hdel(key, job_id)
                    done += 1
                continue
            graph_id, _, node = str(entry["graph"]).partition("\t")
            with recording_writes() as written:
                await self.report(
                    graph_id,
                    node,
                    text(job_id),
                    entry["state"],
                    attempt=int(entry.get("attempt", 0)),
                    result=str(entry.get("result", "")),
                    error=str(entry.get("error", "")),
                    queue=queue,
                )
            if not await first_step_replicated(self._replicas, written, "report", graph_id):
                continue
            async with codes.redis_errors("graph report"):
                await self._client.hdel(key, job_id)
            done += 1
        return done

    # ---- operator actions --------------------------------------------------------------------------
    async def cancel(self, graph_id: str, reason: str = "canceled", *, now_ms: int | None = None) -> bool:
        """Cancel a running graph (its nodes in queues too). False: it had ended already."""
        reply = await self._run("graph_cancel", graph_id, ["canceled", reason, 0], now_ms)
        if reply.code == codes.Code.MISSING:
            raise GraphNotFound(f"no graph {graph_id!r}")
        if reply.code != codes.Code.OK:
            return False
        await self._after(graph_id, reply)
        return True

    async def expire(self, graph_id: str, *, now_ms: int | None = None) -> bool:
        """End a running graph past its deadline (failed); False when it is not (or not running)."""
        reply = await self._run("graph_cancel", graph_id, ["failed", "deadline passed", 1], now_ms)
        if reply.code != codes.Code.OK:
            return False
        await self._after(graph_id, reply)
        return True

    async def retry(
        self, graph_id: str, *, deadline_ms: int | None = None, now_ms: int | None = None
    ) -> list[str]:
        """Run a failed or canceled graph again from what did not complete; returns the nodes released."""
        now = now_ms or self._clock()
        deadline = "" if deadline_ms is None else now + deadline_ms
        reply = await self._run("graph_retry", graph_id, [deadline], now)
        if reply.code == codes.Code.MISSING:
            raise GraphNotFound(f"no graph {graph_id!r}")
        if reply.code == codes.Code.RUNNING:
            raise GraphConflict(f"graph {graph_id!r} is still running")
        if reply.code == codes.Code.FINAL:
            raise GraphConflict(f"graph {graph_id!r} completed: nothing to retry")
        async with codes.redis_errors("graphs"), self._client.pipeline(transaction=False) as pipe:
            pipe.zadd(GRAPHS_KEY, {graph_id: now})
            pipe.zrem(ENDED_GRAPHS_KEY, graph_id)  # running again: open, not ended
            await pipe.execute()
        await self._release(graph_id, reply.released)
        return reply.released

    # ---- repair (the scheduler service) ------------------------------------------------------------
    async def open_graphs(self, limit: int = 10_000) -> dict[str, int]:
        """Graphs in the open-graph index → when they entered it (ms)."""
        async with codes.redis_errors("graphs"):
            pairs: list[Any] = await self._client.zrange(GRAPHS_KEY, 0, limit - 1, withscores=True)
        return {text(g): int(score) for g, score in pairs}

    async def repair_graph(self, graph_id: str, *, now_ms: int | None = None) -> str:
        """Finish releases a crash interrupted, end the graph past its deadline. Returns the graph's
        state (``missing`` when its keys are gone)."""
        now = now_ms or self._clock()
        keys = GraphKeys(graph_id)
        async with codes.redis_errors("graph repair"):
            state, deadline = await self._client.hmget(keys.named("graph"), ["state", "deadline_at"])
            stuck = [text(n) for n in await self._client.smembers(keys.named("rel"))]
        if state is None:
            return "missing"
        if stuck:
            times = await self._client.hmget(keys.named("times"), [f"{n}|r" for n in stuck])
            old = [n for n, t in zip(stuck, times, strict=True) if now - int(t or 0) >= REPAIR_AFTER_MS]
            if old:
                metrics.GRAPH_REPAIRS.labels("release").inc(len(old))
                await self._release(graph_id, old)
        if text(state) == "running" and deadline and int(deadline) <= now:
            await self.expire(graph_id, now_ms=now)
            return "failed"
        return text(state)

    async def ended_graphs(self, limit: int = ENDED_GRAPHS_KEPT) -> dict[str, int]:
        """The graphs that ended most recently → when they left the open-graph index (ms), newest first."""
        async with codes.redis_errors("graphs"):
            pairs: list[Any] = await self._client.zrevrange(ENDED_GRAPHS_KEY, 0, limit - 1, withscores=True)
        return {text(g): int(score) for g, score in pairs}

    async def forget_index(self, graph_id: str, *, ended: bool = True) -> None:
        """Drop a finished (or, not ``ended``, vanished) graph from the open-graph index; a finished one
        joins the index of ended graphs (the newest :data:`ENDED_GRAPHS_KEPT`)."""
        async with codes.redis_errors("graphs"), self._client.pipeline(transaction=False) as pipe:
            pipe.zrem(GRAPHS_KEY, graph_id)
            if ended:
                pipe.zadd(ENDED_GRAPHS_KEY, {graph_id: self._clock()})
                pipe.zremrangebyrank(ENDED_GRAPHS_KEY, 0, -ENDED_GRAPHS_KEPT - 1)
            await pipe.execute()

    async def events(self, graph_id: str, count: int = 1000) -> list[StreamEvent]:
        async with codes.redis_errors("graph events"):
            return await reads.stream_events(self._client, GraphKeys(graph_id).named("gevents"), count)

    async def trim_events(self, graph_id: str, upto: str) -> int:
        async with codes.redis_errors("graph events"):
            return await reads.trim_stream(self._client, GraphKeys(graph_id).named("gevents"), upto)

    # ---- reads -------------------------------------------------------------------------------------
    async def inputs(self, graph_id: str, node: str) -> NodeInputs:
        """What a node's handler receives of its graph: its parents' outcomes (on_failure: every failure)."""
        keys = GraphKeys(graph_id)
        async with codes.redis_errors("graph inputs"):
            pipe = self._client.pipeline(transaction=False)
            pipe.hget(keys.named("nodes"), node)
            pipe.hget(keys.named("parents"), node)
            pipe.hget(keys.named("graph"), "on_failure")
            raw, parents_text, on_failure = await pipe.execute()
        if raw is None:
            return NodeInputs(graph_id, node)
        feed = orjson.loads(raw).get("feed", "none")
        if on_failure is not None and text(on_failure) == node:
            async with codes.redis_errors("graph inputs"):
                errors = await self._client.hgetall(keys.named("errors"))
            failures = sorted(
                ({"node": text(n), **orjson.loads(e)} for n, e in errors.items()),
                key=lambda f: (f.get("state") == "skipped", f.get("at", 0), f["node"]),
            )
            return NodeInputs(graph_id, node, feed, {}, [f for f in failures if f["node"] != node])
        edges = parse_edges(parents_text)
        names = [p for p, _ in edges]
        if not names:
            return NodeInputs(graph_id, node, feed)
        async with codes.redis_errors("graph inputs"):
            pipe = self._client.pipeline(transaction=False)
            pipe.hmget(keys.named("nstate"), names)
            pipe.hmget(keys.named("results"), names)
            pipe.hmget(keys.named("errors"), names)
            states, results, errors = await pipe.execute()
        parents: dict[str, ParentOutcome] = {}
        for (name, policy), st, res, err in zip(edges, states, results, errors, strict=True):
            state = text(st) if st is not None else "missing"
            if state != "completed" and policy == "ignore":
                continue
            if state == "completed":
                parents[name] = ParentOutcome(state, orjson.loads(res) if res else None)
            else:
                e = orjson.loads(err) if err else {}
                parents[name] = ParentOutcome(state, None, e.get("error"), int(e.get("attempt", 0)))
        return NodeInputs(graph_id, node, feed, parents)

    async def get(self, graph_id: str) -> GraphInfo:
        keys = GraphKeys(graph_id)
        async with codes.redis_errors("graph"):
            pipe = self._client.pipeline(transaction=False)
            for name in ("graph", "nodes", "parents", "nstate", "gen", "results", "errors", "times"):
                pipe.hgetall(keys.named(name))
            meta, defs, parents, states, gens, results, errors, times = await pipe.execute()
        if not meta:
            raise GraphNotFound(f"no graph {graph_id!r} (not relayed yet, or past its retention)")
        m = {text(k): text(v) for k, v in meta.items()}
        nodes = []
        for name_b, raw in defs.items():
            name = text(name_b)
            doc = orjson.loads(raw)
            gen = int(gens.get(name_b, 0) or 0)
            res = results.get(name_b)
            err = errors.get(name_b)
            r, f = times.get(f"{name}|r".encode()), times.get(f"{name}|f".encode())
            nodes.append(
                NodeInfo(
                    name=name,
                    queue=doc["queue"],
                    kind=doc["kind"],
                    state=text(states.get(name_b, b"waiting")),
                    job_id=node_job_id(graph_id, name, gen),
                    parents=parse_edges(parents.get(name_b)),
                    gen=gen,
                    result=orjson.loads(res) if res else None,
                    error=orjson.loads(err) if err else None,
                    released_at=int(r) if r else None,
                    finished_at=int(f) if f else None,
                )
            )
        counts = {k[2:]: int(v) for k, v in m.items() if k.startswith("n:") and int(v)}
        return GraphInfo(
            id=graph_id,
            queue=m.get("queue", ""),
            state=m.get("state", ""),
            created_at=int(m.get("created_at", 0)),
            finished_at=int(m["finished_at"]) if m.get("finished_at") else None,
            deadline_at=int(m["deadline_at"]) if m.get("deadline_at") else None,
            reason=m.get("reason") or None,
            on_failure=m.get("on_failure") or None,
            counts=counts,
            nodes=nodes,
        )


def _node_state(job_state: str) -> str:
    return {"completed": "completed", "canceled": "canceled"}.get(job_state, "failed")
