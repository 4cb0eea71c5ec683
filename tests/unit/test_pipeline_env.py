"""The pipeline spec (``jqstack.pipeline``): each role's environment and command line."""

from __future__ import annotations

import os
import sys

import pytest

from jqstack.paths import repo_root
from jqstack.pipeline import PipelineEnv, Scope, history_argv, service_argv, worker_argv

SERVERS = {"JOBQ_KAFKA_BOOTSTRAP": "127.0.0.1:1", "JOBQ_REDIS_URL": "redis://127.0.0.1:2/0"}


def test_a_scope_names_everything_the_pipeline_owns() -> None:
    env = PipelineEnv(SERVERS, scope=Scope("bench", "x")).common()
    assert env["JOBQ_DEFAULT_TOPIC"] == env["JOBQ_RELAY_TOPICS"] == env["JOBQ_SCHEDULER_QUEUES"] == "bench.x"
    assert env["JOBQ_RELAY_KV_PREFIX"] == "jobq-bench/x"
    assert env["JOBQ_RELAY_GROUP_PREFIX"] == env["JOBQ_SCHEDULER_GROUP"] == "bench-x"
    assert env["JOBQ_EVENTS_TOPIC"] == "bench.x.events"
    assert env["JOBQ_FAR_TOPIC"] == "bench.x.schedule"
    assert env["JOBQ_CRON_KV_PREFIX"] == "jobq-bench/x/cron"


def test_every_role_has_the_common_settings_and_its_own() -> None:
    spec = PipelineEnv(SERVERS, token="t", log_level="warning", settings={"JOBQ_DEFAULT_TOPIC": "mine"})
    common = spec.common()
    assert common["JOBQ_GATE_TOKENS"] == "t"
    assert common["JOBQ_LOG_LEVEL"] == "warning"
    assert common["JOBQ_DEFAULT_TOPIC"] == "mine"
    assert common.items() >= SERVERS.items()
    gate = spec.gateway(8000, az="az-a", processes=2)
    assert [gate[f"JOBQ_GATE_{k}"] for k in ("PORT", "AZ", "PROCESSES")] == ["8000", "az-a", "2"]
    assert spec.relay("r1")["JOBQ_RELAY_HOLDER"] == "r1"
    sched = spec.scheduler("s1", queues="q.*")
    assert (sched["JOBQ_SCHEDULER_NAME"], sched["JOBQ_SCHEDULER_QUEUES"]) == ("s1", "q.*")
    canary = spec.canary(["http://a@az-a", "http://b@az-b"], interval_s=10, late_after_s=20)
    assert canary["JOBQ_CANARY_GATEWAYS"] == "http://a@az-a,http://b@az-b"
    assert (canary["JOBQ_CANARY_TOKEN"], canary["JOBQ_CANARY_INTERVAL_S"]) == ("t", "10")
    assert spec.web(9000)["JOBQ_WEB_PORT"] == "9000"
    assert spec.history(trigger_s=2)["JOBQ_HISTORY_TRIGGER_S"] == "2"


def test_a_worker_finds_the_checkouts_handlers() -> None:
    env = PipelineEnv(SERVERS).worker()
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(repo_root())


def test_command_lines() -> None:
    assert service_argv("relay") == [sys.executable, "-m", "jqrelay"]
    assert history_argv()[-3:] == ["jobq", "history", "run"]
    argv = worker_argv("q", app="m:r", concurrency=5, processes=1, grace_s=5, burst=True)
    assert " ".join(argv[3:]) == "worker --app m:r --queues q --concurrency 5 --processes 1 --grace 5 --burst"


def test_per_role_servers_replace_the_inherited_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_REDIS_PASSWORD", "from-the-shell")
    monkeypatch.setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1")
    monkeypatch.setenv("JOBQ_REDIS_ALLOW_EVICTION", "true")
    spec = PipelineEnv(lambda role: {"JOBQ_REDIS_USERNAME": role, **SERVERS}, token="t")
    assert spec.relay()["JOBQ_REDIS_USERNAME"] == "relay"
    assert spec.worker()["JOBQ_REDIS_USERNAME"] == "worker"
    common = spec.common()
    assert common["JOBQ_REDIS_USERNAME"] == "admin"
    assert "JOBQ_REDIS_PASSWORD" not in common
    assert "CONSUL_HTTP_ADDR" not in common
    assert common["JOBQ_REDIS_ALLOW_EVICTION"] == "true"
    assert (
        PipelineEnv(SERVERS).common()["CONSUL_HTTP_ADDR"] == "127.0.0.1:1"
    )  # one mapping: inherited as before
