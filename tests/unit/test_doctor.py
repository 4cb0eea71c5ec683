"""``jobq doctor``'s checks on fabricated facts (``jobq/doctor.py``); the reading is tested on real servers in
``tests/e2e/test_deployment_checks.py``."""

from __future__ import annotations

from typing import Any

from jobq.doctor import (
    Facts,
    check_alive,
    check_clocks,
    check_consul,
    check_redis,
    check_tokens,
    check_topics,
    judge,
)
from jqcore.topics import Inspection, Observed, TopicSpec, diff

NOW = 1_800_000_000.0


def test_an_evicting_redis_is_a_problem_no_persistence_a_warning() -> None:
    (p,) = check_redis({"maxmemory-policy": "allkeys-lru", "appendonly": "yes", "save": ""})
    assert p.level == "problem"
    assert "allkeys-lru" in p.line
    (w,) = check_redis({"maxmemory-policy": "noeviction", "appendonly": "no", "save": ""})
    assert w.level == "warning"
    assert "persists nothing" in w.line
    assert check_redis({"maxmemory-policy": "noeviction", "appendonly": "no", "save": "3600 1"}) == []
    (refused,) = check_redis(None)
    assert refused.level == "warning"
    assert "CONFIG GET" in refused.line


def test_topic_problems_become_one_line_each() -> None:
    spec = TopicSpec("jobq.schedule", "schedule", 6)
    seen = Observed(spec.name, 1, 6, {"cleanup.policy": "delete", "retention.ms": "604800000"})
    found = Inspection(3, 3, {spec.name: seen}, diff(spec, seen, 3))
    lines = [f.line for f in check_topics(found)]
    assert len(lines) == 3  # RF, cleanup policy, retention
    assert all("'jobq.schedule'" in line for line in lines)


def test_anonymous_consul_writes_and_unheld_locks() -> None:
    locks: list[dict[str, Any]] = [
        {"topic": "jobs.a", "holder": "relay-1"},
        {"topic": "jobs.b", "holder": None},
    ]
    found = check_consul(True, False, locks)
    assert [(f.level, f.check) for f in found] == [("problem", "consul"), ("problem", "relays")]
    assert "'jobs.b'" in found[1].line
    assert [f.level for f in check_consul(True, True, [])] == ["warning"]  # a loopback dev agent
    assert check_consul(False, False, locks[:1]) == []


def test_clocks_beyond_the_threshold() -> None:
    found = check_clocks({"Redis": 120.0, "Consul": -2400.0, "gate h:1": 900.0}, max_ms=500)
    assert [f.line.split("'")[0] for f in found] == ["Consul", "gate h:1"]
    assert "2400 ms behind" in found[0].line
    assert "900 ms ahead" in found[1].line


def test_alive_gateways_schedulers_canaries_and_readiness() -> None:
    fresh = {"jobs.a/0": {"ok": True, "at": NOW * 1000 - 5000}}
    assert check_alive(["h:1"], {"g": {"s0": ""}}, fresh, {"http://g:1": "ok"}, NOW) == []
    found = check_alive(
        [],
        {},
        {"jobs.a/0": {"ok": True, "at": NOW * 1000 - 600_000}, "jobs.a/1": {"ok": False, "problem": "late"}},
        {"http://g:1": "503 kafka_not_ready"},
        NOW,
    )
    lines = " | ".join(f.line for f in found)
    assert "no gateway" in lines
    assert "http://g:1 is not ready: 503" in lines
    assert "no scheduler alive" in lines
    assert "jobs.a/0 silent for 600 s" in lines
    assert "jobs.a/1 failing: late" in lines
    (none,) = check_alive(["h:1"], {"g": {"s0": ""}}, {}, {}, NOW)
    assert none.level == "warning"


def test_weak_tokens_only_off_loopback_and_never_printed() -> None:
    strong = "Vx0c3m3v9y5gM0m9fJ0u8nK2"
    tokens = [
        ("JOBQ_GATE_TOKENS", "127.0.0.1:28080", "jobq-dev-token"),  # loopback: fine
        ("JOBQ_GATE_TOKENS", "0.0.0.0:28080", "jobq-dev-token"),
        ("JOBQ_GATE_TOKENS", "10.1.2.3:28080", "change-me"),
        ("JOBQ_WEB_ADMIN_TOKENS", "gate.example:28090", "short-secret"),
        ("JOBQ_GATE_TOKENS", "0.0.0.0:28080", strong),
        ("JOBQ_GATE_TOKENS", "localhost:28080", "x"),
    ]
    found = check_tokens(tokens)
    assert [f.line.split(" ")[0] for f in found] == ["JOBQ_GATE_TOKENS"] * 2 + ["JOBQ_WEB_ADMIN_TOKENS"]
    assert "published development token" in found[0].line
    assert "12 characters, under 20" in found[2].line
    assert not any(t in f.line for f in found for t in ("jobq-dev-token", "change-me", "short-secret"))


def test_judge_puts_problems_first_and_names_unreadable_parts() -> None:
    facts = Facts(redis_config={"maxmemory-policy": "noeviction", "appendonly": "no", "save": ""})
    facts.unreadable["kafka"] = "BackendUnavailable: no metadata"
    facts.gateways, facts.schedulers, facts.canary = ["h:1"], {"g": {"s": ""}}, {}
    found = judge(facts)
    assert [f.level for f in found] == ["problem", "warning", "warning"]
    assert found[0].line == "cannot read kafka: BackendUnavailable: no metadata"
