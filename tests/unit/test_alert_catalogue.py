"""The dashboard's alerts and the Prometheus rules are one list (``jqweb/alerting.py``): the same names,
severities and thresholds as ``deploy/prometheus/alerts.yml``, a runbook for each in ``docs/operations.md``,
and every alert the catalogue says the dashboard raises is raised by :func:`jqweb.overview.alerts` from a
snapshot showing its condition — with the level its rule's severity gives."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import yaml

from jqruntime.stores.presence import Claimer
from jqweb import alerting
from jqweb.overview import alerts, claimer_rows

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "deploy" / "prometheus" / "alerts.yml"
RUNBOOKS = ROOT / "docs" / "operations.md"


def rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"]}


def headings(doc: Path) -> set[str]:
    """GitHub's anchors of the document's headings."""
    out, fenced = set(), False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-"))
    return out


def test_the_catalogue_is_the_rules_file_by_name_and_severity() -> None:
    found = rules()
    assert set(alerting.RULES) == set(found), "jqweb/alerting.py RULES and alerts.yml name different alerts"
    for name, rule in found.items():
        assert rule["labels"]["severity"] == alerting.RULES[name].severity, name
    assert not set(alerting.LOCAL) & set(found), "a dashboard-only alert has a rule now: move it to RULES"
    for name, (_severity, why) in alerting.LOCAL.items():
        assert why, f"{name}: say why Prometheus has no rule for it"


def test_every_alert_has_a_runbook() -> None:
    anchors = headings(RUNBOOKS)
    for name, rule in rules().items():
        assert rule["annotations"].get("runbook_url") == f"docs/operations.md#{name.lower()}", name
        assert name.lower() in anchors, f"docs/operations.md has no runbook section `### {name}`"


def test_shared_thresholds_are_the_rules_thresholds() -> None:
    exprs = {name: " ".join(r["expr"].split()) for name, r in rules().items()}
    assert (
        f"jobq_queue_oldest_pending_age_seconds) > {alerting.BACKLOG_AGE_S}" in exprs["JobqQueueBacklogOld"]
    )
    window = f"[{alerting.FAILURE_WINDOW_S // 60}m]"
    failure = exprs["JobqJobFailureRate"]
    assert f"> {alerting.FAILURE_RATIO}" in failure
    assert f">= {alerting.FAILURE_MIN}" in failure
    assert failure.count(window) == 3
    assert f"> {alerting.MEMORY_HIGH}" in exprs["JobqRedisMemoryHigh"]
    assert "[1h]" in exprs["JobqDeadLettersGrowing"]  # the dashboard's dead_growth window (an hour)
    assert f"jobq_relay_lane_oldest_seconds) > {alerting.HELD_AGE_S}" in exprs["JobqQueueHeld"]


def everything_wrong() -> tuple[dict[str, Any], dict[str, int], dict[str, dict[str, int]]]:
    """A snapshot, dead-letter growth and attempt outcomes in which every condition the dashboard sees
    holds at once."""
    now = int(time.time() * 1000)
    old = now - 600_000
    queue = {"queue": "emails", "oldest_pending_age_ms": 601_000, "paused": False, "past_due": 3}
    queues = [queue, {"queue": "stopped", "oldest_pending_age_ms": 900_000, "paused": True}]
    idle = Claimer("worker", "pool-1", now, {"emails": old, "stopped": old}, busy=0, slots=4)
    lane = {"topic": "jobs", "records": 40, "drained_per_s": 0.0}
    held = [  # rows of jqweb.overview.held_rows: one waited past the mark, one not yet, one drained
        {**lane, "queue": "reports", "reason": "paused", "oldest_s": alerting.HELD_AGE_S + 1.0},
        {**lane, "queue": "young", "reason": "rate", "oldest_s": alerting.HELD_AGE_S - 1.0},
        {**lane, "queue": "drained", "reason": "memory", "records": 0, "oldest_s": None},
    ]
    snapshot = {
        "cron": {"error": "ConnectionError: Consul away"},
        "redis": {
            "queues": queues,
            "claimers": claimer_rows([idle], now, queues),
            "canary": {"jobs/0": {"ok": False, "problem": "late"}, "jobs/1": {"ok": True, "at": old}},
            "memory": {"used": 90, "max": 0, "ratio": 0.9, "policy": "allkeys-lru"},
            "switches": [{"name": "s", "queue": "*", "kind": "pdf", "meta": {}, "action": "park"}],
            "held": held,
            "schedulers": {"default": {"sched-1": ""}},
            "scheduler_groups": {"default": 1, "reports": 0},
        },
        "kafka": [
            {"topic": "gone", "partition": None, "problem": "topic missing"},
            {"topic": "jobs", "partition": 0, "lag": 5000, "lag_s": 120.0},
        ],
        "locks": [{"topic": "jobs", "holder": None}],
    }
    outcomes = {
        "emails": {"completed": 20, "retried": 8, "errored": 2},
        "fine": {"completed": 100, "retried": 1},
    }
    return snapshot, {"emails": 2}, outcomes


def test_the_dashboard_raises_each_alert_it_shares_with_the_rules_at_its_severity() -> None:
    snapshot, dead, outcomes = everything_wrong()
    raised = alerts(snapshot, dead, outcomes)
    shared = {name for name, rule in alerting.RULES.items() if not rule.prometheus_only}
    by_rule = {a.rule for a in raised}
    assert by_rule == (shared | set(alerting.LOCAL)) - {"JobqSchedulerAbsent"}  # groups live: absent is not
    for a in raised:
        assert a.level == ("critical" if _severity(a.rule) == "page" else "warning"), a
    assert not [a for a in raised if "stopped" in a.what + a.detail], "a paused queue waits on purpose"
    (held,) = [a for a in raised if a.rule == "JobqQueueHeld"]  # not the young lane, nor the drained one
    assert held.what == "queue reports held (paused)"
    assert held.detail == "40 records in jobs.held, the oldest for 1801 s"
    assert not [a for a in raised if "fine" in a.what], "1 % failing is not an alert"
    # no scheduler at all: the absent alert (and no group is called empty on top)
    snapshot["redis"]["schedulers"] = {}
    names = [a.rule for a in alerts(snapshot, dead, outcomes)]
    assert "JobqSchedulerAbsent" in names
    assert "JobqSchedulerGroupEmpty" not in names


def test_a_healthy_snapshot_raises_nothing() -> None:
    now = int(time.time() * 1000)
    queues = [{"queue": "emails", "oldest_pending_age_ms": 2_000, "paused": False, "past_due": 0}]
    idle = Claimer("worker", "host:1:emails", now, {"emails": now - 3_600_000}, busy=0, slots=4)
    snapshot = {
        "redis": {
            "queues": queues,
            "claimers": claimer_rows([idle], now, queues),  # idle for an hour, but nothing waits
            "canary": {"jobs/0": {"ok": True, "at": now}},
            "memory": {"used": 50, "max": 100, "ratio": 0.5, "policy": "noeviction"},
            "switches": [],
            "schedulers": {"default": {"sched-1": ""}},
            "scheduler_groups": {"default": 1},
        },
        "kafka": [{"topic": "jobs", "partition": 0, "lag": 0, "lag_s": 0.0}],
        "locks": [{"topic": "jobs", "holder": "relay-1"}],
    }
    assert alerts(snapshot, {"emails": 0}, {"emails": {"completed": 50, "retried": 9}}) == []


def _severity(name: str) -> str:
    return alerting.RULES[name].severity if name in alerting.RULES else alerting.LOCAL[name][0]
