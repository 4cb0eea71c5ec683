"""Settings: defaults, env names (JOBQ_ and the ecosystems' standard ones), secrets, clear errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from jqcore.errors import ConfigError
from jqcore.settings.common import DEFAULT_CONSUL_ADDR, DEFAULT_KAFKA_BOOTSTRAP, DEFAULT_REDIS_URL, load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import LogSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqsched.settings import SchedulerSettings
from worker.main import pool_config
from worker.settings import WorkerSettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("JOBQ_", "CONSUL_", "REDIS_", "KAFKA_")):
            monkeypatch.delenv(name)


# ---- defaults ------------------------------------------------------------------------------------------


def test_redis_defaults() -> None:
    settings = load(RedisSettings)
    assert settings.url == DEFAULT_REDIS_URL
    assert (settings.cluster, settings.tls) == (False, False)
    assert (settings.username, settings.password) == (None, None)
    assert settings.client_kwargs() == {"socket_timeout": 35.0, "socket_connect_timeout": 5.0}


def test_kafka_defaults() -> None:
    settings = load(KafkaSettings)
    assert settings.bootstrap == DEFAULT_KAFKA_BOOTSTRAP
    assert settings.config == {}
    assert settings.client_config() == {
        "bootstrap.servers": DEFAULT_KAFKA_BOOTSTRAP,
        "security.protocol": "PLAINTEXT",
    }


def test_consul_and_log_defaults() -> None:
    consul = load(ConsulSettings)
    assert consul.addr == DEFAULT_CONSUL_ADDR
    assert (consul.host, consul.port, consul.scheme, consul.token) == ("127.0.0.1", 28500, "http", None)
    log = load(LogSettings)
    assert (log.level, log.format) == ("info", "console")


# ---- environment names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "var", "value", "attr", "expected"),
    [
        (RedisSettings, "JOBQ_REDIS_URL", "rediss://r:6380/1", "url", "rediss://r:6380/1"),
        (RedisSettings, "REDIS_URL", "redis://r:6380/2", "url", "redis://r:6380/2"),
        (RedisSettings, "JOBQ_REDIS_CLUSTER", "true", "cluster", True),
        (RedisSettings, "JOBQ_REDIS_USERNAME", "worker", "username", "worker"),
        (RedisSettings, "JOBQ_REDIS_SOCKET_TIMEOUT_S", "0.5", "socket_timeout_s", 0.5),
        (KafkaSettings, "JOBQ_KAFKA_BOOTSTRAP", "k:1", "bootstrap", "k:1"),
        (KafkaSettings, "KAFKA_BOOTSTRAP_SERVERS", "k1:9092,k2:9092", "bootstrap", "k1:9092,k2:9092"),
        (KafkaSettings, "JOBQ_KAFKA_SECURITY_PROTOCOL", "SSL", "security_protocol", "SSL"),
        (ConsulSettings, "JOBQ_CONSUL_ADDR", "c:1", "addr", "c:1"),
        (ConsulSettings, "CONSUL_HTTP_ADDR", "10.1.2.3:8501", "addr", "10.1.2.3:8501"),
        (ConsulSettings, "JOBQ_CONSUL_SCHEME", "https", "scheme", "https"),
        (LogSettings, "JOBQ_LOG_LEVEL", "debug", "level", "debug"),
        (LogSettings, "JOBQ_LOG_FORMAT", "json", "format", "json"),
    ],
)
def test_environment_names(
    monkeypatch: pytest.MonkeyPatch, cls: type[BaseSettings], var: str, value: str, attr: str, expected: Any
) -> None:
    monkeypatch.setenv(var, value)
    assert getattr(load(cls), attr) == expected


@pytest.mark.parametrize(
    ("cls", "standard", "jobq", "attr"),
    [
        (RedisSettings, "REDIS_URL", "JOBQ_REDIS_URL", "url"),
        (KafkaSettings, "KAFKA_BOOTSTRAP_SERVERS", "JOBQ_KAFKA_BOOTSTRAP", "bootstrap"),
        (ConsulSettings, "CONSUL_HTTP_ADDR", "JOBQ_CONSUL_ADDR", "addr"),
    ],
)
def test_jobq_names_win_over_standard_ones(
    monkeypatch: pytest.MonkeyPatch, cls: type[BaseSettings], standard: str, jobq: str, attr: str
) -> None:
    monkeypatch.setenv(standard, "redis://standard:1/0" if cls is RedisSettings else "standard:1")
    monkeypatch.setenv(jobq, "redis://jobq:2/0" if cls is RedisSettings else "jobq:2")
    assert getattr(load(cls), attr) == ("redis://jobq:2/0" if cls is RedisSettings else "jobq:2")


def test_consul_standard_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUL_HTTP_ADDR", "http://consul.internal:8501")
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "s3cret-token")
    consul = load(ConsulSettings)
    assert (consul.host, consul.port) == ("consul.internal", 8501)
    assert consul.token is not None
    assert consul.token.get_secret_value() == "s3cret-token"
    monkeypatch.setenv("JOBQ_CONSUL_TOKEN", "jobq-token")
    token = load(ConsulSettings).token
    assert token is not None
    assert token.get_secret_value() == "jobq-token"


def test_overrides_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_REDIS_SOCKET_TIMEOUT_S", "9")
    assert load(RedisSettings, socket_timeout_s=1.5).socket_timeout_s == 1.5


@pytest.mark.parametrize(
    ("cls", "attr", "value"),
    [
        (RedisSettings, "url", "redis://arg:2/0"),
        (KafkaSettings, "bootstrap", "arg:2"),
        (ConsulSettings, "addr", "arg:2"),
    ],
)
def test_overrides_of_aliased_fields_by_field_name(cls: type[BaseSettings], attr: str, value: str) -> None:
    assert getattr(load(cls, **{attr: value}), attr) == value


# ---- secrets -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "var", "env"),
    [
        (RedisSettings, "JOBQ_REDIS_PASSWORD", {}),
        (ConsulSettings, "CONSUL_HTTP_TOKEN", {}),
        (ConsulSettings, "JOBQ_CONSUL_TOKEN", {}),
        (
            KafkaSettings,
            "JOBQ_KAFKA_SASL_PASSWORD",
            {
                "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "JOBQ_KAFKA_SASL_MECHANISM": "PLAIN",
                "JOBQ_KAFKA_SASL_USERNAME": "u",
            },
        ),
    ],
)
def test_secrets_never_show(
    monkeypatch: pytest.MonkeyPatch, cls: type[BaseSettings], var: str, env: dict[str, str]
) -> None:
    secret = "hunter2-do-not-print"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(var, secret)
    settings = load(cls)
    for shown in (repr(settings), str(settings), str(settings.model_dump()), settings.model_dump_json()):
        assert secret not in shown


def test_a_secret_does_not_leak_into_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_PASSWORD", "hunter2-do-not-print")
    with pytest.raises(ConfigError) as info:
        load(KafkaSettings)
    assert "hunter2" not in info.value.message


def test_redis_acl_and_tls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("JOBQ_REDIS_USERNAME", "worker")
    monkeypatch.setenv("JOBQ_REDIS_PASSWORD", "pw-123")
    monkeypatch.setenv("JOBQ_REDIS_TLS", "true")
    monkeypatch.setenv("JOBQ_REDIS_TLS_CA_FILE", str(ca))
    settings = load(RedisSettings)
    kwargs = settings.client_kwargs()
    assert kwargs["username"] == "worker"
    assert kwargs["password"] == "pw-123"
    assert "ssl" not in kwargs, "TLS is the URL's scheme: ssl=True beside redis:// fails in redis-py"
    assert kwargs["ssl_ca_certs"] == str(ca)
    assert settings.client_url() == "rediss://127.0.0.1:26379/0"
    monkeypatch.setenv("JOBQ_REDIS_URL", "rediss://r:6380/0")
    assert load(RedisSettings).client_url() == "rediss://r:6380/0"


# ---- Kafka pass-through --------------------------------------------------------------------------------


def test_kafka_sasl_and_config_pass_through(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9093")
    monkeypatch.setenv("JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_USERNAME", "gate")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_PASSWORD", "kpw")
    monkeypatch.setenv("JOBQ_KAFKA_SSL_CA_LOCATION", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("JOBQ_KAFKA_CONFIG", '{"socket.keepalive.enable": "true", "client.id": "gw-1"}')
    assert load(KafkaSettings).client_config() == {
        "bootstrap.servers": "k1:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "gate",
        "sasl.password": "kpw",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
        "socket.keepalive.enable": "true",
        "client.id": "gw-1",
    }


def test_kafka_config_pass_through_has_the_last_word(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_KAFKA_BOOTSTRAP", "typed:1")
    monkeypatch.setenv("JOBQ_KAFKA_CONFIG", '{"bootstrap.servers": "raw:2"}')
    assert load(KafkaSettings).client_config()["bootstrap.servers"] == "raw:2"


def test_kafka_config_as_an_override_string() -> None:
    assert load(KafkaSettings, config='{"acks": "all"}').client_config()["acks"] == "all"


# ---- bad values ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "var", "value", "named"),
    [
        (RedisSettings, "JOBQ_REDIS_URL", "http://nope", "JOBQ_REDIS_URL"),
        (RedisSettings, "REDIS_URL", "localhost:6379", "REDIS_URL"),
        (RedisSettings, "JOBQ_REDIS_SOCKET_TIMEOUT_S", "-1", "socket_timeout_s"),
        (RedisSettings, "JOBQ_REDIS_SOCKET_TIMEOUT_S", "soon", "socket_timeout_s"),
        (RedisSettings, "JOBQ_REDIS_CLUSTER", "maybe", "cluster"),
        (KafkaSettings, "JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL", "SASL"),
        (KafkaSettings, "JOBQ_KAFKA_SECURITY_PROTOCOL", "TLS", "security_protocol"),
        (KafkaSettings, "JOBQ_KAFKA_CONFIG", '{"linger.ms": 5}', "config"),
        (KafkaSettings, "JOBQ_KAFKA_CONFIG", "[1, 2]", "config"),
        (ConsulSettings, "JOBQ_CONSUL_SCHEME", "ftp", "scheme"),
        (LogSettings, "JOBQ_LOG_LEVEL", "verbose", "level"),
        (LogSettings, "JOBQ_LOG_FORMAT", "xml", "format"),
    ],
)
def test_bad_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, cls: type[BaseSettings], var: str, value: str, named: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load(cls)
    assert named in info.value.message
    assert cls.__name__ in info.value.message
    assert info.value.code == "config_invalid"
    assert not info.value.retriable
    assert isinstance(info.value.__cause__, ValidationError)


def test_sasl_plain_needs_a_username_and_a_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_MECHANISM", "PLAIN")
    with pytest.raises(ConfigError, match="JOBQ_KAFKA_SASL_USERNAME, JOBQ_KAFKA_SASL_PASSWORD"):
        load(KafkaSettings)
    monkeypatch.setenv("JOBQ_KAFKA_SASL_USERNAME", "u")
    with pytest.raises(ConfigError, match="needs JOBQ_KAFKA_SASL_PASSWORD "):
        load(KafkaSettings)
    monkeypatch.setenv("JOBQ_KAFKA_SASL_PASSWORD", "p")
    assert load(KafkaSettings).client_config()["sasl.username"] == "u"


def test_kafka_config_that_is_not_json_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_KAFKA_CONFIG", "linger.ms=5")
    with pytest.raises(ConfigError, match="config"):
        load(KafkaSettings)


@pytest.mark.parametrize("addr", ["consul.local", "consul.local:http"])
def test_a_consul_addr_without_a_numeric_port_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, addr: str
) -> None:
    monkeypatch.setenv("CONSUL_HTTP_ADDR", addr)
    with pytest.raises(ConfigError, match=r"(?i)addr"):
        load(ConsulSettings)


# ---- the worker (JOBQ_WORKER_*) ------------------------------------------------------------------------

WORKER_REQUIRED = {"JOBQ_WORKER_APP": "myapp.jobs:registry", "JOBQ_WORKER_QUEUES": "emails, reports"}


def _worker_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for var, value in {**WORKER_REQUIRED, **env}.items():
        monkeypatch.setenv(var, value)


def test_worker_defaults_are_the_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    _worker_env(monkeypatch)
    settings = load(WorkerSettings)
    assert (settings.app, settings.queues) == ("myapp.jobs:registry", ["emails", "reports"])
    assert (settings.concurrency, settings.processes, settings.burst, settings.lease_ms) == (
        10,
        0,
        False,
        None,
    )
    assert (settings.filter, settings.metrics_port) == ({}, None)
    assert (settings.unknown_kind_retry_s, settings.unknown_kind_dead_after_s, settings.grace_s) == (
        5,
        3600,
        30,
    )


def test_worker_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    _worker_env(
        monkeypatch,
        JOBQ_WORKER_CONCURRENCY="50",
        JOBQ_WORKER_PROCESSES="4",
        JOBQ_WORKER_BURST="true",
        JOBQ_WORKER_LEASE_MS="1500",
        JOBQ_WORKER_FILTER="region=eu, tier=a=b",
        JOBQ_WORKER_UNKNOWN_KIND_RETRY_S="0.2",
        JOBQ_WORKER_UNKNOWN_KIND_DEAD_AFTER_S="60",
        JOBQ_WORKER_GRACE_S="2.5",
        JOBQ_WORKER_METRICS_PORT="29100",
    )
    settings = load(WorkerSettings)
    assert (settings.concurrency, settings.processes, settings.burst, settings.lease_ms) == (
        50,
        4,
        True,
        1500,
    )
    assert settings.filter == {"region": "eu", "tier": "a=b"}
    assert (settings.unknown_kind_retry_s, settings.unknown_kind_dead_after_s) == (0.2, 60)
    assert (settings.grace_s, settings.metrics_port) == (2.5, 29100)
    config = pool_config(settings)
    assert (config.queues, config.concurrency, config.process_workers, config.lease_ms) == (
        ["emails", "reports"],
        50,
        4,
        1500,
    )
    assert (config.unknown_kind_retry_ms, config.unknown_kind_dead_after_ms, config.grace_s) == (
        200,
        60_000,
        2.5,
    )
    assert (config.filter, config.burst) == ({"region": "eu", "tier": "a=b"}, True)


def test_worker_options_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``jobq worker`` does: the options it was given, the environment for the rest."""
    _worker_env(monkeypatch, JOBQ_WORKER_CONCURRENCY="50", JOBQ_WORKER_FILTER="region=eu")
    settings = load(WorkerSettings, queues="only", concurrency=3, filter=["tier=a", "zone=1"])
    assert (settings.app, settings.queues, settings.concurrency) == ("myapp.jobs:registry", ["only"], 3)
    assert settings.filter == {"tier": "a", "zone": "1"}


def test_a_worker_needs_an_app_and_queues() -> None:
    with pytest.raises(ConfigError) as info:
        load(WorkerSettings)
    assert "JOBQ_WORKER_APP" in info.value.message
    assert "JOBQ_WORKER_QUEUES" in info.value.message


@pytest.mark.parametrize(
    ("var", "value", "problem"),
    [
        ("JOBQ_WORKER_APP", "", "at least 1 character"),
        ("JOBQ_WORKER_APP", "myapp.jobs:", "module[:attribute]"),
        ("JOBQ_WORKER_APP", ":registry", "module[:attribute]"),
        ("JOBQ_WORKER_QUEUES", " , ", "names no queue"),
        ("JOBQ_WORKER_CONCURRENCY", "0", "greater than or equal to 1"),
        ("JOBQ_WORKER_CONCURRENCY", "many", "integer"),
        ("JOBQ_WORKER_PROCESSES", "-1", "greater than or equal to 0"),
        ("JOBQ_WORKER_BURST", "maybe", "boolean"),
        ("JOBQ_WORKER_LEASE_MS", "50", "greater than or equal to 100"),
        ("JOBQ_WORKER_FILTER", "region", "KEY=VALUE"),
        ("JOBQ_WORKER_FILTER", "region=", "KEY=VALUE"),
        ("JOBQ_WORKER_UNKNOWN_KIND_RETRY_S", "-1", "greater than or equal to 0"),
        ("JOBQ_WORKER_UNKNOWN_KIND_DEAD_AFTER_S", "soon", "number"),
        ("JOBQ_WORKER_GRACE_S", "-0.5", "greater than or equal to 0"),
        ("JOBQ_WORKER_METRICS_PORT", "70000", "less than or equal to 65535"),
    ],
)
def test_bad_worker_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, problem: str
) -> None:
    _worker_env(monkeypatch, **{var: value})
    with pytest.raises(ConfigError) as info:
        load(WorkerSettings)
    assert f"{var} (" in info.value.message
    assert problem in info.value.message
    assert info.value.code == "config_invalid"


def test_scheduler_defaults_and_which_queues_a_group_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load(SchedulerSettings)
    assert (settings.group, settings.beat_s, settings.stale_s) == ("default", 1, 3)
    assert settings.keeps("anything")
    monkeypatch.setenv("JOBQ_SCHEDULER_QUEUES", "emails.*,reports")
    narrowed = load(SchedulerSettings)
    assert [narrowed.keeps(q) for q in ("emails.eu", "reports", "reports.x")] == [True, True, False]


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"JOBQ_SCHEDULER_BEAT_S": "2", "JOBQ_SCHEDULER_STALE_S": "3"}, "at least twice"),
        ({"JOBQ_SCHEDULER_BATCH": "0"}, "JOBQ_SCHEDULER_BATCH"),
        ({"JOBQ_SCHEDULER_GROUP": ""}, "JOBQ_SCHEDULER_GROUP"),
        ({"JOBQ_SCHEDULER_METRICS_PORT": "70000"}, "JOBQ_SCHEDULER_METRICS_PORT"),
    ],
)
def test_bad_scheduler_values_name_the_problem(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], problem: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load(SchedulerSettings)
    assert problem in info.value.message
