"""Session fixtures: one real local stack (Kafka, Consul, Redis + a 3-master Redis Cluster) per test run.

The stack is started by the same code as ``jobq stack up`` on free loopback ports, under its own name,
and torn down (every process stopped, its folder removed) at the end. Tests never flush the shared
servers: each gets a unique ``prefix`` for its queues, topics and Consul keys.

``JOBQ_TEST_BACKEND=containers`` (or ``auto`` with a Docker engine answering) starts the same servers
from official images through testcontainers instead; CI here has no engine and runs the native path.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import consul
import pytest
import redis.asyncio as aioredis
import structlog
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from redis import Redis as SyncRedis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

from jqcore import log
from jqcore.events import Event, parse_record
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import TraceSettings
from jqcore.settings.pipeline import (
    AuditSettings,
    CronSettings,
    EventSettings,
    FarSettings,
    HistorySettings,
    RelayKeys,
)
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqcore.testsignal import enable_all
from jqcore.topics import audit_topic
from jqengine import Engine
from jqengine.redisconn import Cluster, connect
from jqrelay.main import RelayService
from jqrelay.settings import RelaySettings
from jqruntime import consulconn
from jqruntime.kafka import AsyncProducer
from jqruntime.stores.config import ConfigStore
from jqruntime.topicadmin import apply
from jqsched.service import SchedulerService
from jqsched.settings import SchedulerSettings
from jqstack.manager import Endpoints
from jqstack.pipeline import LOCAL_SPARK
from jqstack.procs import free_port
from jqstack.supervise import Child, Children
from jqstack.testing.backends import SessionStack, start_test_stack
from kafkagate.main import GateService
from kafkagate.settings import GateSettings
from loadtest.topics import end_offsets


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt("SIGTERM")


def pytest_configure(config: pytest.Config) -> None:
    """A terminated run (a CI timeout, ``kill``) ends like Ctrl-C: the fixtures' teardowns still stop every
    process and server the session started, instead of leaving them running.

    structlog's lines go to the current stderr, as every service's main sends them (``jqcore.log``): by
    default they went to ``sys.stdout``, which a ``CliRunner`` swaps for the command's own output while it
    runs, so an in-process relay's line could land inside ``jobq … --json``'s document. Only the stream is
    set here: tests that configure logging themselves (JSON lines, a level) still see their own set-up."""
    signal.signal(signal.SIGTERM, _interrupt)
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=log.STDERR))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def stack() -> Iterator[SessionStack]:
    """The session's shared servers (started once, stopped at the end)."""
    test_stack = start_test_stack(os.environ.get("JOBQ_TEST_BACKEND", "auto"))
    try:
        yield test_stack
    finally:
        test_stack.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session (local[2], loopback, no UI) shared by every test of the run that runs Spark
    in this process (``tests/spark``, the history benchmark's smoke test, which uses the running session
    rather than start its own): it takes ~10 s to start, and a JVM per test would eat the CI budget."""
    from jqspark import spark_session
    from jqstack.provision import ensure_spark_jars

    conf = {
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": LOCAL_SPARK["SPARK_SUBMIT_OPTS"],  # C1 only: −32 % CPU here
    }
    session = spark_session("jobq-tests", jars=ensure_spark_jars(), conf=conf)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def endpoints(stack: SessionStack) -> Endpoints:
    """The session stack's addresses; its audit topic (``JOBQ_AUDIT_TOPIC``, default ``jobq.audit``) is
    created once, as ``jobq topics create`` would, so every gateway, dashboard and CLI command of the run
    ships its audit records there (each test finds its own by its prefix)."""
    apply(KafkaSettings(bootstrap=stack.endpoints.kafka_bootstrap), [audit_topic(load(AuditSettings))])
    return stack.endpoints


@pytest.fixture(autouse=True)
def _stack_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test clearly (never hang) when a server of the shared stack has died."""
    if "stack" not in request.fixturenames:
        yield
        return
    test_stack: SessionStack = request.getfixturevalue("stack")
    test_stack.check()
    yield
    if not request.node.get_closest_marker("kills_servers"):
        test_stack.check()


@pytest.fixture
def prefix() -> str:
    """A unique prefix for this test's queues, topics and keys."""
    return f"t{secrets.token_hex(4)}"


@pytest.fixture
async def redis(endpoints: Endpoints) -> AsyncIterator[aioredis.Redis]:
    assert endpoints.redis_url
    client = aioredis.Redis.from_url(endpoints.redis_url, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def engine(endpoints: Endpoints) -> AsyncIterator[Engine]:
    """The Redis engine on the session's single Redis (``tests/state`` also runs it on the cluster)."""
    assert endpoints.redis_url
    client = connect(RedisSettings(url=endpoints.redis_url))  # the services' connections, as they make them
    try:
        eng = Engine(client)
        enable_all(eng.graphs.signals)  # tests wait on what happened through it (a graph's end)
        yield eng
    finally:
        await client.aclose()


@pytest.fixture
def make_scheduler(
    endpoints: Endpoints, prefix: str, cron_settings: CronSettings
) -> Callable[..., SchedulerService]:
    """``make_scheduler(name, group=<prefix>, redis_url=..., far=FarSettings, cron=False, events=None)``: an
    in-process scheduler service on the session stack keeping the timers of this test's queues
    (``<prefix>*``) in a group of its own (other tests' instances never take its queues); the far-future
    tier runs only when ``far`` is given, cron only with ``cron=True``, the event shipper only when
    ``events`` names its topic; ``series_every_s``: how often it samples the queues' counters."""

    def make(
        name: str,
        *,
        group: str | None = None,
        redis_url: str | None = None,
        far: FarSettings | None = None,
        cron: bool = False,
        events: EventSettings | None = None,
        series_every_s: float = 60.0,
    ) -> SchedulerService:
        settings = SchedulerSettings(
            name=name,
            group=group or prefix,
            queues=[f"{prefix}*"],
            beat_s=0.2,
            stale_s=1.0,
            cron=cron,
            far=far is not None,
            events=events is not None,
            series_every_s=series_every_s,
        )
        service = SchedulerService(
            settings,
            RedisSettings(url=redis_url or endpoints.redis_url or ""),
            ConsulSettings(addr=endpoints.consul_addr),
            cron_settings,
            KafkaSettings(bootstrap=endpoints.kafka_bootstrap),
            far or FarSettings.model_validate({"horizon_s": 0}),
            events or EventSettings(),
        )
        signals = service.signals
        enable_all(signals, signals.timers, signals.events, signals.graphs, signals.far)
        return service

    return make


@pytest.fixture
async def scheduler(
    prefix: str, make_scheduler: Callable[..., SchedulerService]
) -> AsyncIterator[SchedulerService]:
    """The scheduler service, in this process, for this test's queues. Python pools run no timers: a
    test whose jobs are delayed, retried or whose leases expire needs this (or a scheduler process)."""
    async with make_scheduler(f"{prefix}-s0") as service:
        yield service


@pytest.fixture
async def redis_cluster(endpoints: Endpoints) -> AsyncIterator[RedisCluster]:
    nodes = [ClusterNode(h, int(p)) for h, p in (n.rsplit(":", 1) for n in endpoints.redis_cluster_nodes)]
    client = Cluster(startup_nodes=nodes, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def kafka_admin(endpoints: Endpoints) -> AdminClient:
    return AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap, "log_level": 0})


@pytest.fixture
def make_topic(kafka_admin: AdminClient, prefix: str) -> Iterator[Callable[..., str]]:
    """Create topics named after this test's prefix; they are deleted afterwards."""
    made: list[str] = []

    def make(suffix: str = "jobs", partitions: int = 3) -> str:
        name = f"{prefix}.{suffix}"
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            operation_timeout=15,
            request_timeout=15,
        )
        futures[name].result(timeout=20)
        made.append(name)
        _wait_for_leaders(kafka_admin, name)
        return name

    yield make
    if made:
        for fut in kafka_admin.delete_topics(made, operation_timeout=15, request_timeout=15).values():
            with contextlib.suppress(Exception):
                fut.result(timeout=20)


def read_topic(bootstrap: str, topic: str, n: int, timeout_s: float = 60) -> list[Any]:
    """Every record of ``topic`` from offset 0 until ``n`` were read (or the deadline: fewer)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.read", "log_level": 0})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.19):
                assert msg.error() is None, msg.error()
                out.append(msg)
    finally:
        consumer.close()
    return out


TopicReader = Callable[..., list[Any]]
"""``topic_reader(topic, n, timeout_s=60)``: records of a topic (blocking: a thread in async code)."""


@pytest.fixture
def topic_reader(endpoints: Endpoints) -> TopicReader:
    return lambda topic, n, timeout_s=60: read_topic(endpoints.kafka_bootstrap, topic, n, timeout_s)


def read_events(bootstrap: str, topic: str, timeout_s: float = 60) -> list[tuple[Any, Event]]:
    """Every event the events topic ``topic`` holds now (``jqcore.events.parse_record``), each with its
    record, in each partition's order."""
    records = read_topic(bootstrap, topic, end_offsets(bootstrap, topic), timeout_s)
    return [(rec, e) for rec in records for e in parse_record(rec.value())]


TopicEvents = Callable[[str], list[tuple[Any, Event]]]
"""``topic_events(topic)``: the events an events topic holds, with their records (blocking)."""


@pytest.fixture
def topic_events(endpoints: Endpoints) -> TopicEvents:
    return lambda topic: read_events(endpoints.kafka_bootstrap, topic)


@pytest.fixture
def topic_end(endpoints: Endpoints) -> Callable[[str], int]:
    """``topic_end(topic)``: the sum of its end offsets (blocking)."""
    return lambda topic: end_offsets(endpoints.kafka_bootstrap, topic)


POLL_S = 0.05
"""How often a condition with no signal to wait on (``poll_until``, ``eventually``) is looked at again."""


def _gave_up(what: str, timeout_s: float) -> Callable[[RetryCallState], Any]:
    def fail(state: RetryCallState) -> Any:
        last = state.outcome.result() if state.outcome is not None and not state.outcome.failed else None
        raise AssertionError(f"{what} after {timeout_s}s; last value: {last!r}")

    return fail


def poll_until(probe: Callable[[], Any], ok: Callable[[Any], bool], timeout_s: float, what: str) -> Any:
    """The blocking twin of ``eventually`` (for sync tests and fixtures): ``probe()`` until ``ok(value)``,
    within ``timeout_s``; returns the value (an exception from ``probe`` is not retried)."""
    return Retrying(
        retry=retry_if_result(lambda value: not ok(value)),
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(POLL_S),
        retry_error_callback=_gave_up(what, timeout_s),
    )(probe)


def _wait_for_leaders(admin: AdminClient, topic: str, timeout_s: float = 20) -> None:
    """Until every partition of a new topic has a leader: the create call returns before the broker
    knows, and reading offsets meanwhile fails with NOT_LEADER_FOR_PARTITION."""

    def led(meta: Any) -> bool:
        parts = meta.partitions.values()
        return meta.error is None and bool(parts) and all(p.leader >= 0 and p.error is None for p in parts)

    def meta() -> Any:
        return admin.list_topics(topic, timeout=10).topics[topic]

    poll_until(meta, led, timeout_s, f"{topic}: partitions without a leader")


@pytest.fixture
def consul_client(endpoints: Endpoints) -> consul.Consul:
    host, port = endpoints.consul_addr.rsplit(":", 1)
    return consul.Consul(host=host, port=int(port))


# ---- services of the pipeline, started in-process on the session stack -------------------------
TOKEN = "test-token-0123456789"


def start_settings(port: int = 0, **kw: Any) -> GateSettings:
    kw.setdefault("tokens", [TOKEN])
    return GateSettings(port=port, produce_timeout_ms=kw.pop("produce_timeout_ms", 10_000), **kw)


@pytest.fixture
def token() -> str:
    return TOKEN


@pytest.fixture
def cron_settings(prefix: str) -> CronSettings:
    """This test's own Consul KV root for cron schedules."""
    return CronSettings(kv_prefix=f"jobq-test/{prefix}")


@pytest.fixture
async def consul_store(endpoints: Endpoints, cron_settings: CronSettings) -> AsyncIterator[ConfigStore]:
    """The kept configurations and the graph key of this test's Consul prefix (the one its gateways and
    relays use: ``cron_settings``)."""
    client = consulconn.consul_client(ConsulSettings(addr=endpoints.consul_addr))
    try:
        yield ConfigStore(client, cron_settings.kv_prefix)
    finally:
        await consulconn.close_consul(client)


@pytest.fixture
def make_gate(endpoints: Endpoints, cron_settings: CronSettings) -> Callable[..., GateService]:
    """A GateService on a free port; ``bootstrap`` / ``produce_timeout_ms`` override the real broker's."""

    def make(
        routing: RoutingSettings,
        bootstrap: str | None = None,
        redis_url: str | None = None,
        far: FarSettings | None = None,
        history: HistorySettings | None = None,
        **settings: Any,
    ) -> GateService:
        return GateService(
            start_settings(**settings),
            routing,
            KafkaSettings(bootstrap=bootstrap or endpoints.kafka_bootstrap),
            RedisSettings(url=redis_url or endpoints.redis_url or ""),
            ConsulSettings(addr=endpoints.consul_addr),
            cron_settings,
            far or FarSettings(),
            history or HistorySettings(path="/nonexistent/jobq-history"),
            TraceSettings(),
            relay_keys=RelayKeys(kv_prefix=cron_settings.kv_prefix),
        )

    return make


@pytest.fixture
def relay_settings(prefix: str) -> Callable[..., RelaySettings]:
    def make(topic: str, holder: str = "relay-a", **kw: Any) -> RelaySettings:
        return RelaySettings(
            topics=kw.pop("topics", [topic]),
            holder=holder,
            kv_prefix=f"jobq-test/{prefix}",
            group_prefix=f"{prefix}-relay",
            session_ttl_s=10,
            lock_delay_s=0,
            batch=kw.pop("batch", 200),
            **kw,
        )

    return make


@pytest.fixture
def make_relay(
    endpoints: Endpoints, relay_settings: Callable[..., RelaySettings], cron_settings: CronSettings
) -> Callable[..., RelayService]:
    def make(
        topic: str,
        holder: str = "relay-a",
        far: FarSettings | None = None,
        redis_url: str | None = None,
        routing: RoutingSettings | None = None,
        **kw: Any,
    ) -> RelayService:
        """``far``: the far-future tier's settings (default: off, every job goes to Redis);
        ``redis_url``: another Redis (database) than the session's; ``routing``: routes naming
        ``topic`` (default: none, so the topic's queues are not checked)."""
        service = RelayService(
            relay_settings(topic, holder, **kw),
            KafkaSettings(bootstrap=endpoints.kafka_bootstrap),
            RedisSettings(url=redis_url or endpoints.redis_url or ""),
            ConsulSettings(addr=endpoints.consul_addr),
            routing or RoutingSettings(),
            far or FarSettings.model_validate({"horizon_s": 0}),
            TraceSettings(),
            kept=cron_settings,
        )
        for signals in service.signals.values():  # tests wait on what the relays did, not on polls
            enable_all(signals, signals.limit, signals.queue_limits)
        enable_all(service.guard_signals, service.budget_signals)
        return service

    return make


@pytest.fixture
async def producer(endpoints: Endpoints) -> AsyncIterator[AsyncProducer]:
    p = AsyncProducer(KafkaSettings(bootstrap=endpoints.kafka_bootstrap))
    yield p
    await asyncio.to_thread(p.close, 5.0)


Eventually = Callable[..., Awaitable[Any]]
"""``await eventually(probe, ok, timeout_s=60)``: see the fixture."""


@pytest.fixture
def eventually_sync() -> Callable[..., Any]:
    """``eventually_sync(probe, ok, timeout_s, what)``: :func:`poll_until`, for tests that are not async."""
    return poll_until


@pytest.fixture
def eventually() -> Eventually:
    """Call ``probe()`` (awaiting it when it returns an awaitable) until ``ok(value)``, bounded; returns the
    value. For state with no signal to wait on (a counter, a Redis depth, Kafka offsets): the relay runs in
    the background, so the test watches the state it produces rather than sleeping a guessed time. Where a
    signal exists (an elector's role, an event a handler sets) wait on it instead."""

    async def wait(probe: Callable[[], Any], ok: Callable[[Any], bool], timeout_s: float = 60) -> Any:
        async def look() -> Any:
            value = probe()
            return await value if inspect.isawaitable(value) else value

        return await AsyncRetrying(
            retry=retry_if_result(lambda value: not ok(value)),
            stop=stop_after_delay(timeout_s),
            wait=wait_fixed(POLL_S),
            retry_error_callback=_gave_up("condition not reached", timeout_s),
        )(look)

    return wait


def _redis_server(children: Children, name: str, port: int, folder: Path, *extra: str) -> Child:
    folder.mkdir()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)]
    return children.start(
        name, [*argv, "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", *extra]
    )


def _replicating(port: int) -> bool:
    with SyncRedis(port=port, socket_timeout=2) as client:
        return bool(client.info("replication").get("slave0", {}).get("state") == "online")


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[tuple[str, Child]]:
    """A Redis of this test's own with one replica: (the master's URL, the replica's process)."""
    master_port = free_port()
    replica_port = free_port(avoid={master_port})
    with Children(grace_s=5.0) as children:
        master = _redis_server(children, "redis-master", master_port, tmp_path / "master")
        replica = _redis_server(
            children,
            "redis-replica",
            replica_port,
            tmp_path / "replica",
            "--replicaof",
            "127.0.0.1",
            str(master_port),
        )
        master.wait_ready(lambda: _replicating(master_port), timeout_s=30, what="the replica in sync")
        yield f"redis://127.0.0.1:{master_port}/0", replica
