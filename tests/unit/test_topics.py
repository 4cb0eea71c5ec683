"""The topic declaration (``jqcore/topics.py``): replication and min ISR rules, config diffs, lines."""

from __future__ import annotations

import pytest

from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import AuditSettings, EventSettings, FarSettings
from jqcore.topics import (
    Observed,
    TopicSpec,
    audit_topic,
    declaration,
    diff,
    job_topics,
    min_isr,
    replication_for,
)

EVENTS = EventSettings.model_validate({})
SCHEDULE = TopicSpec("jobq.schedule", "schedule", 6)
JOBS = TopicSpec("jobs.default", "jobs", 3)


def seen(spec: TopicSpec, rf: int, **config: str) -> Observed:
    return Observed(spec.name, rf, spec.partitions, {k.replace("_", "."): v for k, v in config.items()})


@pytest.mark.parametrize(("brokers", "rf"), [(1, 1), (2, 2), (3, 3), (5, 3)])
def test_the_default_replication_is_min_3_brokers(brokers: int, rf: int) -> None:
    assert replication_for(None, brokers) == rf
    assert replication_for(2, brokers) == 2  # the setting wins (a broker down does not lower it)


@pytest.mark.parametrize(("rf", "isr"), [(1, 1), (2, 1), (3, 2), (5, 4)])
def test_min_insync_replicas_is_rf_minus_one_at_least_one(rf: int, isr: int) -> None:
    assert min_isr(rf) == isr
    assert JOBS.config(rf)["min.insync.replicas"] == str(isr)


def test_the_declaration_names_every_topic_once_with_its_role() -> None:
    specs = declaration(["jobs.a", "jobs.b", "jobs.a"], EVENTS, FarSettings.model_validate({}))
    assert [(s.name, s.role) for s in specs] == [
        ("jobs.a", "jobs"),
        ("jobs.a.retry", "retry"),
        ("jobs.a.dead", "dead"),
        ("jobs.a.held", "held"),
        ("jobs.b", "jobs"),
        ("jobs.b.retry", "retry"),
        ("jobs.b.dead", "dead"),
        ("jobs.b.held", "held"),
        ("jobq.events", "events"),
        ("jobq.audit", "audit"),
        ("jobq.schedule", "schedule"),
    ]
    assert "jobq.schedule" not in {
        s.name for s in declaration([], EVENTS, FarSettings.model_validate({"horizon_s": 0}))
    }
    assert [s.role for s in job_topics(["x"], sides=False)] == ["jobs"]


def test_the_schedule_topic_is_compacted_and_never_expires_the_others_delete() -> None:
    assert SCHEDULE.config(3) == {
        "cleanup.policy": "compact",
        "retention.ms": "-1",
        "min.insync.replicas": "2",
        "max.message.bytes": SCHEDULE.config(3)["max.message.bytes"],
    }
    assert JOBS.config(1)["cleanup.policy"] == "delete"
    assert int(JOBS.config(1)["retention.ms"]) > 0


def test_a_holding_lane_deletes_never_by_time_and_is_held_to_it() -> None:
    (lane,) = [s for s in job_topics(["jobs.a"]) if s.role == "held"]
    assert lane.name == "jobs.a.held"
    config = lane.config(3)
    assert (config["cleanup.policy"], config["retention.ms"], config["retention.bytes"]) == (
        "delete",
        "-1",
        "-1",
    )
    assert int(config["segment.ms"]) == 3_600_000
    assert diff(lane, seen(lane, 3, min_insync_replicas="2", retention_ms="-1"), 3) == []
    timed = diff(lane, seen(lane, 3, min_insync_replicas="2", retention_ms="604800000"), 3)
    assert [(p.code, dict(p.fix)) for p in timed] == [("retention", {"retention.ms": "-1"})]
    compacted = diff(
        lane, seen(lane, 3, min_insync_replicas="2", cleanup_policy="compact", retention_ms="-1"), 3
    )
    assert [(p.code, dict(p.fix)) for p in compacted] == [("cleanup_policy", {"cleanup.policy": "delete"})]


@pytest.mark.parametrize("topic", ["jobs.a.held", "jobs.a.retry", "jobs.a.dead"])
def test_no_route_or_default_topic_may_name_a_side_topic(topic: str) -> None:
    with pytest.raises(ValueError, match="may not end with"):
        RoutingSettings.model_validate({"routes": [{"queues": "q*", "topic": topic}]})
    with pytest.raises(ValueError, match="may not end with"):
        RoutingSettings.model_validate({"default_topic": topic})
    assert RoutingSettings.model_validate({"default_topic": ""}).topics() == []


def test_a_matching_topic_has_no_problem() -> None:
    assert (
        diff(
            SCHEDULE,
            seen(SCHEDULE, 3, cleanup_policy="compact", retention_ms="-1", min_insync_replicas="2"),
            3,
        )
        == []
    )
    assert diff(JOBS, seen(JOBS, 1, cleanup_policy="delete", retention_ms="1000"), 1) == []


def test_a_missing_topic_names_jobq_topics_create() -> None:
    (p,) = diff(SCHEDULE, None, 3)
    assert p.code == "missing"
    assert "jobq topics create" in p.line
    assert "'jobq.schedule'" in p.line


def test_a_schedule_topic_that_deletes_by_time_is_two_fixable_problems() -> None:
    got = diff(SCHEDULE, seen(SCHEDULE, 1, cleanup_policy="delete", retention_ms="604800000"), 1)
    assert [p.code for p in got] == ["cleanup_policy", "retention"]
    for p in got:
        assert p.fix == {"cleanup.policy": "compact", "retention.ms": "-1"}
        assert "'jobq.schedule'" in p.line
        assert "jobq topics create" in p.line
        assert "\n" not in p.line
    assert "cleanup.policy=delete (deletes old records)" in got[0].line
    assert "retention.ms=604800000 (deletes by time)" in got[1].line
    (both,) = diff(SCHEDULE, seen(SCHEDULE, 1, cleanup_policy="compact,delete", retention_ms="-1"), 1)
    assert both.code == "cleanup_policy"


def test_the_audit_topic_deletes_by_time_only_and_shorter_retention_or_compaction_is_a_problem() -> None:
    year = audit_topic(AuditSettings.model_validate({}))
    assert year.config(3)["cleanup.policy"] == "delete"
    assert year.config(3)["retention.ms"] == str(365 * 86_400_000)
    forever = audit_topic(AuditSettings.model_validate({"retention_days": 0}))
    assert forever.config(3)["retention.ms"] == "-1"
    ok = seen(year, 3, min_insync_replicas="2", retention_ms=str(400 * 86_400_000))
    assert diff(year, ok, 3) == []
    short = diff(year, seen(year, 3, min_insync_replicas="2", retention_ms="86400000"), 3)
    assert [(p.code, dict(p.fix)) for p in short] == [("retention", {"retention.ms": str(365 * 86_400_000)})]
    assert [p.code for p in diff(forever, seen(forever, 3, min_insync_replicas="2"), 3)] == ["retention"]
    compacted = seen(year, 3, min_insync_replicas="2", cleanup_policy="compact", retention_ms="-1")
    assert [p.code for p in diff(year, compacted, 3)] == ["cleanup_policy"]


def test_a_compacted_job_topic_is_a_problem() -> None:
    (p,) = diff(JOBS, seen(JOBS, 1, cleanup_policy="compact"), 1)
    assert p.code == "cleanup_policy"
    assert p.fix == {"cleanup.policy": "delete"}


def test_a_replication_factor_below_the_declared_one_is_not_fixable_in_place() -> None:
    got = diff(SCHEDULE, seen(SCHEDULE, 1, cleanup_policy="compact", retention_ms="-1"), 3)
    assert [p.code for p in got] == ["replication_low"]  # min ISR 1 is right for the topic's own RF 1
    (p,) = got
    assert not p.fix
    assert "replication factor 1, below 3" in p.line
    assert "kafka-reassign-partitions" in p.line
    more = seen(JOBS, 5, min_insync_replicas="2")
    assert diff(JOBS, more, 3) == []  # more replicas than declared is fine


@pytest.mark.parametrize(
    ("rf", "declared", "have", "want"),
    [(3, 3, "1", "2"), (3, 3, "3", "2"), (1, 1, "2", "1"), (2, 2, "2", "1")],
)
def test_a_wrong_min_isr_is_fixed_in_place(rf: int, declared: int, have: str, want: str) -> None:
    (p,) = diff(JOBS, seen(JOBS, rf, min_insync_replicas=have), declared)
    assert p.code == "min_isr"
    assert p.fix == {"min.insync.replicas": want}
    assert f"min.insync.replicas={have}" in p.line


def test_the_settings_read_replication_and_create_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load(KafkaSettings).replication is None
    assert load(KafkaSettings).create_topics is True
    monkeypatch.setenv("JOBQ_KAFKA_REPLICATION", "3")
    monkeypatch.setenv("JOBQ_KAFKA_CREATE_TOPICS", "false")
    k = load(KafkaSettings)
    assert (k.replication, k.create_topics) == (3, False)
