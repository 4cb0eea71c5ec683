"""The secure stack (``jobq stack up --name secure --secure``), started once for the module: every server
refuses plaintext and wrong credentials, each role's credentials work over TLS for what that role does and
are refused for what it does not, and no secret reaches a server's log."""

from __future__ import annotations

import os
import ssl
import stat
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import consul
import pytest
import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from redis.backoff import NoBackoff
from redis.retry import Retry

from jqstack.manager import Stack, StackSpec
from jqstack.secure import ROLES, SecureFiles
from jqstack.supervise import alive

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
    """Commit ``msg``'s offset; the first commit of a fresh broker meets the offsets topic being made
    (NOT_COORDINATOR, retriable): try again until the broker answers otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.commit(message=msg, asynchronous=False)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
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
    relay = secure.consul("relay")
    key = f"jobq-secure/locks/{uuid.uuid4().hex[:8]}"
    session = relay.session.create(name="jobq-secure-test", ttl=30, behavior="delete")
    assert relay.kv.put(key, "holder", acquire=session) is True
    _, entry = relay.kv.get(key)
    assert entry is not None
    assert entry["Session"] == session
    assert relay.kv.put(key, "holder", release=session) is True
    relay.session.destroy(session)
    with pytest.raises(consul.ACLPermissionDenied):
        secure.consul("worker").kv.put(key, "x")


def test_env_secrets_and_logs(secure: Secure) -> None:
    files = secure.files
    assert stat.S_IMODE(files.root.stat().st_mode) == 0o700
    for path in (files.ca_key, files.server_key, files.kafka_keystore, files.secret_file("redis", "worker")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    secrets = [files.secret(kind, role) for kind in ("kafka", "redis", "consul") for role in ROLES]
    secrets += [files.secret("consul", "management"), files.secret("gate")]
    for server in secure.stack.servers:
        log = server.log.read_text(errors="replace")
        leaked = [s for s in secrets if s in log]
        assert not leaked, f"{server.name}'s log holds a secret"
    assert (secure.stack.of_kind("redis")[0].data_dir / "users.acl").read_text().count("#") == len(ROLES)
    print(f"secure stack up in {secure.up_s:.1f}s")  # shown with -s: the cost of the module
