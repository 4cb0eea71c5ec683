"""The whole pipeline in one document: what ``jobq status``, its full-screen twin and the dashboard show.

Kafka: per topic and partition the end offset, the relay group's committed offset, the lag in records and
in seconds (age of the oldest unrelayed record). Consul: who holds each topic's lock, since when, its
fence (the lock index), and the live rate limits per topic and queue. Redis: every queue's depth per
state, oldest pending age, dead letters, counters; canary health per partition; the gateways, worker pools
and scheduler instances alive, and each claiming process judged silent or not; memory headroom. Each part
is read on its own: one backend down leaves an ``{"error": ...}`` in its place and the others shown.
:func:`alerts` names what needs a person.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

from jqcore import keys
from jqcore.clock import now_ms
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import AuditSettings, CronSettings, HistorySettings, RelayKeys
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqengine import Engine, RedisClient, connect, memory_info
from jqruntime.consulconn import close_consul, consul_client, consul_sync_client
from jqruntime.stores import membership, presence
from jqruntime.stores.cron import CronStore, overview
from jqruntime.stores.history import HistoryStore, QueryLimits
from jqruntime.stores.presence import count_alive
from jqweb import alerting

__all__ = [
    "PAST_DUE_MS",
    "Alert",
    "Sources",
    "alerts",
    "claimer_rows",
    "collect",
    "cron_state",
    "held_rows",
    "history_state",
    "kafka_lag",
    "queue_row",
    "queue_rows",
    "rate_limits",
    "redis_state",
    "relay_locks",
]

PAST_DUE_MS = 1000
"""A job the timers should have moved this long ago counts as past due (no scheduler keeps its queue?)."""
CANARY_LATE_S = 150.0
"""A partition whose last heartbeat is older than this is late (canaries beat every minute)."""
LAG_ALERT_S = 30.0
"""Relay lag (age of the oldest unrelayed record) past which the topic needs a look."""


@dataclass
class Sources:
    """Where to read from: the services' own settings (``load`` each from the environment by default)."""

    routing: RoutingSettings = field(default_factory=lambda: load(RoutingSettings))
    relay: RelayKeys = field(default_factory=lambda: load(RelayKeys))
    kafka: KafkaSettings = field(default_factory=lambda: load(KafkaSettings))
    consul: ConsulSettings = field(default_factory=lambda: load(ConsulSettings))
    redis: RedisSettings = field(default_factory=lambda: load(RedisSettings))
    cron: CronSettings = field(default_factory=lambda: load(CronSettings))
    history: HistorySettings = field(default_factory=lambda: load(HistorySettings))
    audit: AuditSettings = field(default_factory=lambda: load(AuditSettings))

    def topics(self) -> list[str]:
        return list(self.relay.topics) or self.routing.topics()


def kafka_lag(kafka: KafkaSettings, topics: list[str], relay: RelayKeys) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for topic in topics:
        c = Consumer(
            {
                **kafka.client_config(),
                "group.id": relay.group(topic),
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        try:
            md = c.list_topics(topic, timeout=5).topics.get(topic)
            if md is None or md.error is not None:
                rows.append({"topic": topic, "partition": None, "problem": "topic missing"})
                continue
            parts = [TopicPartition(topic, p) for p in sorted(md.partitions)]
            for tp in _committed(c, parts):
                low, high = c.get_watermark_offsets(tp, timeout=5)
                done = tp.offset if tp.offset >= 0 else low
                lag = max(0, high - done)
                rows.append(
                    {
                        "topic": topic,
                        "partition": tp.partition,
                        "end": high,
                        "committed": done,
                        "lag": lag,
                        "lag_s": _lag_seconds(c, tp, done) if lag else 0.0,
                    }
                )
        finally:
            c.close()
    return rows


_COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)
"""Group coordinator answers a fresh broker gives while ``__consumer_offsets`` loads or moves; librdkafka
does not flag them retriable on a ``committed()`` call, but asking again a moment later succeeds."""


def _retriable(exc: BaseException) -> bool:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _COORDINATOR_MOVING)


def _committed(c: Consumer, parts: list[TopicPartition], timeout_s: float = 5.0) -> list[TopicPartition]:
    """The relay group's committed offsets; a retriable refusal (a broker just started: its group
    coordinator still loading) is asked again until ``timeout_s``."""
    for attempt in Retrying(
        retry=retry_if_exception(_retriable),
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.2),
        reraise=True,
    ):
        with attempt:
            return list(c.committed(parts, timeout=timeout_s))
    raise AssertionError("unreachable: tenacity either returns or re-raises")


def _lag_seconds(c: Consumer, tp: TopicPartition, offset: int) -> float | None:
    """Age of the oldest record not yet relayed (its Kafka timestamp)."""
    c.assign([TopicPartition(tp.topic, tp.partition, offset)])
    for msg in c.consume(1, 2.0):
        if msg.error() is None:
            _, ts = msg.timestamp()
            return round(max(0.0, time.time() - ts / 1000), 1)
    return None


def relay_locks(consul_settings: ConsulSettings, topics: list[str], relay: RelayKeys) -> list[dict[str, Any]]:
    """Per topic: the lock holder, how long it held it, the fence (Consul's lock index: each new term
    raises it; Redis refuses writes below the newest fence seen)."""
    with consul_sync_client(consul_settings) as c:  # its HTTP session closed, not left to the GC
        rows = []
        for topic in topics:
            _, entry = c.kv.get(relay.lock_key(topic))
            row: dict[str, Any] = {"topic": topic, "holder": None, "since_s": None, "fence": None}
            if entry and entry.get("Session"):
                try:
                    value = orjson.loads(entry.get("Value") or b"{}")
                except orjson.JSONDecodeError:
                    value = {"holder": (entry.get("Value") or b"").decode()}
                row.update(
                    holder=value.get("holder"),
                    since_s=round(time.time() - value["since"], 1) if "since" in value else None,
                    fence=entry.get("LockIndex"),
                    session=entry.get("Session"),
                )
            rows.append(row)
        return rows


def rate_limits(consul_settings: ConsulSettings, topics: list[str], relay: RelayKeys) -> dict[str, Any]:
    """The live limits the relays apply: ``{"topics": {topic: text}, "queues": {queue: text}}`` (the KV
    value as written: empty or absent is unlimited, ``0`` paused, else jobs per second)."""
    with consul_sync_client(consul_settings) as c:
        out: dict[str, dict[str, str]] = {"topics": {}, "queues": {}}
        for topic in topics:
            _, entry = c.kv.get(relay.rate_key(topic))
            out["topics"][topic] = ((entry or {}).get("Value") or b"").decode()
        folder = relay.queue_rates_folder()
        _, entries = c.kv.get(folder, recurse=True)
        for e in entries or []:
            name = e["Key"][len(folder) :]
            if name:
                out["queues"][name] = (e.get("Value") or b"").decode()
        return out


QUEUE_READS_AT_ONCE = 32
"""Queues read concurrently (each a handful of round trips): thousands of queues in a few hundred ms."""


async def queue_row(engine: Engine, q: str) -> dict[str, Any]:
    """One queue as the overview shows it: depth per state, counters, pause, timers past due, events."""
    d = await engine.reads.depth(q)
    stats = await engine.reads.queue_stats(q)
    config = await engine.reads.queue_config(q)
    names = ("handed_back", "duplicates", "reopened", "events_dropped", "completed", "enqueued")
    return {
        "queue": q,
        **d.as_dict(),
        **{k: stats.get(k, 0) for k in names},
        "paused": config.paused,
        "past_due": await engine.timers.past_due(q, PAST_DUE_MS),
        "events_backlog": (await engine.events.backlog([q]))[q],
        "events_cap": config.events_cap,
    }


async def queue_rows(engine: Engine, queues: list[str]) -> list[dict[str, Any]]:
    gate = asyncio.Semaphore(QUEUE_READS_AT_ONCE)

    async def one(q: str) -> dict[str, Any]:
        async with gate:
            return await queue_row(engine, q)

    return list(await asyncio.gather(*(one(q) for q in queues)))


HELD_FRESH_MS = 10_000
"""A topic's held-queues snapshot older than this is a holder's that is gone: not shown."""


async def held_rows(client: RedisClient, now: int | None = None) -> list[dict[str, Any]]:
    """The queues the relays hold in their topics' holding lanes, and why (``paused``, ``rate``, ``memory``,
    ``draining``): each topic's lock holder rewrites its snapshot every second (``jqrelay.lane``)."""
    now = now if now is not None else now_ms()
    rows = []
    for topic, raw in sorted((await client.hgetall(keys.RELAY_HELD_KEY)).items()):
        snap = orjson.loads(raw)
        if now - int(snap.get("at", 0)) > HELD_FRESH_MS:
            continue
        for queue, q in sorted(snap.get("queues", {}).items()):
            oldest = q.get("oldest")
            rows.append(
                {
                    "topic": topic.decode() if isinstance(topic, bytes) else topic,
                    "queue": queue,
                    "reason": q.get("reason"),
                    "records": q.get("records", 0),
                    "oldest_s": round((now - oldest) / 1000, 1) if oldest else None,
                    "drained_per_s": q.get("drained_per_s", 0.0),
                }
            )
    return rows


async def redis_state(client: RedisClient) -> dict[str, Any]:
    engine = Engine(client)
    queues = await queue_rows(engine, await engine.reads.queues())
    raw = await client.hgetall(keys.CANARY_HEALTH_KEY)
    canary = {(k.decode() if isinstance(k, bytes) else k): orjson.loads(v) for k, v in sorted(raw.items())}
    info = await memory_info(client)  # on a Cluster: the node fullest for its maxmemory
    used, cap = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
    return {
        "queues": queues,
        "canary": canary,
        "gateways": await count_alive(client, "gate"),
        "workers": await count_alive(client, "worker"),
        "dispatchers": await count_alive(client, "dispatcher"),
        "http_workers": await count_alive(client, "http-worker"),
        "dashboards": await count_alive(client, "web"),
        "claimers": claimer_rows(await presence.claimers(client), now_ms(), queues),
        "schedulers": await membership.groups(client),
        "scheduler_groups": await membership.group_sizes(client),
        "memory": {
            "used": used,
            "max": cap,
            "ratio": round(used / cap, 4) if cap else None,
            "policy": str(info.get("maxmemory_policy", "")) or None,
        },
        "switches": [sw.as_dict() for sw in await engine.admin.switches()],
        "held": await held_rows(client),
    }


def claimer_rows(
    claimers: list[presence.Claimer], now: int, queues: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every claiming process (worker pools, dispatchers, HTTP workers) with a record, each judged against
    its queues' rows (:func:`queue_row`: oldest pending age, paused): alive, its idle time per queue, the
    queues it is silent on (:func:`jqruntime.stores.presence.silent_queues`)."""
    waited = {q["queue"]: q.get("oldest_pending_age_ms") for q in queues}
    paused = {q["queue"] for q in queues if q.get("paused")}
    return [c.as_dict(now, presence.silent_queues(c, now, waited, paused)) for c in claimers]


async def cron_state(consul_settings: ConsulSettings, cron: CronSettings) -> list[dict[str, Any]]:
    client = consul_client(consul_settings)
    try:
        return await overview(CronStore(client, cron.kv_prefix), now_ms())
    finally:
        await close_consul(client)


def history_state(settings: HistorySettings) -> dict[str, Any]:
    """What the history tables hold (``jobq history run`` builds them): jobs, the newest event."""
    root = settings.root
    if not root.is_dir():
        return {"path": str(root), "present": False}
    store = HistoryStore(root, QueryLimits.of(settings, timeout=False))
    rows = store.query("SELECT count(*), max(at_ms) FROM current").rows
    jobs, latest = rows[0] if rows else (0, None)
    return {"path": str(root), "present": True, "jobs": jobs, "latest_event_at": latest}


async def collect(
    sources: Sources | None = None, client: RedisClient | None = None, parts: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Read every part (or only ``parts``); a part whose backend failed is ``{"error": "..."}``. With no
    ``client``, one is made for this call from ``sources.redis``."""
    s = sources or Sources()
    topics = s.topics()
    own = client is None
    redis = client if client is not None else connect(s.redis)
    readers: dict[str, Callable[[], Any]] = {
        "kafka": lambda: asyncio.to_thread(kafka_lag, s.kafka, topics, s.relay),
        "locks": lambda: asyncio.to_thread(relay_locks, s.consul, topics, s.relay),
        "rates": lambda: asyncio.to_thread(rate_limits, s.consul, topics, s.relay),
        "redis": lambda: redis_state(redis),
        "cron": lambda: cron_state(s.consul, s.cron),
        "history": lambda: asyncio.to_thread(history_state, s.history),
    }
    wanted = [p for p in readers if not parts or p in parts]
    out: dict[str, Any] = {"at": round(time.time(), 3), "topics": topics}
    try:
        results = await asyncio.gather(*(readers[p]() for p in wanted), return_exceptions=True)
    finally:
        if own:
            await redis.aclose()
    for name, got in zip(wanted, results, strict=True):
        out[name] = {"error": f"{type(got).__name__}: {got}"} if isinstance(got, BaseException) else got
    return out


@dataclass(frozen=True)
class Alert:
    level: str
    """``critical`` or ``warning`` (the rule's severity: page or ticket, :func:`jqweb.alerting.level`)."""
    what: str
    detail: str
    rule: str = ""
    """The alert's name: a rule of ``deploy/prometheus/alerts.yml`` or one of :data:`jqweb.alerting.LOCAL`;
    its runbook is ``docs/operations.md#<name in lower case>``."""

    def as_dict(self) -> dict[str, str]:
        return {"level": self.level, "what": self.what, "detail": self.detail, "rule": self.rule}


def _raise(rule: str, what: str, detail: str) -> Alert:
    return Alert(alerting.level(rule), what, detail, rule)


def alerts(
    snapshot: dict[str, Any],
    dead_growth: dict[str, int] | None = None,
    outcomes: Mapping[str, Mapping[str, int]] | None = None,
) -> list[Alert]:
    """What needs a person: late or failing canaries, relay lag, topics without a relay, dead letters
    growing (``dead_growth``: queue → dead letters added in the last hour, from :mod:`jqweb.series`),
    failing attempts (``outcomes``: queue → completed/retried/errored grown over the last
    :data:`~jqweb.alerting.FAILURE_WINDOW_S`), queues waiting too long, queues held in their topic's
    holding lane too long, Redis memory, eviction and maxmemory, scheduler groups without a member, queues
    no scheduler keeps, unreachable backends. Each names its rule (:mod:`jqweb.alerting`: the Prometheus
    rules' names and severities)."""
    out: list[Alert] = []
    for part in ("kafka", "locks", "redis", "rates", "cron"):
        got = snapshot.get(part)
        if isinstance(got, dict) and "error" in got:
            out.append(_raise("JobqBackendUnreadable", f"{part} unreadable", str(got["error"])))
    redis = snapshot.get("redis")
    if isinstance(redis, dict) and "queues" in redis:
        out += _redis_alerts(redis)
    for queue, grown in sorted((dead_growth or {}).items()):
        if grown > 0:
            out.append(
                _raise(
                    "JobqDeadLettersGrowing", f"dead letters growing in {queue}", f"+{grown} in the last hour"
                )
            )
    out += _failure_alerts(outcomes or {})
    kafka, locks = snapshot.get("kafka"), snapshot.get("locks")
    out += _kafka_alerts(kafka if isinstance(kafka, list) else [])
    for r in locks if isinstance(locks, list) else []:
        if not r.get("holder"):
            out.append(
                _raise(
                    "JobqRelayLeaderMissing", f"no relay for {r['topic']}", "nobody holds the topic's lock"
                )
            )
    return out


def _redis_alerts(redis: dict[str, Any]) -> list[Alert]:
    out: list[Alert] = []
    now = time.time()
    for part, c in redis["canary"].items():
        age = now - c["at"] / 1000 if "at" in c else None
        if not c.get("ok"):
            out.append(_raise("JobqCanaryUnhealthy", f"canary {part} failing", str(c.get("problem"))))
        elif age is not None and age > CANARY_LATE_S:
            out.append(
                _raise("JobqCanaryNotSending", f"canary {part} late", f"last heartbeat {age:.0f} s ago")
            )
    out += _memory_alerts(redis.get("memory") or {})
    out += _queue_alerts(redis["queues"])
    out += _held_alerts(redis.get("held", []))
    for sw in redis.get("switches", []):
        what = " ".join(p for p in (sw["queue"], sw["kind"] or "every kind", _meta_text(sw["meta"])) if p)
        by = f" by {sw['by']}" if sw.get("by") else ""
        out.append(_raise("JobqKillSwitch", f"kill switch {sw['name']} ({sw['action']})", f"{what}{by}"))
    out += _scheduler_alerts(redis)
    for c in redis.get("claimers", []):
        for q in c["silent"]:
            alive = "" if c["alive"] else f"; no heartbeat for {c['beat_age_s']:.0f} s"
            detail = f"claimed nothing from {q} for {c['idle_s'][q]:.0f} s while its jobs waited{alive}"
            out.append(_raise("JobqWorkerSilent", f"{c['role']} {c['name']} silent", detail))
    return out


def _queue_alerts(queues: list[dict[str, Any]]) -> list[Alert]:
    out: list[Alert] = []
    for q in queues:
        age_ms = q.get("oldest_pending_age_ms") or 0
        if age_ms > alerting.BACKLOG_AGE_S * 1000 and not q.get("paused"):
            out.append(
                _raise(
                    "JobqQueueBacklogOld",
                    f"queue {q['queue']} waits",
                    f"next job due {age_ms / 1000:.0f} s ago",
                )
            )
        if q.get("past_due"):
            out.append(
                _raise("JobqQueuePastDue", f"queue {q['queue']} past due", f"{q['past_due']} timers late")
            )
    return out


def _held_alerts(held: list[dict[str, Any]]) -> list[Alert]:
    """A queue whose oldest record has waited in its topic's holding lane longer than
    :data:`~jqweb.alerting.HELD_AGE_S` (rows of :func:`held_rows`), with why it is held."""
    return [
        _raise(
            "JobqQueueHeld",
            f"queue {h['queue']} held ({h['reason']})",
            f"{h['records']} records in {h['topic']}.held, the oldest for {h['oldest_s']:.0f} s",
        )
        for h in held
        if h["records"] and (h.get("oldest_s") or 0) > alerting.HELD_AGE_S
    ]


def _scheduler_alerts(redis: dict[str, Any]) -> list[Alert]:
    out: list[Alert] = []
    if not redis.get("schedulers"):
        out.append(
            _raise("JobqSchedulerAbsent", "no scheduler alive", "delayed jobs, retries and leases wait")
        )
    for group, members in sorted((redis.get("scheduler_groups") or {}).items()):
        if members == 0 and redis.get("schedulers"):
            out.append(
                _raise(
                    "JobqSchedulerGroupEmpty",
                    f"scheduler group {group} empty",
                    "no live member: its queues' delayed jobs, retries and leases wait",
                )
            )
    return out


def _memory_alerts(memory: Mapping[str, Any]) -> list[Alert]:
    out: list[Alert] = []
    ratio, policy = memory.get("ratio"), memory.get("policy")
    if ratio is not None and ratio > alerting.MEMORY_HIGH:
        out.append(_raise("JobqRedisMemoryHigh", "Redis memory", f"{ratio:.0%} of maxmemory used"))
    if "max" in memory and not memory["max"]:
        out.append(
            _raise(
                "JobqRedisNoMaxmemory",
                "Redis has no maxmemory",
                "the relays cannot hold jobs in Kafka before Redis runs out: set maxmemory (noeviction)",
            )
        )
    if policy and policy != "noeviction":
        out.append(
            _raise(
                "JobqRedisEvictionPolicy",
                "Redis evicts",
                f"maxmemory-policy {policy}: jobs may vanish silently",
            )
        )
    return out


def _failure_alerts(outcomes: Mapping[str, Mapping[str, int]]) -> list[Alert]:
    out: list[Alert] = []
    for queue, grown in sorted(outcomes.items()):
        failed = grown.get("retried", 0) + grown.get("errored", 0)
        ended = failed + grown.get("completed", 0)
        if failed >= alerting.FAILURE_MIN and failed > alerting.FAILURE_RATIO * ended:
            minutes = alerting.FAILURE_WINDOW_S // 60
            detail = f"{failed} of {ended} attempts failed in {minutes} min ({failed / ended:.0%})"
            out.append(_raise("JobqJobFailureRate", f"jobs of {queue} failing", detail))
    return out


def _meta_text(meta: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in meta.items())


def _kafka_alerts(rows: list[dict[str, Any]]) -> list[Alert]:
    out: list[Alert] = []
    for r in rows:
        where = f"{r['topic']}[{r['partition']}]"
        if r.get("problem"):
            out.append(_raise("JobqTopicMissing", f"topic {r['topic']}", str(r["problem"])))
        elif (r.get("lag_s") or 0) > LAG_ALERT_S:
            out.append(
                _raise("JobqRelayLagGrowing", f"relay lag {where}", f"{r['lag']} records, {r['lag_s']} s")
            )
    return out
