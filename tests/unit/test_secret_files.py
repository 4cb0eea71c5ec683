"""Every credential the Helm chart hands a process comes from a mounted file (security review M9): the
``*_FILE`` variants added for it (the Redis and Kafka user names, the callback secret, the canary's token,
the older token lists of the gateway and the dashboard) read their file, refuse the value given twice, and
never show the secret in an error."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from canary.settings import CanarySettings
from jqcore.errors import ConfigError
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.servers import RedisSettings
from jqdispatch.service import Dispatcher
from jqdispatch.settings import DispatcherSettings
from jqweb.settings import WebSettings
from kafkagate.settings import GateSettings

SECRET = "s3cr3t-Never-Shown"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("JOBQ_", "CONSUL_", "REDIS_", "KAFKA_")):
            monkeypatch.delenv(name)


@pytest.fixture
def file(tmp_path: Path) -> Callable[[str], str]:
    def write(text: str) -> str:
        path = tmp_path / f"f{len(list(tmp_path.iterdir()))}"
        path.write_text(text + "\n")  # a mounted Secret's key, or `echo x > file`
        return str(path)

    return write


def _load(cls: type[BaseSettings], monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Any:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load(cls)


def test_user_names_come_from_files(monkeypatch: pytest.MonkeyPatch, file: Callable[[str], str]) -> None:
    redis = _load(
        RedisSettings,
        monkeypatch,
        {"JOBQ_REDIS_USERNAME_FILE": file("jobq-worker"), "JOBQ_REDIS_PASSWORD_FILE": file(SECRET)},
    )
    assert redis.client_kwargs()["username"] == "jobq-worker"
    assert redis.client_kwargs()["password"] == SECRET
    kafka = _load(
        KafkaSettings,
        monkeypatch,
        {
            "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "JOBQ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "JOBQ_KAFKA_SASL_USERNAME_FILE": file("jobq-relay"),
            "JOBQ_KAFKA_SASL_PASSWORD_FILE": file(SECRET),
        },
    )
    config = kafka.client_config()
    assert (config["sasl.username"], config["sasl.password"]) == ("jobq-relay", SECRET)


def test_the_callback_secret_comes_from_a_file(
    monkeypatch: pytest.MonkeyPatch, file: Callable[[str], str]
) -> None:
    env = {"JOBQ_CALLBACK_SECRET_FILE": file(SECRET)}
    assert _load(GateSettings, monkeypatch, env).callback_secret.get_secret_value() == SECRET
    dispatcher = _load(DispatcherSettings, monkeypatch, {**env, "JOBQ_DISPATCHER_QUEUES": "hooks"})
    assert dispatcher.callback_secret.get_secret_value() == SECRET
    monkeypatch.delenv("JOBQ_CALLBACK_SECRET_FILE")
    with pytest.raises(ConfigError, match="JOBQ_CALLBACK_SECRET is empty"):  # given neither way
        Dispatcher(None, load(DispatcherSettings), redis=None)  # type: ignore[arg-type]


def test_tokens_come_from_files(monkeypatch: pytest.MonkeyPatch, file: Callable[[str], str]) -> None:
    gate = _load(GateSettings, monkeypatch, {"JOBQ_GATE_TOKENS_FILE": file("a-token,b-token:read\nc-token")})
    assert [t.get_secret_value() for t in gate.tokens] == ["a-token", "b-token:read", "c-token"]
    web = _load(
        WebSettings,
        monkeypatch,
        {"JOBQ_WEB_ADMIN_TOKENS_FILE": file("ops:adm1n"), "JOBQ_WEB_READ_TOKENS_FILE": file("v:r,w:r2")},
    )
    assert [t.get_secret_value() for t in web.admin_tokens] == ["ops:adm1n"]
    assert len(web.read_tokens) == 2
    canary = _load(CanarySettings, monkeypatch, {"JOBQ_CANARY_TOKEN_FILE": file(SECRET)})
    assert canary.token.get_secret_value() == SECRET


@pytest.mark.parametrize(
    ("cls", "env", "name"),
    [
        (GateSettings, {"JOBQ_CALLBACK_SECRET": SECRET}, "JOBQ_CALLBACK_SECRET"),
        (GateSettings, {"JOBQ_GATE_TOKENS": SECRET}, "JOBQ_GATE_TOKENS"),
        (CanarySettings, {"JOBQ_CANARY_TOKEN": SECRET}, "JOBQ_CANARY_TOKEN"),
        (RedisSettings, {"JOBQ_REDIS_USERNAME": SECRET}, "JOBQ_REDIS_USERNAME"),
    ],
)
def test_a_secret_given_twice_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
    file: Callable[[str], str],
    cls: type[BaseSettings],
    env: dict[str, str],
    name: str,
) -> None:
    with pytest.raises(ConfigError, match=f"{name} and {name}_FILE are both set") as caught:
        _load(cls, monkeypatch, {**env, f"{name}_FILE": file(SECRET)})
    assert SECRET not in caught.value.message


def test_an_empty_or_missing_file_is_named(
    monkeypatch: pytest.MonkeyPatch, file: Callable[[str], str]
) -> None:
    with pytest.raises(ConfigError, match=r"JOBQ_CANARY_TOKEN_FILE: .* is empty"):
        _load(CanarySettings, monkeypatch, {"JOBQ_CANARY_TOKEN_FILE": file("")})
    with pytest.raises(ConfigError, match="JOBQ_GATE_TOKENS_FILE: cannot read /no/such/file"):
        _load(
            GateSettings,
            monkeypatch,
            {"JOBQ_GATE_TOKENS_FILE": "/no/such/file"},
        )
