"""Settings: env names (JOBQ_ and the ecosystems' standard ones), secrets, clear errors."""

from __future__ import annotations

import pytest

from jqcore.errors import ConfigError
from jqcore.settings import (
    DEFAULT_CONSUL_ADDR,
    DEFAULT_KAFKA_BOOTSTRAP,
    DEFAULT_REDIS_URL,
    ConsulSettings,
    KafkaSettings,
    RedisSettings,
    load,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("JOBQ_", "CONSUL_", "REDIS_", "KAFKA_")):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    assert load(RedisSettings).url == DEFAULT_REDIS_URL
    assert load(KafkaSettings).bootstrap == DEFAULT_KAFKA_BOOTSTRAP
    assert load(ConsulSettings).addr == DEFAULT_CONSUL_ADDR


def test_standard_names_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUL_HTTP_ADDR", "10.1.2.3:8501")
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "s3cret-token")
    monkeypatch.setenv("REDIS_URL", "redis://r:6380/2")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    consul = load(ConsulSettings)
    assert (consul.host, consul.port) == ("10.1.2.3", 8501)
    assert consul.token is not None
    assert consul.token.get_secret_value() == "s3cret-token"
    assert "s3cret-token" not in repr(consul)
    assert load(RedisSettings).url == "redis://r:6380/2"
    assert load(KafkaSettings).client_config()["bootstrap.servers"] == "k1:9092,k2:9092"


def test_jobq_names_win_over_standard_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://standard:1/0")
    monkeypatch.setenv("JOBQ_REDIS_URL", "redis://jobq:2/0")
    assert load(RedisSettings).url == "redis://jobq:2/0"


def test_redis_acl_and_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_REDIS_USERNAME", "worker")
    monkeypatch.setenv("JOBQ_REDIS_PASSWORD", "pw-123")
    monkeypatch.setenv("JOBQ_REDIS_TLS", "true")
    settings = load(RedisSettings)
    kwargs = settings.client_kwargs()
    assert kwargs["username"] == "worker"
    assert kwargs["password"] == "pw-123"
    assert kwargs["ssl"] is True
    assert "pw-123" not in repr(settings)
    assert "pw-123" not in str(settings.model_dump())


def test_kafka_sasl_and_passthrough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_USERNAME", "gate")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_PASSWORD", "kpw")
    monkeypatch.setenv("JOBQ_KAFKA_CONFIG", '{"socket.keepalive.enable": "true"}')
    conf = load(KafkaSettings).client_config()
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.password"] == "kpw"
    assert conf["socket.keepalive.enable"] == "true"


@pytest.mark.parametrize(
    ("cls", "var", "value", "named"),
    [
        (RedisSettings, "JOBQ_REDIS_URL", "http://nope", "JOBQ_REDIS_URL"),
        (RedisSettings, "JOBQ_REDIS_SOCKET_TIMEOUT_S", "-1", "socket_timeout_s"),
        (KafkaSettings, "JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL", "SASL"),
        (KafkaSettings, "JOBQ_KAFKA_SECURITY_PROTOCOL", "TLS", "security_protocol"),
    ],
)
def test_bad_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, cls: type, var: str, value: str, named: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load(cls)
    assert named in info.value.message
    assert info.value.code == "config_invalid"
