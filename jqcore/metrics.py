"""Every Prometheus metric of jobq, defined in this one module.

Rules: the ``jobq_`` prefix, base units (seconds, bytes), bounded labels only (``queue``, ``kind``,
``topic``, ``partition``, ``outcome``, ``stage``) — never a job id. Services import the metric objects
from here and expose them with :func:`start_http_server` or :func:`render` in their own HTTP app.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.multiprocess import MultiProcessCollector

__all__ = [
    "AUDIT_SHIPPED",
    "CANARY_HEALTHY",
    "CANARY_LATENCY",
    "CANARY_SENT",
    "CONTENT_TYPE",
    "DISPATCHED",
    "DISPATCH_IN_FLIGHT",
    "DISPATCH_LATENCY",
    "DISPATCH_OUTCOMES",
    "ENQUEUE_BATCH_SIZE",
    "EVENTS_BACKLOG",
    "EVENTS_DROPPED",
    "EVENTS_SHIPPED",
    "GATE_JOBS_PRODUCED",
    "GATE_PRODUCE_FAILURES",
    "GATE_REQUESTS",
    "GATE_REQUEST_TIME",
    "GRAPHS",
    "GRAPHS_OPEN",
    "GRAPH_NODES",
    "GRAPH_REPAIRS",
    "HISTORY_LAG",
    "HISTORY_PROGRESS_TIME",
    "JOBS_ENQUEUED",
    "JOBS_FINISHED",
    "JOBS_IN_FLIGHT",
    "JOBS_STARTED",
    "JOB_QUEUE_WAIT",
    "JOB_RUN_TIME",
    "LATENCY_BUCKETS",
    "QUEUE_ATTEMPTS",
    "QUEUE_DEPTH",
    "QUEUE_OLDEST_PENDING_AGE",
    "QUEUE_PAUSED",
    "REDIS_INFO",
    "REDIS_MEMORY_MAX",
    "REDIS_MEMORY_USED",
    "RELAY_BATCH_TIME",
    "RELAY_HELD",
    "RELAY_HELD_TIME",
    "RELAY_LAG",
    "RELAY_LANE_OLDEST",
    "RELAY_LANE_RECORDS",
    "RELAY_LEADER",
    "RELAY_MISROUTED",
    "RELAY_QUEUE_BUDGET",
    "RELAY_QUEUE_HELD",
    "RELAY_QUEUE_MEMORY",
    "RELAY_QUEUE_OVER",
    "RELAY_QUEUE_RATE_LIMIT",
    "RELAY_RATE_LIMIT",
    "RELAY_RECORDS",
    "SCHEDULER_CRON",
    "SCHEDULER_FAR_MOVED",
    "SCHEDULER_GROUP_MEMBERS",
    "SCHEDULER_LATE",
    "SCHEDULER_LATENESS",
    "SCHEDULER_MEMBERS",
    "SCHEDULER_MOVED",
    "SCHEDULER_OWNED",
    "SCRIPT_CALLS",
    "SCRIPT_TIME",
    "SERVICE_READY",
    "WORKER_CLAIMS",
    "WORKER_SILENT",
    "forget",
    "redis_memory",
    "render",
    "serve",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Seconds; from half a millisecond (a Lua call) to a minute (a slow job)."""


def _latency(name: str, documentation: str, labels: list[str]) -> Histogram:
    """A histogram of seconds over :data:`LATENCY_BUCKETS` (every latency of jobq uses the same ones,
    so dashboards can compare hops)."""
    return Histogram(name, documentation, labels, buckets=LATENCY_BUCKETS)


# --- every service -------------------------------------------------------------------------------------
SERVICE_READY = Gauge(
    "jobq_service_ready",
    "1 when the process's readiness check passed at the last /readyz or /metrics request, else 0 "
    "(relays, schedulers, worker pools, canaries: jqruntime/health.py)",
    ["service"],
)

# --- engine (Redis) ---------------------------------------------------------------------------------
SCRIPT_CALLS = Counter(
    "jobq_engine_script_calls_total", "Lua transitions executed, by script and outcome", ["script", "outcome"]
)
SCRIPT_TIME = _latency("jobq_engine_script_seconds", "Time of one Lua transition round trip", ["script"])
JOBS_ENQUEUED = Counter(
    "jobq_jobs_enqueued_total",
    "Jobs offered to the engine, by outcome (stored, duplicate, refused)",
    ["queue", "outcome"],
)
ENQUEUE_BATCH_SIZE = Histogram(
    "jobq_engine_enqueue_batch_jobs", "Jobs per enqueue batch", buckets=(1, 10, 50, 100, 250, 500, 1000, 5000)
)
QUEUE_DEPTH = Gauge(
    "jobq_queue_depth_jobs",
    "Jobs in a queue by state (pending, delayed, running, dead), sampled by the scheduler that keeps the "
    "queue every 5 s",
    ["queue", "state"],
)
QUEUE_OLDEST_PENDING_AGE = Gauge(
    "jobq_queue_oldest_pending_age_seconds",
    "How long the job at the head of the queue's ready set has waited since it was due (run_at, else "
    "enqueued_at); 0 when nothing is pending. FIFO queues: the oldest pending job. Sampled by the scheduler "
    "that keeps the queue",
    ["queue"],
)
QUEUE_PAUSED = Gauge(
    "jobq_queue_paused", "1 while the queue is paused (claims stop on purpose), else 0; sampled", ["queue"]
)
QUEUE_ATTEMPTS = Counter(
    "jobq_queue_attempts_total",
    "Attempts ended in the queue by outcome: completed, retried (failed, runs again), errored (failed for "
    "good: dead-lettered), canceled. Every consumer's (pools, HTTP workers, the dispatcher): the increase "
    "of the engine's own counters, exported by the scheduler that keeps the queue",
    ["queue", "outcome"],
)

# --- workers ----------------------------------------------------------------------------------------
JOBS_STARTED = Counter("jobq_jobs_started_total", "Jobs handed to a handler", ["queue", "kind"])
JOBS_FINISHED = Counter(
    "jobq_jobs_finished_total",
    "Job attempts finished, by outcome (succeeded, failed, retried, canceled, snoozed, timeout, lost)",
    ["queue", "kind", "outcome"],
)
JOBS_IN_FLIGHT = Gauge("jobq_jobs_in_flight", "Jobs running in this process", ["queue"])
JOB_RUN_TIME = _latency("jobq_job_run_seconds", "Handler run time of one attempt", ["queue", "kind"])
WORKER_CLAIMS = Counter(
    "jobq_worker_claims_total",
    "Jobs this pool claimed (claims, hand-offs and refills alike), per queue it serves; every served "
    "queue's series exists from the start (0), so a pool that never claimed shows",
    ["queue"],
)
WORKER_SILENT = Gauge(
    "jobq_worker_silent_seconds",
    "Seconds since a silent worker (pool, HTTP worker or dispatcher) last claimed from a queue it serves: "
    "one series per worker and queue judged silent (jqruntime.stores.presence.silent_queues), none "
    "otherwise. Sampled by the scheduler that keeps the queue",
    ["queue", "role", "worker"],
)
JOB_QUEUE_WAIT = _latency(
    "jobq_job_queue_wait_seconds",
    "From when a job was due (run_at, else enqueued_at) to when a worker started it",
    ["queue"],
)

# --- audit (jqruntime.stores.audit) -------------------------------------------------------------------------
AUDIT_SHIPPED = Counter(
    "jobq_audit_shipped_total",
    "Audit records sent to the Kafka audit topic by outcome (failed: not confirmed after the producer's "
    "retries; the record stays in the Redis stream)",
    ["outcome"],
)

# --- gateway (HTTP -> Kafka) --------------------------------------------------------------------------
GATE_REQUESTS = Counter(
    "jobq_gate_requests_total",
    "Gateway requests by route, status and token name (configured names and anonymous only)",
    ["route", "method", "status", "token"],
)
GATE_REQUEST_TIME = _latency("jobq_gate_request_seconds", "Gateway request time by route", ["route"])
GATE_JOBS_PRODUCED = Counter(
    "jobq_gate_jobs_produced_total", "Jobs Kafka confirmed for the gateway", ["queue", "topic"]
)
GATE_PRODUCE_FAILURES = Counter(
    "jobq_gate_produce_failures_total", "Enqueue requests refused because Kafka did not confirm", ["topic"]
)

# --- relay (Kafka -> Redis) ---------------------------------------------------------------------------
RELAY_RECORDS = Counter(
    "jobq_relay_records_total",
    "Stage accounting per topic: records read, jobs written, duplicates, dead-lettered, retried",
    ["topic", "stage"],
)
RELAY_BATCH_TIME = _latency("jobq_relay_batch_seconds", "Time to write one batch into Redis", ["topic"])
RELAY_MISROUTED = Counter(
    "jobq_relay_misrouted_total",
    "Envelopes dead-lettered as misrouted: their queue is not routed to the topic they were read from",
    ["topic"],
)
RELAY_LEADER = Gauge("jobq_relay_leader", "1 while this process holds the topic's lock", ["topic"])
RELAY_RATE_LIMIT = Gauge("jobq_relay_rate_limit_jobs_per_second", "Live rate limit (0: paused)", ["topic"])
RELAY_QUEUE_RATE_LIMIT = Gauge(
    "jobq_relay_queue_rate_limit_jobs_per_second", "Live per-queue limit (0: paused, -1: none)", ["queue"]
)
RELAY_LAG = Gauge(
    "jobq_relay_lag_records",
    "Records behind the partition end, reported by the topic's lock holder (each second while it leads)",
    ["topic", "partition"],
)
RELAY_HELD = Gauge(
    "jobq_relay_held_batches",
    "Batches waiting right now before their write, by what holds them: memory (Redis memory above the "
    "relay's slow/stop mark), redis (Redis unreachable or refusing writes), replicas, rate_limit (the "
    "topic's), lane (the holding lane's produce retried)",
    ["topic", "reason"],
)
RELAY_QUEUE_HELD = Gauge(
    "jobq_relay_queue_held",
    "1 while a queue steps aside into its topic's holding lane, by why: paused, rate (over its rate "
    "limit), memory (over its memory budget, or Redis at the relay's ceiling), draining (nothing holds it "
    "any more, the lane still has its records); reported by the topic's lock holder",
    ["topic", "queue", "reason"],
)
RELAY_LANE_RECORDS = Gauge(
    "jobq_relay_lane_records",
    "A held queue's records waiting in its topic's holding lane (accepted, durable in Kafka, not in Redis)",
    ["topic", "queue"],
)
RELAY_LANE_OLDEST = Gauge(
    "jobq_relay_lane_oldest_seconds",
    "Age of a held queue's oldest record waiting in the holding lane (since it stepped aside)",
    ["topic", "queue"],
)
RELAY_HELD_TIME = Counter(
    "jobq_relay_held_seconds_total",
    "Time batches spent held before their write, by reason (see jobq_relay_held_batches)",
    ["topic", "reason"],
)

RELAY_QUEUE_MEMORY = Gauge(
    "jobq_relay_queue_memory_bytes",
    "A queue's unfinished jobs' estimated Redis memory (what its budget counts), sampled by the relay",
    ["queue"],
)
RELAY_QUEUE_BUDGET = Gauge(
    "jobq_relay_queue_memory_budget_bytes",
    "The queue's memory budget the relay holds it to (its memory_budget, else the relay's share of "
    "maxmemory; 0: none)",
    ["queue"],
)
RELAY_QUEUE_OVER = Gauge(
    "jobq_relay_queue_over_budget",
    "1 while a queue is over its memory budget: its jobs step aside into the topic's holding lane (Kafka "
    "keeps them) until workers drained it below 90 % of the budget",
    ["queue"],
)

# --- Redis (sampled by relays and schedulers) -----------------------------------------------------------
REDIS_MEMORY_USED = Gauge("jobq_redis_memory_used_bytes", "Redis used_memory (INFO memory)")
REDIS_MEMORY_MAX = Gauge("jobq_redis_memory_max_bytes", "Redis maxmemory (0: no limit)")
REDIS_INFO = Gauge(
    "jobq_redis_info",
    "Always 1; its labels carry Redis's maxmemory-policy (jobq needs noeviction: any other policy lets "
    "Redis delete jobs silently)",
    ["maxmemory_policy"],
)

# --- lifecycle events and history -----------------------------------------------------------------------
EVENTS_SHIPPED = Counter("jobq_events_shipped_total", "Lifecycle events shipped to Kafka", ["queue"])
EVENTS_BACKLOG = Gauge(
    "jobq_events_backlog", "Lifecycle events waiting in Redis for the shipper (owned queues)", ["queue"]
)
EVENTS_DROPPED = Gauge(
    "jobq_events_dropped", "Lifecycle events dropped at the queue's events_cap (lifetime)", ["queue"]
)
HISTORY_LAG = Gauge(
    "jobq_history_lag_records",
    "Records of the events topic the history query has not read yet (latest offsets minus its last batch's "
    "end, all partitions)",
)
HISTORY_PROGRESS_TIME = Gauge(
    "jobq_history_progress_timestamp_seconds",
    "Unix time of the history query's last progress report (a batch, or Spark's idle report every 10 s)",
)
GRAPHS = Counter(
    "jobq_graphs_total", "Task graphs by outcome: submitted, completed, failed, canceled", ["outcome"]
)
GRAPHS_OPEN = Gauge("jobq_graphs_open", "Task graphs not finished yet (running, or ended and not yet swept)")
GRAPH_NODES = Counter(
    "jobq_graph_nodes_total",
    "Graph node transitions counted by this process: released, completed, failed, canceled",
    ["state"],
)
GRAPH_REPAIRS = Counter(
    "jobq_graph_repairs_total",
    "Cross-slot hand-offs a crash interrupted, finished by the scheduler: release, report",
    ["step"],
)
SCHEDULER_MEMBERS = Gauge("jobq_scheduler_members", "Live scheduler instances of this one's group")
SCHEDULER_GROUP_MEMBERS = Gauge(
    "jobq_scheduler_group_members",
    "Live members of every scheduler group ever seen in Redis, as this scheduler sees them (0: a group "
    "whose queues nobody keeps)",
    ["group"],
)
SCHEDULER_OWNED = Gauge("jobq_scheduler_owned_queues", "Queues whose timers this instance keeps")
SCHEDULER_MOVED = Counter(
    "jobq_scheduler_jobs_total", "Jobs moved by the timers", ["queue", "outcome"]
)  # outcome: promoted (delayed -> pending), reaped (lease expired)
SCHEDULER_LATENESS = _latency(
    "jobq_scheduler_lateness_seconds",
    "Promotion time minus run_at of each delayed job (never negative: never early)",
    ["queue"],
)
SCHEDULER_CRON = Counter(
    "jobq_scheduler_cron_slots_total", "Cron slots by outcome", ["schedule", "outcome"]
)  # outcome: fired, dropped (by the misfire policy)
SCHEDULER_FAR_MOVED = Counter(
    "jobq_scheduler_far_moved_total", "Far-future jobs moved from the schedule topic into the engine"
)
SCHEDULER_LATE = Counter(
    "jobq_scheduler_late_total", "Delayed jobs promoted later than JOBQ_SCHEDULER_LATE_AFTER_S", ["queue"]
)

# --- canary ---------------------------------------------------------------------------------------------
CANARY_SENT = Counter("jobq_canary_sent_total", "Heartbeat jobs sent", ["topic", "partition"])
CANARY_LATENCY = _latency(
    "jobq_canary_latency_seconds",
    "Heartbeat latency per hop: gate (HTTP->Kafka ack), relay (Kafka->Redis), worker (Redis->started), total",
    ["topic", "partition", "stage"],
)
CANARY_HEALTHY = Gauge(
    "jobq_canary_healthy",
    "1 when the partition's last heartbeat arrived in time, 0 when late or missing",
    ["topic", "partition"],
)

# --- push dispatcher (jqdispatch) -------------------------------------------------------------------------
DISPATCHED = Counter("jobq_dispatch_sent_total", "Jobs POSTed to their kind's URL", ["queue", "kind"])
DISPATCH_OUTCOMES = Counter(
    "jobq_dispatch_outcomes_total",
    "Dispatched attempts by outcome: succeeded (2xx), accepted (202: a callback follows), failed (4xx/5xx),"
    " timeout, unreachable, called_back, callback_timeout, lost, unknown_kind",
    ["queue", "kind", "outcome"],
)
DISPATCH_LATENCY = _latency(
    "jobq_dispatch_latency_seconds", "Time from the POST to the downstream's answer", ["queue", "kind"]
)
DISPATCH_IN_FLIGHT = Gauge(
    "jobq_dispatch_in_flight", "Jobs a dispatcher holds: POSTs under way and 202s awaiting their callback"
)


def redis_memory(info: Mapping[str, Any]) -> None:
    """Set the Redis gauges from an ``INFO memory`` answer (one node's)."""
    REDIS_MEMORY_USED.set(int(info.get("used_memory", 0)))
    REDIS_MEMORY_MAX.set(int(info.get("maxmemory", 0)))
    policy = str(info.get("maxmemory_policy", ""))
    if policy and policy not in _POLICIES:
        REDIS_INFO.clear()
        _POLICIES.clear()
        _POLICIES.add(policy)
        REDIS_INFO.labels(policy).set(1)


_POLICIES: set[str] = set()


def serve(port: int) -> None:
    """Serve this process's metrics on ``JOBQ_METRICS_HOST:port`` (a background thread)."""
    from jqcore.settings.common import load
    from jqcore.settings.observe import MetricsSettings

    start_http_server(port, addr=load(MetricsSettings).host)


def render() -> bytes:
    """The exposition text of the process's registry (for a ``/metrics`` route). With
    ``PROMETHEUS_MULTIPROC_DIR`` set (a gateway of several processes, ``kafkagate.main``) every process
    writes its values there and this is their aggregate: counters and histograms summed over the live and
    the dead processes, gauges per ``pid``; no ``process_*``/``python_*`` collectors."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(REGISTRY)


_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)
_CHILDREN: dict[tuple[int, tuple[str, ...]], Any] = {}


def child(metric: _Metric, *labels: str) -> _Metric:
    """``metric.labels(*labels)``, looked up once per label set: prometheus-client's ``labels()`` checks
    and hashes its arguments under a lock on every call, which per job was a tenth of a worker's CPU."""
    key = (id(metric), labels)
    got: _Metric | None = _CHILDREN.get(key)  # typed here, not by cast(): a call per look-up
    if got is None:
        got = _CHILDREN[key] = metric.labels(*labels)
    return got


def forget(metric: Counter | Gauge | Histogram, *labels: str) -> None:
    """Drop one label set's series (a queue another process reports now): from the exposition and from
    :func:`child`'s cache, so a later ``child`` makes a live one again. Absent: nothing to do."""
    _CHILDREN.pop((id(metric), labels), None)
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
