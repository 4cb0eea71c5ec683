"""The rebuild (``jobq rebuild``): the pending state rebuilt from Kafka after Redis lost everything.

``jobq replay`` alone re-runs every job that had already finished in the replayed range (its dedup record
died with Redis). The rebuild asks the lifecycle events first (``jqcore.events``, shipped to the events
topic by the schedulers) what became of each job:

0. **Configurations first**: the kill switches, the queues' configurations and the job types' options kept
   in Consul (:mod:`jqruntime.stores.config`, written by the gateway, the dashboard and ``jobq switch``) go
   back into Redis before any job, where Redis lacks them, so a switched-off kind stays off, an exclusive
   queue is exclusive again and a kind's options (attempts, concurrency, priority) are in force when its
   jobs are written.
1. **Job records**: every record of the job topics (default: every routed topic, like the relay) from
   ``since_ms`` (``--from``, a time) to the end offsets seen at start, read with a throw-away consumer
   (:mod:`jqrecover.replay`'s reading; :mod:`jqrecover.rebuild_read`).
2. **Events**: the events topic from ``--from`` minus a margin (clock skew between producers and
   schedulers) to its end. Per ``(queue, id)`` the latest event is kept: Kafka order, where an event
   counts when its version is higher than the latest one's or its time is later than every event seen
   of that job (a re-shipped duplicate is neither; a job written again after an earlier Redis loss
   starts at version 1 again, later). Only the jobs of the records read (and cron fires) are kept.
3. **Decision per record**: a record of a queue with records waiting undrained in the topic's holding lane
   (``<topic>.held``, from the lane group's committed offsets to its end), from the first of them on, is
   the lane's (set aside, or to be: the queue stays held while the lane holds any of it) and is left to
   the relay's drain, which writes it in order once the queue is released
   (:func:`jqrecover.rebuild_read.held_from`). Otherwise it is skipped when the
   job's latest event is final (``completed``, ``errored`` — dead —, ``canceled``, ``expired``,
   ``deleted``; a graph's ``completed``, ``failed``, ``canceled``) **and** that record belongs to the
   finished run: its own enqueue event says so (the event's ``origin`` is the record), or it was produced
   before the finish (a duplicate that run absorbed). A record produced after the finish is a new run of
   the id (the default dedup policy ``active``) and comes back; so does a job whose latest event is not
   final (a job re-enqueued after it finished, a running one: at least once).
4. **Writing** goes through the engine like a replay (unfenced, the record bytes as stored, each record's
   coordinates as its origin): dedup keeps one job per id. Delayed jobs keep their ``run_at``; jobs due
   beyond the far-future horizon go to the tier as the relay sends them, the schedule topic read first
   (its tombstone: an unscheduled job, skipped; its record: only the index entry comes back).
5. **Graphs**: a graph whose graph-level event is final is skipped; one still running is created again
   from its record and runs whole again (its finished nodes' results died with Redis).
6. **Cron fires** never pass through Kafka: a fire whose latest event is not final (pending at the loss)
   is fired again from its schedule in Consul, under the same id (``cron:<name>:<slot>``).

**The window**: a finish whose event had not reached Kafka when Redis was lost is unknown here, and that
job runs again (see :func:`window`); events and records older than their topics' retention are gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from jqcore.admission import Admission
from jqcore.clock import now_ms
from jqcore.cron import CronSchedule
from jqcore.graphs import GRAPH_KIND
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings, EventSettings, FarSettings, RelayKeys
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqengine import Engine, connect
from jqrecover.errors import RebuildError
from jqrecover.rebuild_cron import CronReport, cron_fires, refire, schedules_of
from jqrecover.rebuild_far import FarTier
from jqrecover.rebuild_read import (
    FINISHED,
    EventIndex,
    Kept,
    Key,
    Latest,
    Read,
    TopicReport,
    final_state,
    read_events,
    read_jobs,
    timestamp_ms,
)
from jqrecover.replay import enqueue_counted, origin_of
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.config import ConfigStore, Restored, read_graph_key, restore

__all__ = [
    "DEFAULT_MARGIN_S",
    "FINISHED",
    "Cadences",
    "CronReport",
    "EventIndex",
    "Latest",
    "RebuildError",
    "RebuildReport",
    "TopicReport",
    "default_topics",
    "final_state",
    "rebuild_from_kafka",
    "window",
]

BATCH = 500
DEFAULT_MARGIN_S = 300
"""Events are read from this long before ``since_ms``: clock skew between producers and schedulers."""
SHIP_LINGER_MS: Final = 5
"""The event shipper's producer ``linger.ms`` (``jqsched.events``)."""


@dataclass(frozen=True, slots=True)
class Cadences:
    """The scheduler's cadences the rebuild's window is told in (:func:`window`), given by the caller (the
    CLI reads them from ``jqsched``): its heartbeat (``JOBQ_SCHEDULER_BEAT_S``), how long a heartbeat
    takes to go stale (``JOBQ_SCHEDULER_STALE_S``), the graph round (``jqsched.service.GRAPH_EVERY_S``) and
    the event shipper's idle wait on the queues it watches (``jqsched.service.EVENTS_IDLE_S``) and how long
    its rounds gather events while the streams are light (``jqsched.service.EVENTS_GATHER_S``)."""

    beat_s: float
    stale_s: float
    graph_every_s: float
    events_idle_s: float
    events_gather_s: float


@dataclass
class RebuildReport:
    since_ms: int
    dry_run: bool
    events_topic: str
    events_from_ms: int
    events: EventIndex
    topics: list[TopicReport]
    cron: CronReport
    window: dict[str, Any]
    configs: Restored

    def as_dict(self) -> dict[str, Any]:
        return {
            "from_ms": self.since_ms,
            "dry_run": self.dry_run,
            "topics": [t.totals() for t in self.topics],
            "events": {
                "topic": self.events_topic,
                "from_ms": self.events_from_ms,
                "read": self.events.read,
                "malformed": self.events.malformed,
                "jobs": len(self.events.jobs),
                "newest_ms": self.events.newest_ms or None,
                "retention_cut_ms": self.events.retention_cut_ms,
            },
            "cron": asdict(self.cron),
            "configs": asdict(self.configs),
            "window": self.window,
        }


def window(cadences: Cadences, events: EventIndex | None = None) -> dict[str, Any]:
    """When the rebuild's guarantee holds: a job whose final event reached Kafka before the loss is never
    run again; one whose final event was still in Redis runs again. Events wait in their queue's stream
    until a scheduler ships them (``jqsched.events``): on a queue an instance already watches, within its
    rounds' gathering (``events_gather_s``; the first events after an idle wait at once: the shipper blocks
    on the streams), then its producer lingers 5 ms and Kafka acknowledges; a new
    queue's first events wait for the next heartbeat (``beat_s``) plus the shipper's idle
    wait on the queues it watched before (``events_idle_s``); after the instance owning a queue died, its
    heartbeat must go stale first (``stale_s``); a graph's own events wait for the graph
    round (``graph_every_s``); while Kafka is away, everything since the outage began.
    ``events``: the delays measured on the events read (Kafka timestamp − event time: when the shipper
    produced it; clock skew between hosts is in it)."""
    s = cadences
    out: dict[str, Any] = {
        "holds_for": "jobs whose final event reached Kafka before the loss, within both topics' retention",
        "shipping_s": {
            "watched_queue": s.events_gather_s + SHIP_LINGER_MS / 1000,
            "new_queue": s.beat_s + s.events_idle_s,
            "after_scheduler_death": s.stale_s + s.beat_s + s.events_idle_s,
            "graph_events": s.graph_every_s,
        },
    }
    if events is not None:
        n = sum(events.delays)
        out["measured_delay_ms"] = {
            "events": n,
            "p50_at_most": events.delay_percentile_ms(0.5),
            "p99_at_most": events.delay_percentile_ms(0.99),
            "max": events.max_delay_ms if n else None,
        }
        out["newest_event_ms"] = events.newest_ms or None
    return out


# ---- the rebuild ----------------------------------------------------------------------------------------
def _decide(
    report: TopicReport, records: list[Read], index: EventIndex, far: FarTier, admission: Admission
) -> list[Kept]:
    kept: list[Kept] = []
    for r, msg, env in records:
        r.read += 1
        if env is None:
            r.malformed += 1
            continue
        if admission.problem(env, msg.value() or b"", msg.headers()) is not None:  # as the relay would
            r.refused += 1
            continue
        start = report.held_from.get((env.queue, r.partition))
        if start is not None and (msg.offset() or 0) >= start:  # the lane's: its drain writes it
            report.held += 1
            continue
        produced = timestamp_ms(msg) or env.enqueued_at
        final = final_state(index.jobs.get((env.queue, env.id)), origin_of(msg), produced)
        if final is None and far.unscheduled(env):
            final = "canceled"
        if final is not None:
            report.skipped[final] = report.skipped.get(final, 0) + 1
            continue
        report.kept += 1
        report.graphs += env.kind == GRAPH_KIND
        kept.append((r, msg, env))
    return kept


async def _write(engine: Engine, far: FarTier, report: TopicReport, kept: list[Kept]) -> None:
    """In chunks of :data:`BATCH`, a chunk never holding one id twice (origins are per id)."""
    chunk: list[Kept] = []
    seen: set[Key] = set()

    async def flush() -> None:
        items = await far.split(engine, chunk, report)
        if items:
            origins = {e.id: origin_of(msg) for _, msg, e in items}
            await enqueue_counted(engine, [(r, e) for r, _, e in items], origins)
        chunk.clear()
        seen.clear()

    for item in kept:
        key = (item[2].queue, item[2].id)
        if key in seen or len(chunk) >= BATCH:
            await flush()
        chunk.append(item)
        seen.add(key)
    if chunk:
        await flush()


def default_topics() -> list[str]:
    """What the relays read: ``JOBQ_RELAY_TOPICS``, else every routed topic (``JOBQ_ROUTES``)."""
    return list(load(RelayKeys).topics or load(RoutingSettings).topics())


async def rebuild_from_kafka(
    since_ms: int,
    topics: Sequence[str] | None = None,
    *,
    dry_run: bool = False,
    cron: bool = True,
    configs: bool = True,
    margin_s: float = DEFAULT_MARGIN_S,
    kafka: KafkaSettings | None = None,
    redis: RedisSettings | None = None,
    events: EventSettings | None = None,
    far: FarSettings | None = None,
    consul: ConsulSettings | None = None,
    cron_settings: CronSettings | None = None,
    routing: RoutingSettings | None = None,
    relay_keys: RelayKeys | None = None,
    cadences: Cadences,
) -> RebuildReport:
    """Rebuild the pending state from Kafka after a Redis loss (see the module's text): the job topics'
    records from ``since_ms`` (ms since the epoch) to their end offsets now, without the jobs the events
    topic knows finished. Settings not given are read from the environment; ``cadences`` (the scheduler's)
    only tell the report's window (:func:`window`). ``configs``: restore the configurations kept in
    Consul first (where Redis lacks them; a dry run lists every one kept). Raises :class:`RebuildError`
    before writing anything when a topic is missing; Redis errors while writing propagate (what was
    written stays written; running it again is safe: dedup)."""
    kafka = kafka or load(KafkaSettings)
    events_settings = events or load(EventSettings)
    topics = list(dict.fromkeys(topics or default_topics()))
    if not topics:
        raise RebuildError("no job topic: pass --topic or set JOBQ_RELAY_TOPICS / JOBQ_ROUTES")
    if margin_s < 0:
        raise RebuildError(f"the margin must not be negative; got {margin_s}")
    read = await asyncio.to_thread(
        read_jobs, kafka, topics, events_settings.topic, since_ms, relay_keys or load(RelayKeys)
    )
    keys = {(env.queue, env.id) for _, records in read for _, _, env in records if env is not None}
    index = EventIndex(lambda key: key in keys or key[1].startswith("cron:"))
    events_from = since_ms - int(margin_s * 1000)
    await asyncio.to_thread(read_events, kafka, events_settings.topic, events_from, index)
    far_tier = FarTier(kafka, far or load(FarSettings), now_ms())
    later = {(e.queue, e.id) for _, records in read for _, _, e in records if e and far_tier.due_later(e)}
    await asyncio.to_thread(far_tier.read_tier, later)
    consul, cron_settings = consul or load(ConsulSettings), cron_settings or load(CronSettings)
    routing = routing or load(RoutingSettings)
    key = await read_graph_key(consul, cron_settings.kv_prefix)
    reports, decided = [], []
    for report, records in read:
        reports.append(report)
        routed = routing if report.topic in routing.topics() else None
        decided.append(_decide(report, records, index, far_tier, Admission(report.topic, routed, [key])))
    del read
    cron_report = CronReport()
    fires = cron_fires(index, keys, cron_report) if cron else {}
    schedules: dict[str, CronSchedule | None] = {}
    if fires:
        schedules = await schedules_of(fires, consul, cron_settings)
    keeper = ConfigKeeper(consul, cron_settings.kv_prefix) if configs else None
    if dry_run:
        restored = await keeper.restore(None) if keeper else Restored()
        await refire(None, fires, schedules, cron_report)
    else:
        restored = await _write_all(
            redis or load(RedisSettings),
            keeper,
            far_tier,
            reports,
            decided,
            fires,
            schedules,
            cron_report,
        )
    return RebuildReport(
        since_ms=since_ms,
        dry_run=dry_run,
        events_topic=events_settings.topic,
        events_from_ms=events_from,
        events=index,
        topics=reports,
        cron=cron_report,
        window=window(cadences, index),
        configs=restored,
    )


@dataclass(frozen=True, slots=True)
class ConfigKeeper:
    """Where the configurations are kept (Consul, :mod:`jqruntime.stores.config`)."""

    consul: ConsulSettings
    prefix: str

    async def restore(self, engine: Engine | None) -> Restored:
        client = consul_client(self.consul)
        try:
            return await restore(ConfigStore(client, self.prefix), engine)
        finally:
            await close_consul(client)


async def _write_all(
    redis: RedisSettings,
    keeper: ConfigKeeper | None,
    far: FarTier,
    reports: list[TopicReport],
    decided: list[list[Kept]],
    fires: dict[str, list[Key]],
    schedules: dict[str, CronSchedule | None],
    cron_report: CronReport,
) -> Restored:
    client = connect(redis)
    engine = Engine(client)
    try:
        restored = await keeper.restore(engine) if keeper else Restored()  # before any job
        for report, kept in zip(reports, decided, strict=True):
            await _write(engine, far, report, kept)
        await refire(engine, fires, schedules, cron_report)
        return restored
    finally:
        await far.close()
        await client.aclose()
