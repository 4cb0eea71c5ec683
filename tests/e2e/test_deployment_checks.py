"""Topics held to their declaration, the eviction refusal and ``jobq doctor``, on the session's servers.

The session's Kafka has one broker: the declared replication factor is 1 and min ISR 1 (the 3-broker case
is ``tests/faults/test_topics_rf.py``). The eviction policy of the shared Redis is changed only inside a
``finally`` that puts ``noeviction`` back (tests run one at a time)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]
from redis.asyncio.cluster import RedisCluster
from typer.testing import CliRunner

from jobq.cli import app
from jqcore.routing import RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import EventSettings, FarSettings
from jqcore.topics import TopicsInvalid
from jqruntime.preflight import EvictionRefused, eviction_policies
from jqsched.service import SchedulerService
from jqstack.manager import Endpoints
from kafkagate.main import GateService


def topic_config(admin: AdminClient, name: str) -> dict[str, str]:
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = admin.describe_configs([res])[res].result(15)
    return {k: e.value for k, e in entries.items()}


@pytest.fixture
def deployment(
    endpoints: Endpoints, prefix: str, kafka_admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """This test's deployment as environment settings (its own topics); its topics are deleted after."""
    env = {
        "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "JOBQ_REDIS_URL": endpoints.redis_url or "",
        "JOBQ_CONSUL_ADDR": endpoints.consul_addr,
        "JOBQ_ROUTES": orjson.dumps([{"queues": f"{prefix}.*", "topic": f"{prefix}.jobs"}]).decode(),
        "JOBQ_DEFAULT_TOPIC": "",
        "JOBQ_EVENTS_TOPIC": f"{prefix}.events",
        "JOBQ_FAR_TOPIC": f"{prefix}.schedule",
        "JOBQ_RELAY_KV_PREFIX": f"jobq-test/{prefix}",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env
    names = [f"{prefix}.{t}" for t in ("jobs", "jobs.retry", "jobs.dead", "jobs.held", "events", "schedule")]
    for fut in kafka_admin.delete_topics(names, operation_timeout=15).values():
        with contextlib.suppress(Exception):
            fut.result(20)


def jobq(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


async def test_topics_create_fixes_a_schedule_topic_that_deletes_and_services_refuse_it_until_then(
    deployment: dict[str, str],
    prefix: str,
    kafka_admin: AdminClient,
    make_topic: Callable[..., str],
    make_scheduler: Callable[..., SchedulerService],
) -> None:
    """A schedule topic pre-created as a plain (7-day) topic, the issue's case: a scheduler with the far
    tier refuses to start with one line naming the topic, the problem and ``jobq topics create``; that
    command creates the rest of the declaration and turns the topic compacted and never-expiring in
    place; the scheduler then starts."""
    schedule = make_topic("schedule", partitions=2)  # the broker's defaults: delete after 7 days
    far = FarSettings.model_validate({"topic": schedule, "partitions": 2})
    with pytest.raises(TopicsInvalid) as refused:
        async with make_scheduler(f"{prefix}-s0", far=far):
            pass
    lines = refused.value.message.splitlines()
    assert len(lines) == 2, lines  # cleanup policy and retention, one line each
    assert all(schedule in line and "jobq topics create" in line for line in lines)
    assert "cleanup.policy=delete" in lines[0]
    assert "retention.ms=604800000" in lines[1]

    done = await asyncio.to_thread(jobq, "topics", "create")
    assert done.exit_code == 0, done.output
    for suffix in ("jobs", "jobs.retry", "jobs.dead", "jobs.held", "events"):
        assert f"created {prefix}.{suffix}" in done.output
    assert f"altered {schedule}" in done.output
    conf = topic_config(kafka_admin, schedule)
    assert (conf["cleanup.policy"], conf["retention.ms"]) == ("compact", "-1")
    assert topic_config(kafka_admin, f"{prefix}.events")["cleanup.policy"] == "delete"
    held = topic_config(kafka_admin, f"{prefix}.jobs.held")  # the holding lane never expires by time
    assert (held["cleanup.policy"], held["retention.ms"]) == ("delete", "-1")

    async with make_scheduler(f"{prefix}-s0", far=far) as service:
        assert service.mover is not None

    again = await asyncio.to_thread(jobq, "topics", "create")
    assert "0 created" in again.output
    assert "altered" not in again.output


async def test_a_service_that_may_not_create_topics_refuses_a_missing_one(
    deployment: dict[str, str], prefix: str, make_scheduler: Callable[..., SchedulerService]
) -> None:
    """``JOBQ_KAFKA_CREATE_TOPICS=false`` (production): the events topic is missing, the scheduler that
    ships events refuses to start, naming the topic and ``jobq topics create``; nothing was created."""
    service = make_scheduler(
        f"{prefix}-s0", events=EventSettings.model_validate({"topic": f"{prefix}.events"})
    )
    service.kafka = KafkaSettings(bootstrap=deployment["JOBQ_KAFKA_BOOTSTRAP"], create_topics=False)
    with pytest.raises(
        TopicsInvalid, match=rf"'{prefix}\.events'.*JOBQ_KAFKA_CREATE_TOPICS.*jobq topics create"
    ):
        async with service:
            pass


async def test_an_evicting_redis_stops_services_and_jobq_doctor_names_it_a_weak_token_and_a_wrong_topic(
    deployment: dict[str, str],
    prefix: str,
    redis: aioredis.Redis,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``allkeys-lru`` a gateway refuses to start (and starts with ``JOBQ_REDIS_ALLOW_EVICTION``);
    ``jobq doctor`` exits 1 with a line for the policy, one for the development token of a gateway
    listening on every address, and one for the schedule topic that deletes by time; ``--json`` agrees."""
    schedule = make_topic("schedule", partitions=1)
    monkeypatch.setenv("JOBQ_GATE_HOST", "0.0.0.0")
    monkeypatch.setenv("JOBQ_GATE_TOKENS", "jobq-dev-token")
    routing = RoutingSettings(default_topic=f"{prefix}.jobs")
    await redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with pytest.raises(EvictionRefused, match=r"allkeys-lru.*JOBQ_REDIS_ALLOW_EVICTION"):
            async with make_gate(routing, far=FarSettings.model_validate({"horizon_s": 0})):
                pass
        lenient = make_gate(routing, far=FarSettings.model_validate({"horizon_s": 0}))
        lenient.redis = lenient.redis.model_copy(update={"allow_eviction": True})
        async with lenient:  # alive and ready: doctor's findings are about the rest
            url = f"http://127.0.0.1:{lenient.port}"
            result = await asyncio.to_thread(jobq, "doctor", "--gateway", url)
            as_json = await asyncio.to_thread(jobq, "doctor", "--json", "--gateway", url)
    finally:
        await redis.config_set("maxmemory-policy", "noeviction")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert any("maxmemory-policy allkeys-lru" in line for line in lines), result.output
    assert any("JOBQ_GATE_TOKENS holds a weak token" in line and "development" in line for line in lines)
    assert any(schedule in line and "retention.ms=" in line for line in lines), result.output
    assert "jobq-dev-token" not in result.output, "a token is never printed whole"
    doc = orjson.loads(as_json.output)
    assert as_json.exit_code == 1
    assert doc["ok"] is False
    checks = {f["check"] for f in doc["findings"] if f["level"] == "problem"}
    assert {"redis", "tokens", "topics"} <= checks


@pytest.mark.cluster
async def test_the_eviction_check_reads_every_primary_of_a_cluster(redis_cluster: RedisCluster) -> None:
    assert await eviction_policies(redis_cluster) == ["noeviction"] * 3
