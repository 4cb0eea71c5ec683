"""Every Prometheus metric of jobq, defined in this one module.

Rules: the ``jobq_`` prefix, base units (seconds, bytes), bounded labels only (``queue``, ``kind``,
``topic``, ``partition``, ``outcome``, ``stage``) — never a job id. Services import the metric objects
from here and expose them with :func:`start_http_server` or :func:`render` in their own HTTP app.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest

__all__ = [
    "CONTENT_TYPE",
    "ENQUEUE_BATCH_SIZE",
    "JOBS_ENQUEUED",
    "JOBS_FINISHED",
    "JOBS_IN_FLIGHT",
    "JOBS_STARTED",
    "JOB_QUEUE_WAIT",
    "JOB_RUN_TIME",
    "LATENCY_BUCKETS",
    "QUEUE_DEPTH",
    "SCRIPT_CALLS",
    "SCRIPT_TIME",
    "render",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Seconds; from half a millisecond (a Lua call) to a minute (a slow job)."""

# --- engine (Redis) ---------------------------------------------------------------------------------
SCRIPT_CALLS = Counter(
    "jobq_engine_script_calls_total", "Lua transitions executed, by script and outcome", ["script", "outcome"]
)
SCRIPT_TIME = Histogram(
    "jobq_engine_script_seconds", "Time of one Lua transition round trip", ["script"], buckets=LATENCY_BUCKETS
)
JOBS_ENQUEUED = Counter(
    "jobq_jobs_enqueued_total",
    "Jobs offered to the engine, by outcome (stored, duplicate, refused)",
    ["queue", "outcome"],
)
ENQUEUE_BATCH_SIZE = Histogram(
    "jobq_engine_enqueue_batch_jobs", "Jobs per enqueue batch", buckets=(1, 10, 50, 100, 250, 500, 1000, 5000)
)
QUEUE_DEPTH = Gauge("jobq_queue_depth_jobs", "Jobs in a queue by state (sampled)", ["queue", "state"])

# --- workers ----------------------------------------------------------------------------------------
JOBS_STARTED = Counter("jobq_jobs_started_total", "Jobs handed to a handler", ["queue", "kind"])
JOBS_FINISHED = Counter(
    "jobq_jobs_finished_total",
    "Job attempts finished, by outcome (succeeded, failed, retried, canceled, snoozed, timeout, lost)",
    ["queue", "kind", "outcome"],
)
JOBS_IN_FLIGHT = Gauge("jobq_jobs_in_flight", "Jobs running in this process", ["queue"])
JOB_RUN_TIME = Histogram(
    "jobq_job_run_seconds", "Handler run time of one attempt", ["queue", "kind"], buckets=LATENCY_BUCKETS
)
JOB_QUEUE_WAIT = Histogram(
    "jobq_job_queue_wait_seconds",
    "From when a job was due (run_at, else enqueued_at) to when a worker started it",
    ["queue"],
    buckets=LATENCY_BUCKETS,
)


def render() -> bytes:
    """The exposition text of the process's registry (for a ``/metrics`` route)."""
    return generate_latest(REGISTRY)
