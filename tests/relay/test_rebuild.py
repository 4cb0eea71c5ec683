"""``jobq rebuild`` against the real Kafka, Redis and Consul: Redis is lost (FLUSHDB of a database of its
own) after jobs reached every state with their events shipped by a scheduler; the rebuild brings back
what was pending, delayed, far-future, running, re-enqueued, a running graph and a pending cron fire,
once, and leaves completed, canceled and dead jobs (and a canceled graph) alone. The decision rules are
checked on hand-written events (re-shipped duplicates, a job written again after an earlier loss, a
record produced after its job finished) in a dry run; bad input is refused with the problem named."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
import redis.asyncio as aioredis
from typer.testing import CliRunner

from jobq.cli import app
from jobq.commands.rebuild import cadences
from jqcore.admission import SIGNATURE_HEADER, sign
from jqcore.clock import now_ms
from jqcore.cron import CronSchedule, fire_id
from jqcore.envelope import encode, new_envelope, record_key
from jqcore.errors import GraphNotFound
from jqcore.events import FIELDS, pack
from jqcore.graphs import Step, chain, graph_envelope, parse
from jqcore.routing import Route, RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings, EventSettings, FarSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqengine import Engine
from jqengine.keys import SWITCHES_KEY
from jqrecover.rebuild import RebuildReport, rebuild_from_kafka
from jqrelay.main import RelayService
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.kafka import AsyncProducer, Record, schedule_key
from jqruntime.stores.config import ConfigStore
from jqruntime.stores.cron import CronStore, fire_now
from jqsched.service import SchedulerService
from jqsched.settings import SchedulerSettings
from jqsched.timers import StepResult
from jqstack.manager import Endpoints
from kafkagate.main import GateService

Eventually = Callable[..., Awaitable[Any]]
MakeTopic = Callable[..., str]
Produce = Callable[..., Awaitable[list[str]]]
DB = 11
"""The Redis database that is lost (flushed) here; the session's others are never touched."""


@pytest.fixture
async def lost_db(endpoints: Endpoints) -> AsyncIterator[str]:
    url = (endpoints.redis_url or "").rsplit("/", 1)[0] + f"/{DB}"
    client = aioredis.Redis.from_url(url)
    await client.flushdb()
    yield url
    await client.flushdb()
    await client.aclose()


@pytest.fixture
def rebuild_cli(endpoints: Endpoints, lost_db: str, cron_settings: CronSettings) -> Callable[..., Any]:
    """Run ``jobq rebuild ARGS`` in a thread (it runs its own event loop); (exit code, JSON or output)."""
    env = {
        "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "JOBQ_REDIS_URL": lost_db,
        "CONSUL_HTTP_ADDR": endpoints.consul_addr,
        "JOBQ_CRON_KV_PREFIX": cron_settings.kv_prefix,
        "COLUMNS": "300",  # error boxes on one line
    }

    async def run(*args: str) -> tuple[int, Any]:
        result = await asyncio.to_thread(CliRunner().invoke, app, ["rebuild", *args], env=env)
        if result.exit_code == 0 and "--json" in args:
            return 0, orjson.loads(result.stdout)
        return result.exit_code, result.output

    return run


async def _state(engine: Engine, queue: str, job_id: str) -> str | None:
    info = await engine.reads.get_job(queue, job_id)
    return None if info is None else info.state


async def shipped(scheduler: SchedulerService, queues: list[str]) -> None:
    """Until a shipping round of ``scheduler`` that began after it was dealt ``queues`` (its timers
    stepped them) and after this call found nothing left to ship."""
    dealt: set[str] = set()

    def all_dealt(step: StepResult) -> bool:
        dealt.add(step.queue)
        return set(queues) <= dealt

    await scheduler.timers.signals.stepped.wait_for(all_dealt)
    assert scheduler.shipper is not None
    rounds = scheduler.shipper.signals.shipped
    mark = rounds.mark()
    await rounds.wait_for(after=mark)  # the round under way may have read the streams before this call
    await rounds.wait_for(lambda n: n == 0, after=mark + 1)


async def test_after_a_redis_loss_pending_work_comes_back_once_and_finished_work_does_not(
    prefix: str,
    endpoints: Endpoints,
    lost_db: str,
    cron_settings: CronSettings,
    make_topic: MakeTopic,
    make_relay: Callable[..., RelayService],
    make_scheduler: Callable[..., SchedulerService],
    produce_jobs: Produce,
    producer: AsyncProducer,
    topic_reader: Any,
    topic_end: Callable[[str], int],
) -> None:
    t0 = now_ms()
    topic, events_topic = make_topic("jobs", partitions=2), make_topic("events", partitions=2)
    # the schedule topic is the relay's to create (compacted, never expiring: jqcore/topics.py)
    far = FarSettings.model_validate({"horizon_s": 600, "topic": f"{prefix}.schedule", "partitions": 1})
    q, qg, qc = f"{prefix}.q", f"{prefix}.g", f"{prefix}.c"
    redis = aioredis.Redis.from_url(lost_db)
    engine = Engine(redis)
    consul = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    crons = CronStore(consul, cron_settings.kv_prefix)
    schedule = await crons.put(CronSchedule(name=f"{prefix}-c", every_s=3600, queue=qc, kind="k"), t0)
    fired, kept_fire = fire_id(schedule.name, 3_600_000), fire_id(schedule.name, 7_200_000)
    later_at, far_at = t0 + 300_000, t0 + 7_200_000
    graphs = {
        name: graph_envelope(parse(chain(f"{prefix}-{name}", Step("k"), Step("k"), queue=qg)))
        for name in ("gopen", "gdone")
    }

    relay = make_relay(topic, far=far, redis_url=lost_db)
    scheduler = make_scheduler(f"{prefix}-s0", redis_url=lost_db, events=EventSettings(topic=events_topic))
    async with relay:
        async with scheduler:
            await produce_jobs(topic, q, ["done", "run", "again", "gone", "redo"])
            await produce_jobs(topic, q, ["dead"], max_attempts=1)
            await produce_jobs(topic, q, ["later"], run_at=later_at)
            await produce_jobs(topic, q, ["far", "unsched"], run_at=far_at)
            key = await ConfigStore(consul, cron_settings.kv_prefix).graph_key()  # as a gateway signs one
            signed = [[(SIGNATURE_HEADER, sign(key, g.raw or b""))] for g in graphs.values()]
            await producer.produce_many(
                [Record(topic, g.raw, record_key(g), h) for g, h in zip(graphs.values(), signed, strict=True)]
            )
            ids = ["done", "run", "again", "gone", "redo", "dead", "later"]
            batch = relay.relays[0].signals.batch
            await batch.wait_for(lambda c: c.get("read", 0) >= 11)  # 7 jobs, 2 far ones, 2 graphs
            assert all(await asyncio.gather(*(_state(engine, q, i) for i in ids)))
            for name in ("far", "unsched"):
                assert await engine.reads.far_run_at(q, name) == far_at
            assert (await engine.reads.depth(qg)).pending == 2  # both graphs' roots

            assert (await engine.admin.cancel(q, "gone")).changed
            claimed = {j.id: j for j in await engine.jobs.claim(q, 10)}
            assert sorted(claimed) == ["again", "dead", "done", "redo", "run"]
            for name in ("done", "again", "redo"):
                await engine.jobs.complete(q, (name, claimed[name].attempt, claimed[name].token))
            dead = claimed["dead"]
            assert (
                await engine.jobs.fail(q, (dead.id, dead.attempt, dead.token), "ValueError: no") == "errored"
            )
            assert await engine.graphs.cancel(f"{prefix}-gdone")
            await fire_now(engine, schedule, [3_600_000, 7_200_000])
            (done_fire,) = await engine.jobs.claim(qc, 1)
            await engine.jobs.complete(qc, (done_fire.id, done_fire.attempt, done_fire.token))
            assert done_fire.id == fired
            await produce_jobs(topic, q, ["again", "pend", "tick"])  # a new run of a finished id, new jobs
            await batch.wait_for(lambda c: c.get("read", 0) >= 14)
            assert await _state(engine, q, "tick") == "pending"
            assert await _state(engine, q, "again") == "pending"

            # every event in Kafka: the ended graph's shipped before it is closed, the queues' streams
            # trimmed to nothing
            await scheduler.signals.graph_closed.wait_for(lambda g: g[0] == f"{prefix}-gdone")
            await shipped(scheduler, [q, qg, qc])
            assert not any((await engine.events.backlog([q, qg, qc])).values())
            assert not await engine.graphs.events(f"{prefix}-gdone")
            canceled_at = now_ms()  # one more transition on a queue the shipper watches: how soon in Kafka?
            assert (await engine.admin.cancel(q, "tick")).changed
            await shipped(scheduler, [q])
            assert not any((await engine.events.backlog([q, qg, qc])).values())
            print(f"an event of a watched queue was in Kafka within {now_ms() - canceled_at} ms")
        # no scheduler any more: what happens now stays in Redis and is lost with it
        await produce_jobs(topic, q, ["redo"])  # a new run whose events never reached Kafka
        await batch.wait_for(lambda c: c.get("read", 0) >= 15)
        assert await _state(engine, q, "redo") == "pending"
        # unscheduled as the gateway does it: the tier's tombstone first, then the cancel in Redis
        await producer.produce_many([Record(far.topic, None, schedule_key(q, "unsched"))])
        assert (await engine.admin.cancel(q, "unsched")).changed
    await produce_jobs(topic, q, ["far2"], run_at=far_at)  # the relay never read it
    await redis.flushdb()  # Redis lost everything

    async def rebuild(**kw: Any) -> dict[str, Any]:
        report = await rebuild_from_kafka(
            t0 - 1000,
            [topic],
            kafka=KafkaSettings(bootstrap=endpoints.kafka_bootstrap),
            redis=RedisSettings(url=lost_db),
            events=EventSettings(topic=events_topic),
            far=far,
            consul=ConsulSettings(addr=endpoints.consul_addr),
            cron_settings=cron_settings,
            cadences=cadences(SchedulerSettings()),
            **kw,
        )
        doc = report.as_dict()
        assert orjson.loads(orjson.dumps(doc)) == doc, "JSON-ready"
        return doc

    doc = await rebuild()
    (t,) = doc["topics"]
    assert t["skipped_by_state"] == {"canceled": 4, "completed": 2, "errored": 1}, t
    assert (t["read"], t["kept"], t["rebuilt"], t["far"], t["graphs"], t["duplicate"]) == (16, 9, 8, 2, 1, 1)
    assert doc["cron"] == {"refired": [kept_fire], "missing": [], "finished": 1}
    window = doc["window"]
    print("shipping delays measured on the events read:", window["measured_delay_ms"])
    assert window["measured_delay_ms"]["events"] == doc["events"]["read"] > 0

    for name in ("done", "dead", "gone", "tick", "unsched"):
        assert await _state(engine, q, name) is None, f"{name} finished before the loss: not run again"
    for name in ("pend", "run", "again", "redo"):
        assert await _state(engine, q, name) == "pending", name
    later = await engine.reads.get_job(q, "later")
    assert later is not None
    assert (later.state, later.run_at) == ("delayed", later_at)
    assert (await engine.reads.far_run_at(q, "far"), await engine.reads.far_run_at(q, "far2")) == (
        far_at,
        far_at,
    )
    assert await engine.reads.far_run_at(q, "unsched") is None, "unscheduled: its tombstone is in the tier"
    tier = [(r.key().decode(), r.value() is not None) for r in topic_reader(far.topic, 4)]
    assert sorted(tier) == [(f"{q}/{k}", v) for k, v in TIER], "only far2 was written, as the relay would"
    assert (await engine.reads.depth(q)).pending == 4, "each once"
    assert (await engine.graphs.get(f"{prefix}-gopen")).state == "running"
    with pytest.raises(GraphNotFound):
        await engine.graphs.get(f"{prefix}-gdone")
    assert (await engine.reads.depth(qg)).pending == 1, "the running graph's root again"
    assert await _state(engine, qc, kept_fire) == "pending"
    assert await _state(engine, qc, fired) is None

    again = await rebuild()  # a second rebuild changes nothing: the records are the same ones
    (t,) = again["topics"]
    assert (t["kept"], t["rebuilt"] - t["far"], t["duplicate"]) == (9, 0, 7)
    assert topic_end(far.topic) == len(TIER)
    assert (await engine.reads.depth(q)).pending == 4
    assert (await engine.reads.depth(qg)).pending == 1
    assert (await engine.reads.depth(qc)).pending == 1
    await crons.delete(schedule.name)
    await close_consul(consul)
    await redis.aclose()


STORY = ("pending", "running", "completed")
TIER = [("far", True), ("far2", True), ("unsched", False), ("unsched", True)]
"""The schedule topic's records in the end (key suffix, not a tombstone), sorted."""


def _event(job_id: str, queue: str, to: str, v: int, at: int, origin: str = "") -> dict[str, Any]:
    """A lifecycle event as the transition scripts write it (every field present)."""
    doc: dict[str, Any] = {name: (0 if kind is int else "") for name, kind in FIELDS}
    doc.update(id=job_id, queue=queue, kind="k", to=to, v=v, at=at, origin=origin)
    return doc


async def test_a_dry_run_decides_from_the_latest_event_of_each_job_and_writes_nothing(
    prefix: str,
    lost_db: str,
    make_topic: MakeTopic,
    producer: AsyncProducer,
    rebuild_cli: Any,
    eventually: Eventually,
) -> None:
    topic, events_topic = make_topic("jobs", partitions=1), make_topic("events", partitions=1)
    q = f"{prefix}.q"
    before = now_ms() - 5_000
    envs = [new_envelope(q, "k", None, id=i) for i in ("a", "b", "c", "d", "e", "f")]
    sent = await producer.produce_many([Record(topic, encode(e), record_key(e)) for e in envs])
    origin = {e.id: f"{topic}/{d.partition}/{d.offset}" for e, d in zip(envs, sent, strict=True)}
    t = await eventually(now_ms, lambda ms: ms > max(e.enqueued_at for e in envs) + 1, 5)
    events = [
        # a: ran and completed → skipped
        *(_event("a", q, s, v, t + v, origin["a"] if v == 1 else "") for v, s in enumerate(STORY, 1)),
        # b: canceled, then a new run of the id → back
        _event("b", q, "pending", 1, t, origin["b"]),
        _event("b", q, "canceled", 2, t + 1),
        _event("b", q, "pending", 3, t + 2, f"{topic}/0/999"),
        # c: no event at all (Redis lost it before shipping) → back
        # d: completed, then its first event shipped once more (a re-ship) → still skipped
        *(_event("d", q, s, v, t + v, origin["d"] if v == 1 else "") for v, s in enumerate(STORY, 1)),
        _event("d", q, "pending", 1, t + 1, origin["d"]),
        # e: completed, then written again from its record after an earlier loss (versions restart) → back
        *(_event("e", q, s, v, t + v, origin["e"] if v == 1 else "") for v, s in enumerate(STORY, 1)),
        _event("e", q, "pending", 1, t + 60_000, origin["e"]),
        # f: its record was produced after the job (an earlier record) had completed → back (a new run)
        _event("f", q, "pending", 1, before - 2, f"{topic}/0/998"),
        _event("f", q, "completed", 2, before - 1),
    ]
    # a and b as a scheduler shipped them before events were batched (a record each, keyed by job id), the
    # rest as one does now (JSON arrays, jqcore.events.pack): the rebuild reads both
    old, new = events[:6], [(e["id"], orjson.dumps(e)) for e in events[6:]]
    records = [Record(events_topic, orjson.dumps(e), e["id"].encode()) for e in old]
    await producer.produce_many(records + [Record(events_topic, v, partition=p) for p, v in pack(new, 1)])
    code, doc = await rebuild_cli(
        "--topic", topic, "--events-topic", events_topic, "--from=-1h", "--dry-run", "--json"
    )
    assert code == 0, doc
    (r,) = doc["topics"]
    assert (r["read"], r["kept"], r["rebuilt"], r["skipped_by_state"]) == (6, 4, 0, {"completed": 2}), r
    assert doc["events"]["read"] == len(events)
    assert doc["dry_run"] is True
    client = aioredis.Redis.from_url(lost_db)
    assert await client.dbsize() == 0, "a dry run writes nothing"
    await client.aclose()
    code, out = await rebuild_cli("--topic", topic, "--events-topic", events_topic, "--from=-1h", "--dry-run")
    assert code == 0, out
    assert "dry run: nothing written" in out, out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "{topic}", "--from", "yesterday"], "expected an ISO-8601 time"),
        (["--topic", "{topic}", "--from", "12"], "not an offset"),
        (["--topic", "{prefix}.absent", "--from=-1h"], "'{prefix}.absent' do not exist"),
        (["--topic", "{topic}", "--from=-1h", "--events-topic", "{prefix}.none"], "events topic"),
    ],
)
async def test_bad_input_is_refused_with_the_problem_named(
    prefix: str, make_topic: MakeTopic, rebuild_cli: Any, args: list[str], message: str
) -> None:
    topic = make_topic("jobs", partitions=1)
    events = make_topic("events", partitions=1)
    code, out = await rebuild_cli(
        "--events-topic", events, *(a.format(prefix=prefix, topic=topic) for a in args)
    )
    assert code == 2, out
    assert message.format(prefix=prefix) in " ".join(out.split()), out
    assert "Traceback" not in out


async def test_a_rebuild_restores_queue_configurations_and_kind_options_before_any_job(
    prefix: str,
    endpoints: Endpoints,
    lost_db: str,
    cron_settings: CronSettings,
    make_topic: MakeTopic,
    make_gate: Callable[..., GateService],
    token: str,
) -> None:
    """Configured through the gateway (kept in Consul too), lost with the queue's Redis keys and the kill
    switches: the rebuild writes the switches, the configuration and the kind's options back first, so the
    jobs come back into an exclusive queue (one job per account runs) with their kind's attempts, and the
    switched account's job is held."""
    t0 = now_ms()
    topic, events_topic = make_topic("jobs", partitions=1), make_topic("events", partitions=1)
    q, kind = f"{prefix}.x", f"{prefix}.k"
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    jobs = [
        {"id": i, "kind": kind, "meta": {"account": a}} for i, a in (("a1", "x"), ("a2", "x"), ("b1", "y"))
    ]
    async with (
        make_gate(routing, redis_url=lost_db) as gate,
        aiohttp.ClientSession(base_url=gate.url, headers={"Authorization": f"Bearer {token}"}) as http,
    ):
        for method, path, body in [
            ("PUT", f"/v1/queues/{q}", {"mode": "exclusive", "excl_key": "account", "lease_ms": 5000}),
            ("PUT", f"/v1/kinds/{kind}", {"queues": [q], "max_attempts": 3, "priority": 7}),
            ("PUT", f"/v1/switches/{prefix}-y", {"queue": q, "meta": {"account": "y"}}),
            ("POST", f"/v1/queues/{q}/jobs", {"jobs": jobs}),
        ]:
            async with http.request(method, path, json=body) as resp:
                assert resp.status in (200, 202), await resp.text()
    redis = aioredis.Redis.from_url(lost_db)
    engine = Engine(redis)
    lost = [key async for key in redis.scan_iter(match=f"jobq:{{{q}}}:*")]
    assert lost, "the gateway configured the queue in this database"
    await redis.delete(*lost, SWITCHES_KEY)
    assert (await engine.reads.queue_config(q)).mode == "simple", "Redis lost it"
    consul = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    broken = f"{cron_settings.kv_prefix}/queue-config/{q}.broken"
    await consul.kv.put(broken, "{not json")  # written by hand: named, not restored, nothing stops

    async def rebuild() -> Any:
        return await _rebuild(t0, topic, events_topic, endpoints, lost_db, cron_settings)

    report = await rebuild()
    restored = {
        "switches": [f"{prefix}-y"],
        "queues": [q],
        "kinds": [f"{kind}@{q}"],
        "kept": 0,
        "unreadable": [broken],
    }
    assert report.as_dict()["configs"] == restored
    (t,) = report.topics
    assert t.totals()["rebuilt"] == 3
    config = await engine.reads.queue_config(q)
    assert (config.mode, config.excl_key, config.lease_ms) == ("exclusive", "account", 5000)
    options = (await engine.reads.kinds([q]))[kind]["queues"][q]
    assert (options["max_attempts"], options["priority"]) == (3, 7)
    for job_id in ("a1", "a2", "b1"):  # written after the options: the kind's attempts and priority
        info = await engine.reads.get_job(q, job_id)
        assert info is not None
        assert (info.max_attempts, info.priority) == (3, 7), job_id
    claimed = sorted(c.id for c in await engine.jobs.claim(q, 10))
    assert claimed in (["a1"], ["a2"]), "an exclusive queue (one per account), account y switched off"
    info = await engine.reads.get_job(q, "b1")
    assert info is not None
    assert info.state == "parked"

    again = (await rebuild()).configs  # what Redis has now is left alone
    assert (again.switches, again.queues, again.kinds, again.kept) == ([], [], [], 2)
    await consul.kv.delete(cron_settings.kv_prefix + "/", recurse=True)
    await close_consul(consul)
    await redis.aclose()


async def test_a_held_queues_records_are_left_to_the_lane(
    prefix: str,
    endpoints: Endpoints,
    lost_db: str,
    cron_settings: CronSettings,
    make_topic: MakeTopic,
    make_relay: Callable[..., RelayService],
    produce_jobs: Produce,
) -> None:
    """A queue held at the relay (its rate ``paused``) has its records waiting in ``<topic>.held``: after a
    Redis loss the rebuild leaves them there (the relay's drain writes them, in order and at the queue's
    rate, once it is released) — and the queue's records the relay has not read yet, which it will set
    aside too — and writes its neighbour's."""
    t0 = now_ms()
    topic, events_topic = make_topic("jobs", partitions=1), make_topic("events", partitions=1)
    slow, fast = f"{prefix}.slow", f"{prefix}.fast"
    consul = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    await consul.kv.put(f"jobq-test/{prefix}/queue-rates/{slow}", "paused")
    try:
        held = await produce_jobs(topic, slow, ["s1", "s2", "s3"])
        flowed = await produce_jobs(topic, fast, ["f1", "f2"])
        async with make_relay(topic, redis_url=lost_db) as relay:
            batch = relay.signals[topic].batch
            await batch.wait_for(lambda c: c.get("written", 0) >= 2 and c.get("aside", 0) >= 3)
            keys = relay.settings
        held += await produce_jobs(topic, slow, ["s4"])  # not read by the relay yet
        redis = aioredis.Redis.from_url(lost_db)
        await redis.flushdb()  # Redis lost everything
        engine = Engine(redis)
        report = await _rebuild(t0, topic, events_topic, endpoints, lost_db, cron_settings, relay_keys=keys)
        [totals] = report.as_dict()["topics"]
        assert (totals["held"], totals["rebuilt"]) == (4, 2)
        assert all([await engine.reads.get_job(fast, i) for i in flowed])
        assert [await engine.reads.get_job(slow, i) for i in held] == [None] * 4, "left to the drain"
        await redis.aclose()
    finally:
        await consul.kv.delete(f"jobq-test/{prefix}/", recurse=True)
        await close_consul(consul)


async def _rebuild(
    t0: int,
    topic: str,
    events_topic: str,
    endpoints: Endpoints,
    lost_db: str,
    cron_settings: CronSettings,
    **kw: Any,
) -> RebuildReport:
    """``jobq rebuild`` of ``topic`` from just before ``t0`` into the lost database (no far-future tier)."""
    return await rebuild_from_kafka(
        t0 - 1000,
        [topic],
        kafka=KafkaSettings(bootstrap=endpoints.kafka_bootstrap),
        redis=RedisSettings(url=lost_db),
        events=EventSettings(topic=events_topic),
        far=FarSettings.model_validate({"horizon_s": 0}),
        consul=ConsulSettings(addr=endpoints.consul_addr),
        cron_settings=cron_settings,
        cadences=cadences(SchedulerSettings()),
        **kw,
    )
