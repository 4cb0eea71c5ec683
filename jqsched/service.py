"""One scheduler instance: a heartbeat in its group, the queues it owns, and their timers.

Every ``beat_s`` the instance records itself alive, reads the live members and the queue list, and keeps
exactly the queues it wins by rendezvous hashing (:mod:`jqruntime.stores.membership`). The timers
(:class:`jqsched.timers.Timers`) promote due delayed jobs, reap expired leases and collect
garbage for those queues, and the event shipper (:mod:`jqsched.events`) moves their lifecycle events to
Kafka, and their counters are sampled for the dashboard's rate charts (:mod:`jqruntime.stores.series`); each
step is one atomic script: a queue kept by two instances for a beat (while
they disagree about who is alive) is only work done twice, never a job run twice or early.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import consul.aio

from jqcore import metrics
from jqcore.aio import cancel_and_wait
from jqcore.clock import now_ms
from jqcore.log import get_logger
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import AuditSettings, CronSettings, EventSettings, FarSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqcore.testsignal import TestSignal
from jqcore.topics import audit_topic, events_topic, schedule_topic
from jqengine import REPAIR_AFTER_MS, Engine, GraphSignals, QueueSignals, RedisClient, connect, memory_info
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.health import Readiness
from jqruntime.lifecycle import Service
from jqruntime.preflight import preflight
from jqruntime.stores import presence, series
from jqruntime.stores.cron import CronStore
from jqruntime.stores.membership import Membership, group_sizes, owned_by
from jqruntime.stores.presence import Presence, process_name
from jqsched.cron import CronFirer
from jqsched.events import EventShipper, EventSignals
from jqsched.far import FarMover, FarSignals
from jqsched.settings import SchedulerSettings
from jqsched.timers import StepResult, Timers, TimerSignals

__all__ = ["SchedulerService", "SchedulerSignals"]

T = TypeVar("T")

log = get_logger("jqsched")

FAR_IDLE_S = 0.2
"""Pause between reads of the schedule topic while nothing arrives."""
EVENTS_IDLE_S = 2.0
"""Longest wait for a new event before the owned queues are read again (they may have changed)."""
EVENTS_GATHER_S = 0.1
"""A shipping round that found less than a batch starts the next this long after its own start: at a
trickle each round then carries what this long gathered, its fixed cost (the reads, the produce and its
acknowledgement, the trim, the wake-ups) paid per many events rather than per handful (issue 58). An event
reaches Kafka this much later at most (plus the producer's linger and the acknowledgement); a round that
found a full batch goes on at once, and so does the first after an idle wait."""
EVENTS_RETRY_S = 1.0
"""Pause after a failed shipping round (Kafka or Redis away) before the next."""
OBSERVE_EVERY_S = 5.0
"""How often a beat also samples the deployment-wide gauges: every scheduler group's live members and
Redis's memory and eviction policy."""
FACT_QUEUES = 50
"""The owned queues its presence record names (it counts them all)."""
GRAPH_EVERY_S = 1.0
"""Seconds between two graph repair rounds (every instance repairs task graphs: reports finished nodes'
outcomes a crashed worker left in its owned queues, finishes releases a crash interrupted, ends graphs past
their deadline and ships their events, for the open graphs it wins by rendezvous hashing)."""
SIGNALS_EVERY_S = 5.0
"""Seconds between two samples of the owned queues' depth, oldest pending age, pause and outcome counters
for the metrics (``jobq_queue_*``: two pipelined Redis round trips for all of them)."""
GRAPH_CREATE_GRACE_MS = 60_000
"""An indexed graph whose keys are missing is dropped from the index only after this long (its relay
indexes it just before creating it)."""


@dataclass
class SchedulerSignals:
    """What a scheduler instance reports to a test that listens (:mod:`jqcore.testsignal`), with the
    groups of the parts it makes in ``start``."""

    dealt: TestSignal[tuple[list[str], list[str]]] = field(default_factory=lambda: TestSignal("dealt"))
    """A beat re-dealt the queues: (the live members it saw, the queues this instance keeps)."""
    graph_closed: TestSignal[tuple[str, str]] = field(default_factory=lambda: TestSignal("graph closed"))
    """A graph this instance owns was found ended (or gone) and left the open-graph index, its events
    shipped when there is a shipper: (graph id, state)."""
    timers: TimerSignals = field(default_factory=TimerSignals)
    """Its timers' (made in ``start``: these are handed to them, so a test can enable them before)."""
    events: EventSignals = field(default_factory=EventSignals)
    """Its event shipper's."""
    graphs: GraphSignals = field(default_factory=GraphSignals)
    """Its engine's graph operations'."""
    far: FarSignals = field(default_factory=FarSignals)
    """Its far-future mover's."""


class SchedulerService(Service):
    health_name = "scheduler"

    def __init__(
        self,
        settings: SchedulerSettings,
        redis: RedisSettings,
        consul_settings: ConsulSettings,
        cron_settings: CronSettings,
        kafka: KafkaSettings,
        far: FarSettings,
        events: EventSettings,
        *,
        client: RedisClient | None = None,
    ) -> None:
        """``client``: a Redis client to use (the caller's, left open) instead of one of its own made on
        start. Connections are made in ``start``: ``engine``, ``timers`` and ``membership`` exist from
        then on; ``cron``, ``mover`` and ``shipper`` also only when their settings turn them on."""
        super().__init__()
        self.settings, self.redis, self.kafka = settings, redis, kafka
        self.consul_settings, self.cron_settings = consul_settings, cron_settings
        self.far_settings, self.events_settings = far, events
        self._given_client = client
        self._client: RedisClient | None = None
        self._engine: Engine | None = None
        self._timers: Timers | None = None
        self._membership: Membership | None = None
        self._presence: Presence | None = None
        self.moved = 0
        """Jobs this instance promoted (delayed → pending) or reaped (lease expired), for its record."""
        self.consul: consul.aio.Consul | None = None
        self.cron: CronFirer | None = None
        self.mover: FarMover | None = None
        self.shipper: EventShipper | None = None
        self.dealt = asyncio.Event()
        """Set after the first beat that dealt the queues (tests and benches wait on it)."""
        self._task: asyncio.Task[None] | None = None
        self._cron_task: asyncio.Task[None] | None = None
        self._far_task: asyncio.Task[None] | None = None
        self._events_task: asyncio.Task[None] | None = None
        self._graph_task: asyncio.Task[None] | None = None
        self._series_task: asyncio.Task[None] | None = None
        self._signals_task: asyncio.Task[None] | None = None
        self._outcomes: dict[str, dict[str, int]] = {}
        """Queue → the engine's outcome counters at the last sample (``jobq_queue_attempts_total`` grows
        by the difference)."""
        self._silent: set[tuple[str, str, str]] = set()
        """(queue, role, worker) of the ``jobq_worker_silent_seconds`` series set at the last sample."""
        self._failing = False
        self._beat_error = ""
        self._beat_ok_at: float | None = None
        self._observed_at = 0.0
        self.graphs_owned: list[str] = []
        self.signals = SchedulerSignals()

    @property
    def client(self) -> RedisClient:
        if self._client is None:
            raise RuntimeError("the scheduler is not started")
        return self._client

    @property
    def engine(self) -> Engine:
        return _started(self._engine)

    @property
    def timers(self) -> Timers:
        return _started(self._timers)

    @property
    def membership(self) -> Membership:
        return _started(self._membership)

    def _presence_started(self) -> Presence:
        return _started(self._presence)

    @property
    def owned(self) -> list[str]:
        return self._timers.queues if self._timers is not None else []

    def _connect(self) -> None:
        """Make the clients and what uses them (the first part of ``start``)."""
        s = self.settings
        self._client = client = self._given_client or connect(self.redis)
        self._engine = engine = Engine(client)
        engine.graphs.signals = self.signals.graphs
        self._membership = Membership(client, s.group, s.name, stale_s=s.stale_s)
        self._presence = Presence(client, "scheduler", process_name(s.name), facts=self._facts)
        self._timers = Timers(engine, batch=s.batch, on_step=self._observe)
        self._timers.signals = self.signals.timers
        if s.cron:
            self.consul = consul_client(self.consul_settings)
            self.cron = CronFirer(CronStore(self.consul, self.cron_settings.kv_prefix), engine, s.name)
        far = self.far_settings
        if s.far and far.enabled:
            self.mover = FarMover(engine, client, self.kafka, far, s.name, clock=engine.clock.now)
            self.mover.signals = self.signals.far
        if s.events:
            self.shipper = EventShipper(engine, self.kafka, self.events_settings)
            self.shipper.signals = self.signals.events

    async def _start(self) -> None:
        self._connect()
        await self._preflight()
        await self.timers.start()
        self._task = asyncio.create_task(self._beat_loop(), name="scheduler:beat")
        await self._presence_started().start()
        if self.cron is not None:
            self._cron_task = asyncio.create_task(self._cron_loop(), name="scheduler:cron")
        if self.mover is not None:
            self._far_task = asyncio.create_task(self._far_loop(), name="scheduler:far")
        if self.shipper is not None:
            self._events_task = asyncio.create_task(self._events_loop(), name="scheduler:events")
        self._series_task = asyncio.create_task(self._series_loop(), name="scheduler:series")
        self._signals_task = asyncio.create_task(self._signals_loop(), name="scheduler:signals")
        self._graph_task = asyncio.create_task(self._graph_loop(), name="scheduler:graphs")
        log.info("scheduler started", name=self.settings.name, group=self.settings.group)

    async def _preflight(self) -> None:
        """Redis must not evict; the scheduler owns the schedule topic (with the far tier), the events
        topic and the audit topic (when it ships events: it has Kafka): created when missing, if allowed,
        else held to the declaration."""
        owns = [schedule_topic(self.far_settings)] if self.mover is not None else []
        if self.shipper is not None:
            owns += [events_topic(self.events_settings), audit_topic(load(AuditSettings))]
        consul = self.consul_settings if self.consul is not None else None  # the cron schedules
        await preflight(redis=(self.client, self.redis), kafka=self.kafka, consul=consul, owns=owns)

    async def _stop(self) -> None:
        for task in (self._signals_task, self._series_task, self._graph_task, self._events_task):
            await cancel_and_wait(task)
        if self.shipper is not None:
            await self.shipper.close()
        await cancel_and_wait(self._far_task)
        if self.mover is not None:
            await self.mover.close()
        await cancel_and_wait(self._cron_task)
        await cancel_and_wait(self._task)
        if self._presence is not None:
            await self._presence.stop()
        if self._membership is not None:
            with contextlib.suppress(Exception):  # Redis away: the others drop us after stale_s instead
                await self._membership.leave()
        if self._timers is not None:
            await self._timers.stop()
        if self._client is not None and self._given_client is None:
            await self._client.aclose()
        await close_consul(self.consul)
        log.info("scheduler stopped", name=self.settings.name)

    async def _beat_loop(self) -> None:
        while True:
            try:
                await self.beat()
                if self._failing:
                    log.info("scheduler beats again", name=self.settings.name)
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: keep the queues we had, log once per outage
                if not self._failing:
                    log.warning("scheduler beat failed; retrying", error=repr(exc))
                self._failing, self._beat_error = True, repr(exc)
            await asyncio.sleep(self.settings.beat_s)

    async def _cron_loop(self) -> None:
        await self.dealt.wait()
        beat_ms = int(self.settings.beat_s * 1000)
        failing = False
        while self.cron is not None:
            try:
                wait_ms = await self.cron.step(self.membership.members, beat_ms)
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Consul away: timers go on; log once per outage
                if not failing:
                    log.warning("cron step failed; retrying", error=repr(exc))
                failing, wait_ms = True, beat_ms
            await asyncio.sleep(wait_ms / 1000)

    async def _far_loop(self) -> None:
        await self.dealt.wait()
        failing = False
        while self.mover is not None:
            try:
                busy = await self.mover.step(self.membership.members)
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Kafka or Redis away: the next step reads again
                if not failing:
                    log.warning("far-future tier step failed; retrying", error=repr(exc))
                failing, busy = True, False
                await asyncio.sleep(1.0)
            if not busy:
                await asyncio.sleep(FAR_IDLE_S)

    async def _events_loop(self) -> None:
        await self.dealt.wait()
        failing = False
        while self.shipper is not None:
            queues = self.owned
            started = time.monotonic()
            try:
                shipped = await self.shipper.ship(queues)
                if failing:
                    log.info("events ship again")
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Kafka or Redis away: the events wait in Redis (capped, counted)
                if not failing:
                    log.warning("shipping events failed; retrying", error=repr(exc))
                failing = True
                self.signals.events.failed.signal(repr(exc))
                await asyncio.sleep(EVENTS_RETRY_S)
                continue
            if not shipped:
                await self.engine.events.wait(queues, EVENTS_IDLE_S)
            elif shipped < self.events_settings.batch:
                await asyncio.sleep(started + EVENTS_GATHER_S - time.monotonic())

    async def _series_loop(self) -> None:
        await self.dealt.wait()
        every_ms = int(self.settings.series_every_s * 1000)
        while True:
            now = now_ms()
            try:
                await self.sample_series(now - now % every_ms)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: this bucket stays empty; the next difference spans it
                log.warning("sampling queue counters failed", error=repr(exc))
            await asyncio.sleep((every_ms - now_ms() % every_ms) / 1000)

    async def sample_series(self, bucket_ms: int) -> None:
        """Record the owned queues' counters for the bucket starting at ``bucket_ms``."""
        queues = self.owned
        stats = {q: await self.engine.reads.queue_stats(q) for q in queues}
        await series.record(self.client, queues, stats, bucket_ms)

    async def _signals_loop(self) -> None:
        await self.dealt.wait()
        failing = False
        while True:
            try:
                await self.sample_signals()
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: the gauges keep their last values; log once per outage
                if not failing:
                    log.warning("sampling queue signals failed", error=repr(exc))
                failing = True
            await asyncio.sleep(SIGNALS_EVERY_S)

    async def sample_signals(self) -> None:
        """Set the owned queues' gauges (depth per state, oldest pending age, paused) and grow their
        outcome counters by what the engine counted since the last sample; a queue this instance no
        longer keeps leaves its series (its new keeper reports it), so no stale value lingers. Then the
        workers silent on an owned queue (:meth:`sample_silent`)."""
        owned = self.owned
        for gone in set(self._outcomes) - set(owned):
            _forget_queue(gone, self._outcomes.pop(gone))
        signals = await self.engine.reads.queue_signals(owned)
        for sig in signals:
            q = sig.queue
            for state in _DEPTH_STATES:
                metrics.child(metrics.QUEUE_DEPTH, q, state).set(getattr(sig, state))
            metrics.child(metrics.QUEUE_OLDEST_PENDING_AGE, q).set(sig.oldest_pending_age_ms / 1000)
            metrics.child(metrics.QUEUE_PAUSED, q).set(int(sig.paused))
            before = self._outcomes.get(q)
            for outcome, count in sig.outcomes.items():
                # first sample of a queue: its series appear at 0 (what happened before is another
                # keeper's or the past's); a count below the last one: the queue was made anew
                grown = 0 if before is None else count - before.get(outcome, 0)
                metrics.child(metrics.QUEUE_ATTEMPTS, q, outcome).inc(count if grown < 0 else grown)
            self._outcomes[q] = dict(sig.outcomes)
        await self.sample_silent(signals)

    async def sample_silent(self, signals: Iterable[QueueSignals]) -> None:
        """``jobq_worker_silent_seconds`` for each worker judged silent on a queue of ``signals`` (the
        owned ones: :func:`jqruntime.stores.presence.silent_queues`, from every claiming process's
        record); the series of a worker no longer silent are dropped."""
        waited = {s.queue: s.oldest_pending_age_ms for s in signals}
        paused = {s.queue for s in signals if s.paused}
        now, flagged = now_ms(), set()
        for c in await presence.claimers(self.client) if waited else []:
            for q in presence.silent_queues(c, now, waited, paused):
                metrics.child(metrics.WORKER_SILENT, q, c.role, c.name).set((now - c.last_claim[q]) / 1000)
                flagged.add((q, c.role, c.name))
        for labels in self._silent - flagged:
            metrics.forget(metrics.WORKER_SILENT, *labels)
        self._silent = flagged

    async def _graph_loop(self) -> None:
        await self.dealt.wait()
        failing = False
        while True:
            try:
                await self.repair_graphs()
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis or Kafka away: the next round repairs
                if not failing:
                    log.warning("graph repair failed; retrying", error=repr(exc))
                failing = True
            await asyncio.sleep(GRAPH_EVERY_S)

    async def repair_graphs(self) -> int:
        """One round: outcomes left in the owned queues' ``gdone`` hashes (a worker died before reporting),
        then the open graphs this instance wins: stuck releases, deadlines, events; graphs that ended
        (events shipped) leave the open-graph index. Returns the hand-offs repaired."""
        graphs = self.engine.graphs
        repaired = 0
        for queue in self.owned:
            n = await graphs.report_finished(queue, older_ms=REPAIR_AFTER_MS)
            if n:
                metrics.GRAPH_REPAIRS.labels("report").inc(n)
                repaired += n
        open_ids = await graphs.open_graphs()
        metrics.GRAPHS_OPEN.set(len(open_ids))
        self.graphs_owned = owned_by(self.settings.name, self.membership.members, list(open_ids))
        now = await self.engine.now()  # Redis's clock: a host running ahead must not expire graphs early
        for graph_id in self.graphs_owned:
            state = await graphs.repair_graph(graph_id, now_ms=now)
            if state == "missing" and now - open_ids[graph_id] < GRAPH_CREATE_GRACE_MS:
                continue  # indexed by a relay that is creating it right now
            if self.shipper is not None and state != "missing":
                await self.shipper.ship_graph(graph_id)
            if state != "running":
                await graphs.forget_index(graph_id, ended=state != "missing")
                self.signals.graph_closed.signal((graph_id, state))
        return repaired

    async def beat(self) -> list[str]:
        """One heartbeat and re-deal; returns the queues this instance keeps from now on."""
        members = await self.membership.beat(self._note())
        queues = [q for q in await self.engine.reads.queues() if self.settings.keeps(q)]
        owned = owned_by(self.settings.name, members, queues)
        if set(owned) != set(self.timers.queues):
            log.info("scheduler owns", queues=len(owned), of=len(queues), members=len(members))
        self.timers.set_queues(owned)
        if self.shipper is not None:
            await self.shipper.observe(owned)
        metrics.SCHEDULER_MEMBERS.set(len(members))
        metrics.SCHEDULER_OWNED.set(len(owned))
        beat_at = time.monotonic()
        if beat_at - self._observed_at >= OBSERVE_EVERY_S:
            try:
                await self.observe_deployment()
            except Exception as exc:  # e.g. an ACL user without INFO: the gauges stay unset, the beat counts
                log.warning("sampling groups and Redis memory failed", error=repr(exc))
        self._beat_ok_at = beat_at  # after the first sample: a ready instance's gauges are set
        self.dealt.set()
        self.signals.dealt.signal((list(members), list(owned)))
        return owned

    async def observe_deployment(self) -> None:
        """Sample what no single service owns: each scheduler group's live members, Redis's memory and
        its eviction policy (``jobq_scheduler_group_members``, ``jobq_redis_*``)."""
        self._observed_at = time.monotonic()
        for group, size in (await group_sizes(self.client, self.settings.stale_s)).items():
            metrics.SCHEDULER_GROUP_MEMBERS.labels(group).set(size)
        metrics.redis_memory(await memory_info(self.client))

    async def _readiness(self, found: Readiness) -> None:
        """Ready: this instance's last heartbeat in its group is younger than ``stale_s`` (so the others
        count it and it keeps its share of the queues)."""
        s, at = self.settings, self._beat_ok_at
        members = self._membership.members if self._membership is not None else []
        found.facts.update(group=s.group, name=s.name, members=len(members), queues=len(self.owned))
        if at is None or time.monotonic() - at > s.stale_s:
            why = self._beat_error or "no heartbeat yet"
            found.add("not_in_group", f"no heartbeat in group {s.group!r} for over {s.stale_s:g} s ({why})")
        elif s.name not in members:
            found.add("not_in_group", f"{s.name!r} is not among the live members of group {s.group!r}")

    def _note(self) -> str:
        """What ``jobq status`` shows this instance keeps."""
        parts = [f"{len(self.timers.queues)} queues"]
        if self.cron is not None and self.cron.owned:
            parts.append(f"{len(self.cron.owned)} cron")
        if self.mover is not None:
            parts.append(f"schedule partitions {','.join(map(str, self.mover.owned)) or '-'}")
        if self.shipper is not None:
            parts.append(f"{self.shipper.shipped} events shipped")
        if self.graphs_owned:
            parts.append(f"{len(self.graphs_owned)} graphs")
        return ", ".join(parts)

    def _facts(self) -> dict[str, Any]:
        """What its presence record says (the dashboard's Workers page): its group, the queues it keeps
        (the first :data:`FACT_QUEUES` named) and what its timers moved."""
        owned = sorted(self.owned)
        return {
            "kind": "scheduler",
            "group": self.settings.group,
            "member": self.settings.name,
            "queues": owned[:FACT_QUEUES],
            "owned": len(owned),
            "note": self._note() if self._timers is not None else "",
            "processed": self.moved,
            "state": "failing" if self._failing else "running",
        }

    def _observe(self, step: StepResult) -> None:
        self.moved += step.promoted + step.reaped
        if step.promoted:
            metrics.SCHEDULER_MOVED.labels(step.queue, "promoted").inc(step.promoted)
        if step.reaped:
            metrics.SCHEDULER_MOVED.labels(step.queue, "reaped").inc(step.reaped)
        lateness = metrics.SCHEDULER_LATENESS.labels(step.queue)
        late_after_ms = self.settings.late_after_s * 1000
        late = 0
        for ms in step.lateness_ms:
            lateness.observe(ms / 1000)
            late += ms > late_after_ms
        if late:
            metrics.SCHEDULER_LATE.labels(step.queue).inc(late)

    def status(self) -> dict[str, Any]:
        return {
            "name": self.settings.name,
            "group": self.settings.group,
            "members": list(self._membership.members) if self._membership is not None else [],
            "owned": self.owned,
            "cron": list(self.cron.owned) if self.cron is not None else [],
            "far": self.mover.status() if self.mover is not None else None,
            "events_shipped": self.shipper.shipped if self.shipper is not None else None,
        }


_DEPTH_STATES = ("pending", "delayed", "running", "dead")


def _forget_queue(queue: str, outcomes: Iterable[str]) -> None:
    """Drop a queue's sampled series (another instance keeps it now, or it was deleted)."""
    for state in _DEPTH_STATES:
        metrics.forget(metrics.QUEUE_DEPTH, queue, state)
    for outcome in outcomes:
        metrics.forget(metrics.QUEUE_ATTEMPTS, queue, outcome)
    metrics.forget(metrics.QUEUE_OLDEST_PENDING_AGE, queue)
    metrics.forget(metrics.QUEUE_PAUSED, queue)


def _started(made: T | None) -> T:
    """What ``start`` made (an error before it ran)."""
    if made is None:
        raise RuntimeError("the scheduler is not started")
    return made
