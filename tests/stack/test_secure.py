"""The secure stack (``jobq stack up --name secure --secure``), started once for the module: every server
refuses plaintext and wrong credentials, each role's credentials work over TLS for what that role does and
are refused for what it does not, and no secret reaches a server's log. On it, the demo runs end to end
(``jobq demo --once --stack``: every component with its own role, the PySpark history included), a
service given plaintext settings stops at once naming what to set, and no process log holds a secret."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import consul
import orjson
import pytest
import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobq import demo_workload
from jqcore.errors import BackendUnavailable
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import HistorySettings
from jqcore.settings.servers import RedisSettings
from jqcore.topics import TopicSpec
from jqengine import connect
from jqruntime.preflight import ProtocolRefused, check_redis
from jqruntime.topicadmin import ensure
from jqstack.manager import Stack, StackSpec
from jqstack.pipeline import SERVER_SETTINGS, Service, service_argv
from jqstack.procs import free_port
from jqstack.secure import ROLES, SecureFiles
from jqstack.supervise import alive, stop_pids

pytestmark = pytest.mark.secure


class Secure:
    def __init__(self, stack: Stack, files: SecureFiles, up_s: float) -> None:
        self.stack, self.files, self.up_s = stack, files, up_s
        self.bootstrap = stack.endpoints.kafka_bootstrap
        self.redis_port = stack.of_kind("redis")[0].port
        self.consul_port = stack.of_kind("consul")[0].port

    def kafka(self, role: str, **over: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "log_level": 0, **self.files.kafka_client(role), **over}

    def redis(self, role: str, **over: Any) -> redis.Redis:
        kw: dict[str, Any] = {**self.files.redis_client(role), "socket_timeout": 5, **over}
        return redis.Redis(host="127.0.0.1", port=self.redis_port, **kw)

    def consul(self, role: str) -> consul.Consul:
        token = self.files.secret("consul", role)
        return consul.Consul(
            host="127.0.0.1",
            port=self.consul_port,
            scheme="https",
            verify=str(self.files.ca_cert),
            token=token,
        )


@pytest.fixture(scope="module")
def secure() -> Iterator[Secure]:
    stack = Stack(StackSpec(name=f"pytest-secure-{os.getpid()}", secure=True, fixed_ports=False))
    stack.down(purge=True)
    stack = Stack(stack.spec)
    started = time.monotonic()
    try:
        stack.up(timeout_s=180)
        assert stack.secure is not None
        yield Secure(stack, stack.secure, time.monotonic() - started)
    finally:
        pids = [s.pid for s in stack.servers]
        stack.down(purge=True)
        assert not any(alive(p) for p in pids)


def _first_error(conf: dict[str, Any], timeout_s: float = 30) -> KafkaError:
    """The first error a Kafka admin client reports for ``conf`` (waits on the client's error event)."""
    errors: list[KafkaError] = []
    with_cb: dict[str, Any] = {**conf, "error_cb": errors.append}
    admin = AdminClient(with_cb)
    deadline = time.monotonic() + timeout_s
    while not errors and time.monotonic() < deadline:
        admin.poll(0.1)
    assert errors, "the client reported no error"
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)
    return errors[0]


def test_kafka_refuses_plaintext_and_wrong_passwords(secure: Secure) -> None:
    plain = {"bootstrap.servers": secure.bootstrap, "log_level": 0, "security.protocol": "PLAINTEXT"}
    assert _first_error(plain).code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    wrong = secure.kafka("relay", **{"sasl.password": "not-the-password"})
    assert _first_error(wrong).code() == KafkaError._AUTHENTICATION
    no_ca = secure.kafka("relay", **{"ssl.ca.location": "probe"})  # the system CAs do not know the stack's
    assert _first_error(no_ca).code() in (
        KafkaError._SSL,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    )


def _commit(consumer: Consumer, msg: Any, timeout_s: float = 30) -> None:
    """Commit ``msg``'s offset; the first commit of a fresh broker meets the offsets topic being made or
    loaded (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS: librdkafka does not always flag them retriable
    here): try again until the broker answers otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.commit(message=msg, asynchronous=False)
            return
        except KafkaException as exc:
            err = exc.args[0]
            moving = err.code() in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
            if not (err.retriable() or moving) or time.monotonic() > deadline:
                raise


def test_kafka_roles_produce_and_consume_within_their_acls(secure: Secure) -> None:
    topic = f"jobq-secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secure.kafka("admin"))
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=30)

    producer = Producer(secure.kafka("gateway", **{"enable.idempotence": True, "acks": "all"}))
    reports: list[Any] = []
    producer.produce(topic, b"job-1", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    assert reports == [None]

    consumer = Consumer(
        secure.kafka("relay", **{"group.id": f"jobq-relay.{topic}", "enable.auto.commit": False})
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = consumer.poll(30)
        assert msg is not None
        assert msg.error() is None
        assert msg.value() == b"job-1"
        _commit(consumer, msg)  # the group's ACL holds
    finally:
        consumer.close()

    denied: list[Any] = []
    canary = Producer(secure.kafka("canary", **{"message.timeout.ms": 10000}))
    canary.produce(topic, b"x", on_delivery=lambda err, msg: denied.append(err))
    canary.flush(30)
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_redis_refuses_plaintext_the_default_user_and_wrong_passwords(secure: Secure) -> None:
    once = Retry(NoBackoff(), 0)  # a refusal is final (redis-py would retry it with backoff)
    plain = redis.Redis(host="127.0.0.1", port=secure.redis_port, socket_timeout=5, retry=once)
    wrong = secure.redis("worker", password="not-the-password", retry=once)
    anonymous = secure.redis("worker", username=None, password=None, retry=once)  # the default user is off
    for client, refusal in (
        (plain, redis.ConnectionError),
        (wrong, redis.AuthenticationError),
        (anonymous, redis.AuthenticationError),
    ):
        with client, pytest.raises(refusal):
            client.ping()


def test_redis_users_have_their_rules(secure: Secure) -> None:
    key = f"jobq-secure:{uuid.uuid4().hex}"
    with secure.redis("worker") as worker:
        assert worker.set(key, "1")
        assert worker.get(key) == b"1"
        assert worker.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.flushall()
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.config_set("maxmemory-policy", "allkeys-lru")
    with secure.redis("admin") as admin:
        assert admin.delete(key) == 1


def test_consul_refuses_plain_http_and_wrong_tokens(secure: Secure) -> None:
    with pytest.raises((urllib.error.URLError, ConnectionError)) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{secure.consul_port}/v1/status/leader", timeout=5)
    if isinstance(err.value, urllib.error.HTTPError):  # Go answers plain HTTP on a TLS port with a 400
        err.value.close()
        assert err.value.code == 400
    ctx = ssl.create_default_context(cafile=str(secure.files.ca_cert))
    for token in (None, str(uuid.uuid4())):  # none: the anonymous token, denied by default
        url = f"https://127.0.0.1:{secure.consul_port}/v1/kv/jobq/x"
        req = urllib.request.Request(url, method="PUT", data=b"1")
        if token:
            req.add_header("X-Consul-Token", token)
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(req, timeout=5, context=ctx)
        denied.value.close()
        assert denied.value.code == 403


def test_consul_relay_token_takes_a_lock_and_the_worker_token_may_not(secure: Secure) -> None:
    key = f"jobq-secure/locks/{uuid.uuid4().hex[:8]}"
    with secure.consul("relay") as relay:  # closed: a leaked HTTP session fails a later test as unraisable
        session = relay.session.create(name="jobq-secure-test", ttl=30, behavior="delete")
        assert relay.kv.put(key, "holder", acquire=session) is True
        _, entry = relay.kv.get(key)
        assert entry is not None
        assert entry["Session"] == session
        assert relay.kv.put(key, "holder", release=session) is True
        relay.session.destroy(session)
    with secure.consul("worker") as worker, pytest.raises(consul.ACLPermissionDenied):
        worker.kv.put(key, "x")


def every_secret(files: SecureFiles) -> list[str]:
    """Every password and token in ``<stack>/secrets``."""
    return [p.read_text() for p in sorted(files.root.iterdir()) if p.suffix in (".password", ".token")]


def test_env_secrets_and_logs(secure: Secure) -> None:
    files = secure.files
    assert stat.S_IMODE(files.root.stat().st_mode) == 0o700
    for path in (files.ca_key, files.server_key, files.kafka_keystore, files.secret_file("redis", "worker")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    secrets = every_secret(files)
    assert len(secrets) == 3 * len(ROLES) + 5  # kafka/redis/consul per role, broker, management, gate, web x2
    for server in secure.stack.servers:
        log = server.log.read_text(errors="replace")
        leaked = [s for s in secrets if s in log]
        assert not leaked, f"{server.name}'s log holds a secret"
    assert (secure.stack.of_kind("redis")[0].data_dir / "users.acl").read_text().count("#") == len(ROLES)
    print(f"secure stack up in {secure.up_s:.1f}s")  # shown with -s: the cost of the module


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any server setting (a developer's shell may hold some)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_SETTINGS)}
    return {**env, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1", **extra}


def _without(env: dict[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(prefix)}


def test_a_service_with_plaintext_settings_stops_naming_what_to_set(secure: Secure) -> None:
    """Against the secure stack, plaintext Redis, Kafka or Consul settings stop a service at start-up with
    one line naming the settings to set (before: it started unchecked, or retried for ever)."""
    stack, ep = secure.stack, secure.stack.endpoints
    gate = {"JOBQ_GATE_TOKENS": "t", "JOBQ_GATE_PORT": str(free_port())}
    canary = {"JOBQ_CANARY_GATEWAYS": "http://127.0.0.1:1", "JOBQ_CANARY_TOKEN": "t"}
    cases: list[tuple[Service, dict[str, str], str]] = [  # every setting plaintext: Redis is asked first
        ("gateway", {**ep.exports(), **gate}, f"Redis at 127.0.0.1:{secure.redis_port} takes TLS only"),
        (  # the canary's own Redis user, Kafka plaintext
            "canary",
            {
                **_without(stack.client_env("canary"), "JOBQ_KAFKA_"),
                "JOBQ_KAFKA_BOOTSTRAP": secure.bootstrap,
                **canary,
            },
            f"Kafka at {secure.bootstrap} takes TLS",
        ),
        (  # the gateway's own Redis user and Kafka user, Consul over http
            "gateway",
            {
                **_without(stack.client_env("gateway"), "JOBQ_CONSUL_"),
                "JOBQ_CONSUL_ADDR": ep.consul_addr,
                **gate,
            },
            f"Consul at 127.0.0.1:{secure.consul_port} takes HTTPS only",
        ),
    ]
    runs = [
        subprocess.Popen(
            service_argv(service),
            env=_clean_env(**settings),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for service, settings, _ in cases
    ]
    for run, (_, _, said) in zip(runs, cases, strict=True):
        out, _ = run.communicate(timeout=60)  # not a hang: each stops within seconds
        last = out.strip().splitlines()[-1]
        assert run.returncode == 2, out[-4000:]
        assert last.startswith("error (protocol_refused): "), out[-4000:]
        assert "Traceback" not in out, "one line, not a traceback"
        assert said in last, last


async def test_a_redis_user_redis_refuses_stops_a_service_naming_the_settings(secure: Secure) -> None:
    settings = load(
        RedisSettings,
        url=f"rediss://127.0.0.1:{secure.redis_port}/0",
        tls_ca_file=str(secure.files.ca_cert),
        username="worker",
        password="not-the-password",
    )
    client = connect(settings)
    try:
        with pytest.raises(
            ProtocolRefused, match=r"^Redis refused user 'worker': set JOBQ_REDIS_USERNAME"
        ) as err:
            await check_redis(client, settings)
    finally:
        await client.aclose()
    assert "not-the-password" not in str(err.value)


DEMO_TIMEOUT_S = 300
"""``jobq demo --timeout``: it gives up (exit 1) by then; the test allows the stop on top."""


class DemoRun:
    """``jobq demo --once --stack <secure>`` as a process of its own: started when the stack is up, so the
    module's other tests run while Spark starts (the expensive part); the demo's test waits for it."""

    def __init__(self, stack: Stack, folder: Path) -> None:
        self.started = time.monotonic()
        self.workdir, self.history, self.out = folder / "demo", folder / "history", folder / "demo.out"
        argv = [sys.executable, "-m", "jobq", "demo", "--once", "--timeout", str(DEMO_TIMEOUT_S)]
        argv += ["--stack", stack.spec.name, "--workdir", str(self.workdir)]
        with self.out.open("wb") as out:
            env = _clean_env(JOBQ_HISTORY_PATH=str(self.history))
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def stop(self) -> None:
        """Ctrl-C (the demo stops its processes), then whatever it left: its children run in sessions of
        their own."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(OSError, orjson.JSONDecodeError):
            stop_pids(list(orjson.loads((self.workdir / "pids.json").read_bytes()).values()), grace_s=5)


@pytest.fixture(scope="module", autouse=True)
def demo_run(
    request: pytest.FixtureRequest, secure: Secure, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DemoRun | None]:
    """Started before the module's first test when the demo's test is among those run (else not at all)."""
    if not any(
        item.name == test_the_demo_runs_end_to_end_on_the_secure_stack.__name__
        for item in request.session.items
    ):
        yield None
        return
    run = DemoRun(secure.stack, tmp_path_factory.mktemp("secure-demo"))
    try:
        yield run
    finally:
        run.stop()


def test_the_demo_runs_end_to_end_on_the_secure_stack(secure: Secure, demo_run: DemoRun | None) -> None:
    """``jobq demo --once --stack <secure>``: two gateways, two relays, two schedulers, the worker pool, the
    canary, the dashboard and the PySpark history, each with its own role's Kafka, Redis and Consul
    credentials; it exits 0 only when every demo job reached its expected state *and* the history (Spark
    reading the events topic over SASL_SSL) shows it so. Then every log is searched for every secret."""
    assert demo_run is not None
    waited = time.monotonic()
    code = demo_run.proc.wait(DEMO_TIMEOUT_S + 180)  # the demo gives up by itself after its --timeout
    output = demo_run.output()
    assert code == 0, output[-12000:]
    logs = sorted(demo_run.workdir.glob("*.log"))
    every = {"gate-az-a", "gate-az-b", "relay-1", "relay-2", "scheduler-1", "scheduler-2", "worker"}
    assert {p.stem for p in logs} >= every | {"canary", "web", "history"}

    jobs = [tuple(j) for j in orjson.loads((demo_run.workdir / "jobs.json").read_bytes())]
    assert len(jobs) == len(demo_workload.workload())
    assert demo_workload.in_history(jobs, load(HistorySettings, path=str(demo_run.history))) == len(jobs)

    secrets = every_secret(secure.files)
    for name, text in [
        ("the demo's output", output),
        *((p.name, p.read_text(errors="replace")) for p in logs),
    ]:
        assert not [s for s in secrets if s in text], f"{name} holds a secret"
    took, waited = time.monotonic() - demo_run.started, time.monotonic() - waited
    print(f"the demo on the secure stack took {took:.1f}s, {waited:.1f}s of them after the other tests")


def test_a_role_that_may_not_create_a_topic_waits_for_the_one_that_may(
    secure: Secure, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history (no CREATE on the cluster) starting before the scheduler made the events topic: its
    start-up check waits for the topic instead of stopping on the refusal; a topic nobody makes is named."""
    for key, value in secure.stack.client_env("history").items():
        monkeypatch.setenv(key, value)
    kafka = load(KafkaSettings)
    late, never = (f"jobq-secure-{uuid.uuid4().hex[:8]}" for _ in range(2))
    admin = AdminClient(secure.kafka("admin"))
    timer = threading.Timer(1.0, lambda: admin.create_topics([NewTopic(late, 1, 1)])[late].result(timeout=30))
    timer.start()
    try:
        assert ensure(kafka, [TopicSpec(late, "events", 1)], timeout_s=15) == []
    finally:
        timer.join()
    with pytest.raises(BackendUnavailable, match=f"topic '{never}' does not exist, this service may not"):
        ensure(kafka, [TopicSpec(never, "events", 1)], timeout_s=2)
