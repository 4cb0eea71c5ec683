"""On three brokers every jobq topic gets replication factor 3 and min ISR 2, whoever creates it: a service
started first (the scheduler: schedule and events topics; the relay: ``.retry``/``.dead``) or ``jobq topics
create`` (the job topic); the schedule topic is compacted and never expires; a schedule topic with one
replica stops a scheduler with the fix in one line. Runs on the fault suite's ``kafka3`` stack (shared with
its scenarios: ``tests/faults/conftest.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]
from typer.testing import CliRunner

from jobq.cli import app
from jqcore.routing import RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import TraceSettings
from jqcore.settings.pipeline import CronSettings, EventSettings, FarSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqcore.topics import TopicsInvalid
from jqrelay.main import RelayService
from jqrelay.settings import RelaySettings
from jqsched.service import SchedulerService
from jqsched.settings import SchedulerSettings
from jqstack.manager import Endpoints, Stack
from loadtest.faults.run import Servers

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


def scheduler(ep: Endpoints, prefix: str, far: FarSettings, events: EventSettings) -> SchedulerService:
    settings = SchedulerSettings(
        name=f"{prefix}-s0", group=prefix, queues=[f"{prefix}*"], far=True, events=True
    )
    redis, consul = RedisSettings(url=ep.redis_url or ""), ConsulSettings(addr=ep.consul_addr)
    kafka = KafkaSettings(bootstrap=ep.kafka_bootstrap)
    return SchedulerService(settings, redis, consul, CronSettings(), kafka, far, events)


def relay(ep: Endpoints, prefix: str, topic: str) -> RelayService:
    settings = RelaySettings(
        topics=[topic], holder="r", kv_prefix=f"jobq-test/{prefix}", group_prefix=f"{prefix}-relay"
    )
    parts = (RedisSettings(url=ep.redis_url or ""), ConsulSettings(addr=ep.consul_addr), RoutingSettings())
    no_far = FarSettings.model_validate({"horizon_s": 0})
    return RelayService(
        settings, KafkaSettings(bootstrap=ep.kafka_bootstrap), *parts, no_far, TraceSettings()
    )


def described(
    admin: AdminClient, names: list[str], eventually_sync: Callable[..., Any]
) -> dict[str, dict[str, Any]]:
    """Per topic: its smallest replica count and its configs. The broker answering may not know a topic
    another broker just created yet (metadata spreads between brokers): its metadata is asked for again
    until it names every topic."""
    md = eventually_sync(
        lambda: admin.list_topics(timeout=15),
        lambda m: all(n in m.topics and m.topics[n].error is None for n in names),
        30,
        f"the brokers' metadata naming all of {names}",
    )
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
    out = {}
    for res, fut in admin.describe_configs(resources).items():
        conf = {k: e.value for k, e in fut.result(15).items()}
        rf = min(len(p.replicas) for p in md.topics[res.name].partitions.values())
        out[res.name] = {"rf": rf, **conf}
    return out


@pytest.fixture
def kafka3(private_stacks: Callable[[Servers], Stack]) -> Endpoints:
    """The fault suite's 3-broker stack (started here unless a scenario already did)."""
    return private_stacks("kafka3").endpoints


async def test_every_topic_gets_rf_3_and_min_isr_2_on_three_brokers(
    kafka3: Endpoints, prefix: str, monkeypatch: pytest.MonkeyPatch, eventually_sync: Callable[..., Any]
) -> None:
    ep = kafka3
    admin = AdminClient({"bootstrap.servers": ep.kafka_bootstrap, "log_level": 0})
    jobs, schedule, events = f"{prefix}.jobs", f"{prefix}.schedule", f"{prefix}.events"
    far = FarSettings.model_validate({"topic": schedule, "partitions": 2})
    ev = EventSettings.model_validate({"topic": events, "partitions": 2})

    # a schedule topic made by hand with one replica: the scheduler refuses, naming the fix
    admin.create_topics([NewTopic(schedule, 2, 1, config={"cleanup.policy": "compact"})])[schedule].result(30)
    with pytest.raises(TopicsInvalid, match=r"replication factor 1, below 3.*kafka-reassign-partitions"):
        async with scheduler(ep, prefix, far, ev):
            pass
    admin.delete_topics([schedule])[schedule].result(30)

    # services started first create what they own; `jobq topics create` the rest
    async with scheduler(ep, prefix, far, ev):
        pass
    async with relay(ep, prefix, jobs):
        pass
    env = {
        "JOBQ_KAFKA_BOOTSTRAP": ep.kafka_bootstrap,
        "JOBQ_ROUTES": orjson.dumps([{"queues": f"{prefix}.*", "topic": jobs}]).decode(),
        "JOBQ_DEFAULT_TOPIC": "",
        "JOBQ_EVENTS_TOPIC": events,
        "JOBQ_FAR_TOPIC": schedule,
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    done = await asyncio.to_thread(CliRunner().invoke, app, ["topics", "create"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "replication factor 3, min.insync.replicas 2" in done.output
    assert f"created {jobs}\n" in done.output
    assert "altered" not in done.output, "the services created theirs as declared"

    names = [jobs, f"{jobs}.retry", f"{jobs}.dead", f"{jobs}.held", events, schedule]
    got = described(admin, names, eventually_sync)
    assert {n: (t["rf"], t["min.insync.replicas"]) for n, t in got.items()} == {n: (3, "2") for n in names}
    assert (got[schedule]["cleanup.policy"], got[schedule]["retention.ms"]) == ("compact", "-1")
    assert {got[n]["cleanup.policy"] for n in names if n != schedule} == {"delete"}
    for fut in admin.delete_topics(names).values():
        fut.result(30)
