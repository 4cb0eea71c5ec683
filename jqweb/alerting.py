"""The alerts of jobq, one list: every Prometheus rule of ``deploy/prometheus/alerts.yml`` by name and
severity, whether the dashboard's overview (and ``jobq status``) raises it too — and if not, why — and the
thresholds both evaluate.

The two cannot share one executable condition: the rules are PromQL over the processes' scraped
counters, the dashboard reads Redis, Kafka and Consul directly (it runs without Prometheus). What they
share is declared here and held to the rules file by ``tests/unit/test_alert_catalogue.py``: the same
names, the same severities (*page* shows as critical, *ticket* as warning), the same thresholds where both
see the same quantity, and a runbook per name in ``docs/operations.md``. A rule added without its entry
here, or a dashboard alert without a rule or a reason, fails that test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "BACKLOG_AGE_S",
    "FAILURE_MIN",
    "FAILURE_RATIO",
    "FAILURE_WINDOW_S",
    "HELD_AGE_S",
    "LOCAL",
    "MEMORY_HIGH",
    "RULES",
    "Rule",
    "level",
]

Severity = Literal["page", "ticket"]

BACKLOG_AGE_S = 600
"""JobqQueueBacklogOld: the head of a queue has waited longer than this since it was due."""
FAILURE_RATIO = 0.25
"""JobqJobFailureRate: the share of ended attempts that failed (retried or dead-lettered) ..."""
FAILURE_MIN = 10
"""... when at least this many failed ..."""
FAILURE_WINDOW_S = 600
"""... within this window."""
MEMORY_HIGH = 0.85
"""JobqRedisMemoryHigh: Redis used_memory over maxmemory."""
HELD_AGE_S = 1800
"""JobqQueueHeld: a held queue's oldest record has waited in its topic's holding lane longer than this."""


@dataclass(frozen=True)
class Rule:
    severity: Severity
    prometheus_only: str = ""
    """Why the dashboard does not raise it ('' when it does): what it would need that it cannot read."""


_GATEWAY = "counted inside the gateway processes; the dashboard reads Redis, Kafka and Consul, not them"
_RELAY = "the relay's own state (its held batches, its dead-letter writes), kept in its process only"
_EVENTS = "a change over time of a count the dashboard reads once (the queue page shows the count)"
_HISTORY = "the history query's progress, reported by its process only"

RULES: dict[str, Rule] = {
    "JobqCanaryUnhealthy": Rule("page"),
    "JobqCanaryNotSending": Rule("page"),
    "JobqGateProduceFailures": Rule("page", _GATEWAY),
    "JobqGateEnqueueUnavailable": Rule("page", _GATEWAY),
    "JobqRelayLeaderMissing": Rule("page"),
    "JobqRelayDeadLetters": Rule("ticket", _RELAY),
    "JobqRelayHeldByMemory": Rule("page", _RELAY),
    "JobqQueueOverMemoryBudget": Rule("ticket", _RELAY),
    "JobqRelayHeldByRateLimit": Rule("ticket", _RELAY),
    "JobqQueueHeld": Rule("ticket"),  # both read the lock holder's snapshot (jqrelay.lane)
    "JobqRelayLagGrowing": Rule("ticket"),
    "JobqQueueBacklogOld": Rule("page"),
    "JobqJobFailureRate": Rule("ticket"),
    "JobqDeadLettersGrowing": Rule("ticket"),
    "JobqWorkerSilent": Rule("ticket"),  # both judge by jqruntime.stores.presence.silent_queues
    "JobqRedisMemoryHigh": Rule("page"),
    "JobqRedisEvictionPolicy": Rule("page"),
    "JobqRedisNoMaxmemory": Rule("ticket"),
    "JobqSchedulerGroupEmpty": Rule("page"),
    "JobqSchedulerAbsent": Rule("page"),
    "JobqEventsDropped": Rule("ticket", _EVENTS),
    "JobqEventsUnshipped": Rule("page", _EVENTS),
    "JobqHistoryLagging": Rule("ticket", _HISTORY),
    "JobqHistoryStalled": Rule("ticket", _HISTORY),
    "JobqServiceNotReady": Rule(
        "page", "each process's own readiness check; the dashboard lists the processes alive (Workers)"
    ),
}
"""Every rule of ``deploy/prometheus/alerts.yml``."""

LOCAL: dict[str, tuple[Severity, str]] = {
    "JobqBackendUnreadable": (
        "page",
        "the dashboard's own reads failed; in Prometheus the services' readiness (JobqServiceNotReady) "
        "says the same of theirs",
    ),
    "JobqTopicMissing": (
        "page",
        "read from Kafka's metadata; the relays' and gateways' readiness reports it to Prometheus",
    ),
    "JobqQueuePastDue": (
        "ticket",
        "a queue no scheduler keeps has no process to export its metrics: only a read of its timers shows it",
    ),
    "JobqKillSwitch": ("ticket", "an operator's decision, shown as a reminder; no process counts it"),
}
"""Alerts only the dashboard raises: name → (severity, why Prometheus has no rule for it)."""


def level(name: str) -> Literal["critical", "warning"]:
    """How the dashboard shows the alert ``name``: a page is critical, a ticket a warning."""
    severity = RULES[name].severity if name in RULES else LOCAL[name][0]
    return "critical" if severity == "page" else "warning"
