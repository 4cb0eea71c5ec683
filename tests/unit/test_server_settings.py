"""The server settings (Kafka, Redis, Consul) and their one mapping to each client: librdkafka, Spark's
Kafka options, redis-py (asyncio and sync, one node and Cluster), py-consul (asyncio and sync). Every
protocol/mechanism gives exactly the keys expected; a bad combination is a settings error naming the
variable; secrets come from values or ``*_FILE``s and never show in a repr, an error or a log line."""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import consul
import pytest
import redis
import redis.connection
import structlog
from pydantic import ValidationError
from pydantic_settings import BaseSettings
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection

from jqcore import log
from jqcore.errors import ConfigError
from jqcore.settings.common import MASK, load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import LogSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqengine.redisconn import FastConnection, connect, connect_sync
from jqruntime.consulconn import close_consul, consul_client, consul_sync_client
from jqruntime.kafka import AsyncProducer
from jqspark.options import OAUTH_CALLBACK_HANDLER, jaas_config, kafka_settings, spark_kafka_options

SECRET = "s3cr3t-Never-Shown"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("JOBQ_", "CONSUL_", "REDIS_", "KAFKA_")):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate and its key (PEM texts): clients that load them at construction (the
    asyncio Consul client's SSL context) need real ones."""
    folder = tmp_path_factory.mktemp("pem")
    files = ["-keyout", str(folder / "key"), "-out", str(folder / "cert")]
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    command = ["openssl", "req", "-x509", *new_key, *files, "-days", "1", "-subj", "/CN=jobq"]
    subprocess.run(command, check=True, capture_output=True)
    return (folder / "cert").read_text(), (folder / "key").read_text()


@pytest.fixture
def pem(tmp_path: Path, pems: tuple[str, str]) -> Callable[[str], str]:
    """``pem("ca")``: the path of a PEM file named so (the key for names ending in "key", else the
    certificate)."""

    def make(name: str) -> str:
        path = tmp_path / f"{name}.pem"
        path.write_text(pems[1] if name.endswith("key") else pems[0])
        return str(path)

    return make


def _paths(value: Any, pem: Callable[[str], str]) -> Any:
    """``<name>`` in a text becomes the path of a PEM file ``name``, ``<text:name>`` its content."""
    if not isinstance(value, str):
        return value
    value = re.sub(r"<text:(\w+)>", lambda m: Path(pem(m.group(1))).read_text(), value)
    return re.sub(r"<(\w+)>", lambda m: pem(m.group(1)), value)


def _env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], pem: Callable[[str], str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, _paths(value, pem))


def _files(expected: dict[str, Any], pem: Callable[[str], str]) -> dict[str, Any]:
    return {k: _paths(v, pem) for k, v in expected.items()}


# ---- Kafka: librdkafka and Spark ---------------------------------------------------------------------

SCRAM = {
    "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "JOBQ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "JOBQ_KAFKA_SASL_USERNAME": "relay",
    "JOBQ_KAFKA_SASL_PASSWORD": SECRET,
    "JOBQ_KAFKA_SSL_CA_LOCATION": "<ca>",
}
OIDC = {
    "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "JOBQ_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
    "JOBQ_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": "https://idp/token",
    "JOBQ_KAFKA_SASL_OAUTHBEARER_CLIENT_ID": "jobq-relay",
    "JOBQ_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET": SECRET,
    "JOBQ_KAFKA_SASL_OAUTHBEARER_SCOPE": "kafka",
}
GSSAPI = {
    "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "JOBQ_KAFKA_SASL_MECHANISM": "GSSAPI",
    "JOBQ_KAFKA_SASL_KERBEROS_SERVICE_NAME": "kafka",
    "JOBQ_KAFKA_SASL_KERBEROS_PRINCIPAL": "jobq/host@REALM",
    "JOBQ_KAFKA_SASL_KERBEROS_KEYTAB": "<keytab>",
}
MTLS = {
    "JOBQ_KAFKA_SECURITY_PROTOCOL": "SSL",
    "JOBQ_KAFKA_SSL_CA_LOCATION": "<ca>",
    "JOBQ_KAFKA_SSL_CERTIFICATE_LOCATION": "<cert>",
    "JOBQ_KAFKA_SSL_KEY_LOCATION": "<key>",
    "JOBQ_KAFKA_SSL_KEY_PASSWORD": SECRET,
}
B = {"bootstrap.servers": "127.0.0.1:29092"}
SB = {"kafka.bootstrap.servers": "127.0.0.1:29092"}
SCRAM_JAAS = (
    f'org.apache.kafka.common.security.scram.ScramLoginModule required username="relay" password="{SECRET}";'
)

KAFKA_CASES: list[tuple[str, dict[str, str], dict[str, Any], dict[str, Any]]] = [
    (
        "plaintext",
        {},
        {**B, "security.protocol": "PLAINTEXT"},
        {**SB, "kafka.security.protocol": "PLAINTEXT"},
    ),
    (
        "ssl-ca",
        {"JOBQ_KAFKA_SECURITY_PROTOCOL": "SSL", "JOBQ_KAFKA_SSL_CA_LOCATION": "<ca>"},
        {**B, "security.protocol": "SSL", "ssl.ca.location": "<ca>"},
        {
            **SB,
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "<ca>",
        },
    ),
    (
        "mtls",
        MTLS,
        {
            **B,
            "security.protocol": "SSL",
            "ssl.ca.location": "<ca>",
            "ssl.certificate.location": "<cert>",
            "ssl.key.location": "<key>",
            "ssl.key.password": SECRET,
        },
        {
            **SB,
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "<ca>",
            "kafka.ssl.keystore.type": "PEM",
            "kafka.ssl.keystore.certificate.chain": "<text:cert>",
            "kafka.ssl.keystore.key": "<text:key>",
            "kafka.ssl.key.password": SECRET,
        },
    ),
    (
        "plain",
        {
            "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "JOBQ_KAFKA_SASL_MECHANISM": "PLAIN",
            "JOBQ_KAFKA_SASL_USERNAME": "gate",
            "JOBQ_KAFKA_SASL_PASSWORD": 'p"w\\x',
        },
        {
            **B,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "gate",
            "sasl.password": 'p"w\\x',
        },
        {
            **SB,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="gate" password="p\\"w\\\\x";',
        },
    ),
    (
        "scram-sha-512",
        SCRAM,
        {
            **B,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "relay",
            "sasl.password": SECRET,
            "ssl.ca.location": "<ca>",
        },
        {
            **SB,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": SCRAM_JAAS,
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "<ca>",
        },
    ),
    (
        "scram-sha-256-blank-ca-is-unset",
        {**SCRAM, "JOBQ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "JOBQ_KAFKA_SSL_CA_LOCATION": ""},
        {
            **B,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "relay",
            "sasl.password": SECRET,
        },
        {
            **SB,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": SCRAM_JAAS,
        },
    ),
    (
        "oauthbearer-oidc",
        OIDC,
        {
            **B,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            "sasl.oauthbearer.client.id": "jobq-relay",
            "sasl.oauthbearer.client.secret": SECRET,
            "sasl.oauthbearer.scope": "kafka",
        },
        {
            **SB,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.login.callback.handler.class": OAUTH_CALLBACK_HANDLER,
            "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
            f'required clientId="jobq-relay" clientSecret="{SECRET}" scope="kafka";',
        },
    ),
    (
        "gssapi-keytab",
        GSSAPI,
        {
            **B,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "sasl.kerberos.principal": "jobq/host@REALM",
            "sasl.kerberos.keytab": "<keytab>",
        },
        {
            **SB,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "GSSAPI",
            "kafka.sasl.kerberos.service.name": "kafka",
            "kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
            'storeKey=true keyTab="<keytab>" principal="jobq/host@REALM";',
        },
    ),
    (
        "gssapi-ticket-cache",
        {k: v for k, v in GSSAPI.items() if "PRINCIPAL" not in k and "KEYTAB" not in k},
        {
            **B,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
        },
        {
            **SB,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "GSSAPI",
            "kafka.sasl.kerberos.service.name": "kafka",
            "kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required "
            "useTicketCache=true;",
        },
    ),
    (
        "sasl-from-config",
        {
            "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "JOBQ_KAFKA_CONFIG": '{"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "relay", '
            f'"sasl.password": "{SECRET}", "ssl.endpoint.identification.algorithm": "none"}}',
        },
        {
            **B,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "relay",
            "sasl.password": SECRET,
            "ssl.endpoint.identification.algorithm": "none",
        },
        {
            **SB,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": SCRAM_JAAS,
        },
    ),
]


@pytest.mark.parametrize(
    ("env", "librdkafka", "spark"), [c[1:] for c in KAFKA_CASES], ids=[c[0] for c in KAFKA_CASES]
)
def test_kafka_maps_to_librdkafka_and_spark(
    monkeypatch: pytest.MonkeyPatch,
    pem: Callable[[str], str],
    env: dict[str, str],
    librdkafka: dict[str, Any],
    spark: dict[str, Any],
) -> None:
    _env(monkeypatch, env, pem)
    settings = load(KafkaSettings)
    assert settings.client_config() == _files(librdkafka, pem)
    assert spark_kafka_options(settings) == _files(spark, pem)


def test_spark_takes_one_pem_holding_key_and_chain_by_its_path(
    monkeypatch: pytest.MonkeyPatch, pem: Callable[[str], str]
) -> None:
    both = pem("client")
    _env(monkeypatch, {**MTLS, "JOBQ_KAFKA_SSL_KEY_PASSWORD": ""}, pem)
    monkeypatch.delenv("JOBQ_KAFKA_SSL_KEY_PASSWORD")
    monkeypatch.setenv("JOBQ_KAFKA_SSL_CERTIFICATE_LOCATION", both)
    monkeypatch.setenv("JOBQ_KAFKA_SSL_KEY_LOCATION", both)
    options = spark_kafka_options(load(KafkaSettings))
    assert options["kafka.ssl.keystore.location"] == both
    assert "kafka.ssl.keystore.key" not in options


def test_spark_with_only_a_bootstrap_string_is_plaintext(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")  # not read for a bare bootstrap list
    settings = kafka_settings("k1:9092,k2:9092")
    assert settings is not None
    assert spark_kafka_options(settings) == {
        "kafka.bootstrap.servers": "k1:9092,k2:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }
    assert kafka_settings(None) is None


def test_spark_needs_oidc_for_oauthbearer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_MECHANISM", "OAUTHBEARER")
    monkeypatch.setenv("JOBQ_KAFKA_CONFIG", '{"sasl.oauthbearer.config": "principal=dev"}')
    monkeypatch.setenv("JOBQ_KAFKA_CONFIG", '{"sasl.oauthbearer.method": "default"}')
    settings = load(KafkaSettings)  # librdkafka's unsecured tokens: fine for librdkafka
    assert settings.client_config()["sasl.oauthbearer.method"] == "default"
    with pytest.raises(ConfigError, match="OIDC"):
        spark_kafka_options(settings)


def test_jaas_values_are_quoted_and_escaped() -> None:
    assert jaas_config("M", a='x"y', b="c\\d", c=None, d=True) == 'M required a="x\\"y" b="c\\\\d" d=true;'


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "JOBQ_KAFKA_SASL_MECHANISM (PLAIN, SCRAM-SHA-256"),
        (
            {"JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "JOBQ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"},
            "SCRAM-SHA-256 needs JOBQ_KAFKA_SASL_USERNAME, JOBQ_KAFKA_SASL_PASSWORD",
        ),
        (
            {"JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "JOBQ_KAFKA_SASL_MECHANISM": "OAUTHBEARER"},
            "OAUTHBEARER needs JOBQ_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL, "
            "JOBQ_KAFKA_SASL_OAUTHBEARER_CLIENT_ID, JOBQ_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET",
        ),
        (
            {**OIDC, "JOBQ_KAFKA_SASL_OAUTHBEARER_CLIENT_ID": ""},
            "OAUTHBEARER needs JOBQ_KAFKA_SASL_OAUTHBEARER_CLIENT_ID",
        ),
        (
            {"JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "JOBQ_KAFKA_SASL_MECHANISM": "GSSAPI"},
            "GSSAPI needs JOBQ_KAFKA_SASL_KERBEROS_SERVICE_NAME",
        ),
        ({**OIDC, "JOBQ_KAFKA_SASL_USERNAME": "u"}, "JOBQ_KAFKA_SASL_USERNAME is not used by SASL mechanism"),
        ({**SCRAM, "JOBQ_KAFKA_SASL_KERBEROS_SERVICE_NAME": "kafka"}, "KERBEROS_SERVICE_NAME is not used"),
        (
            {"JOBQ_KAFKA_SASL_MECHANISM": "PLAIN"},
            "JOBQ_KAFKA_SASL_MECHANISM needs JOBQ_KAFKA_SECURITY_PROTOCOL SASL_PLAINTEXT or SASL_SSL",
        ),
        ({"JOBQ_KAFKA_SASL_USERNAME": "u"}, "(it is PLAINTEXT)"),
        (
            {"JOBQ_KAFKA_SSL_CA_LOCATION": "<ca>"},
            "JOBQ_KAFKA_SSL_CA_LOCATION needs JOBQ_KAFKA_SECURITY_PROTOCOL SSL or SASL_SSL",
        ),
        ({**SCRAM, "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "(it is SASL_PLAINTEXT)"),
        ({**SCRAM, "JOBQ_KAFKA_SASL_MECHANISM": "SCRAM"}, "sasl_mechanism"),
        ({**MTLS, "JOBQ_KAFKA_SSL_CERTIFICATE_LOCATION": ""}, "needs JOBQ_KAFKA_SSL_CERTIFICATE_LOCATION"),
        (
            {"JOBQ_KAFKA_SECURITY_PROTOCOL": "SSL", "JOBQ_KAFKA_SSL_CA_LOCATION": "/no/such/ca.pem"},
            "JOBQ_KAFKA_SSL_CA_LOCATION: /no/such/ca.pem does not exist",
        ),
    ],
)
def test_kafka_validation_names_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, pem: Callable[[str], str], env: dict[str, str], problem: str
) -> None:
    _env(monkeypatch, {k: v for k, v in env.items() if v}, pem)
    with pytest.raises(ConfigError) as info:
        load(KafkaSettings)
    assert problem in info.value.message
    assert SECRET not in info.value.message
    assert "Traceback" not in info.value.message


def test_oauthbearer_credentials_may_come_from_the_config_pass_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBQ_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("JOBQ_KAFKA_SASL_MECHANISM", "OAUTHBEARER")
    monkeypatch.setenv(
        "JOBQ_KAFKA_CONFIG",
        '{"sasl.oauthbearer.token.endpoint.url": "https://idp/t", "sasl.oauthbearer.client.id": "c", '
        f'"sasl.oauthbearer.client.secret": "{SECRET}"}}',
    )
    settings = load(KafkaSettings)
    assert settings.client_config()["sasl.oauthbearer.client.secret"] == SECRET
    assert SECRET not in repr(settings)
    assert f'clientSecret="{SECRET}"' in spark_kafka_options(settings)["kafka.sasl.jaas.config"]


# ---- Redis: redis-py ----------------------------------------------------------------------------------

REDIS_CASES: list[tuple[str, dict[str, str], str, dict[str, Any], type, type]] = [
    ("plain", {}, "redis://127.0.0.1:26379/0", {}, FastConnection, redis.connection.Connection),
    (
        "rediss",
        {"JOBQ_REDIS_URL": "rediss://r:6380/1"},
        "rediss://r:6380/1",
        {},
        SSLConnection,
        redis.connection.SSLConnection,
    ),
    (
        "tls-flag-with-redis-url",
        {"JOBQ_REDIS_URL": "redis://r:6380/0", "JOBQ_REDIS_TLS": "true", "JOBQ_REDIS_TLS_CA_FILE": "<ca>"},
        "rediss://r:6380/0",
        {"ssl_ca_certs": "<ca>"},
        SSLConnection,
        redis.connection.SSLConnection,
    ),
    (
        "mtls-acl",
        {
            "JOBQ_REDIS_URL": "rediss://r:6380/0",
            "JOBQ_REDIS_TLS_CA_FILE": "<ca>",
            "JOBQ_REDIS_TLS_CERT_FILE": "<cert>",
            "JOBQ_REDIS_TLS_KEY_FILE": "<key>",
            "JOBQ_REDIS_USERNAME": "worker",
            "JOBQ_REDIS_PASSWORD": SECRET,
        },
        "rediss://r:6380/0",
        {
            "ssl_ca_certs": "<ca>",
            "ssl_certfile": "<cert>",
            "ssl_keyfile": "<key>",
            "username": "worker",
            "password": SECRET,
        },
        SSLConnection,
        redis.connection.SSLConnection,
    ),
    (
        "credentials-in-the-url",
        {"JOBQ_REDIS_URL": "redis://worker:p%40ss@r:6379/2"},
        "redis://r:6379/2",
        {"username": "worker", "password": "p@ss"},
        FastConnection,
        redis.connection.Connection,
    ),
    (
        "unix",
        {"JOBQ_REDIS_URL": "unix:///run/redis.sock"},
        "unix:///run/redis.sock",
        {},
        UnixDomainSocketConnection,
        redis.connection.UnixDomainSocketConnection,
    ),
]


@pytest.mark.parametrize(
    ("env", "url", "kwargs", "connection", "sync_connection"),
    [c[1:] for c in REDIS_CASES],
    ids=[c[0] for c in REDIS_CASES],
)
async def test_redis_maps_to_redis_py(
    monkeypatch: pytest.MonkeyPatch,
    pem: Callable[[str], str],
    env: dict[str, str],
    url: str,
    kwargs: dict[str, Any],
    connection: type,
    sync_connection: type,
) -> None:
    _env(monkeypatch, env, pem)
    settings = load(RedisSettings)
    expected = {"socket_timeout": 35.0, "socket_connect_timeout": 5.0, **_files(kwargs, pem)}
    assert settings.client_url() == url
    assert settings.client_kwargs() == expected
    client = connect(settings)  # asyncio, one node: its own connection classes
    pool = client.connection_pool  # type: ignore[union-attr]
    assert issubclass(pool.connection_class, connection)
    conn = pool.make_connection()  # where `ssl=True` beside redis:// used to raise TypeError
    for key, value in expected.items():
        assert pool.connection_kwargs[key] == value
    assert conn.socket_timeout == 35.0
    await client.aclose()
    sync = connect_sync(settings)  # sync, one node: redis-py's own classes
    assert isinstance(sync, redis.Redis)
    assert sync.connection_pool.connection_class is sync_connection
    sync.connection_pool.make_connection()
    for key, value in expected.items():
        assert sync.connection_pool.connection_kwargs[key] == value
    sync.close()


async def test_a_tls_cluster_client_gets_tls_and_the_files(
    monkeypatch: pytest.MonkeyPatch, pem: Callable[[str], str]
) -> None:
    _env(
        monkeypatch,
        {
            "JOBQ_REDIS_URL": "redis://127.0.0.1:7001",
            "JOBQ_REDIS_CLUSTER": "true",
            "JOBQ_REDIS_TLS": "true",
            "JOBQ_REDIS_TLS_CA_FILE": "<ca>",
            "JOBQ_REDIS_PASSWORD": SECRET,
        },
        pem,
    )
    client = connect(load(RedisSettings))  # asyncio Cluster: connects lazily
    node = client.startup_nodes[0]  # type: ignore[union-attr]
    assert issubclass(node.connection_class, SSLConnection)
    assert node.connection_class.send_packed_command is FastConnection.send_packed_command
    assert node.connection_kwargs["ssl_ca_certs"] == pem("ca")
    assert node.connection_kwargs["password"] == SECRET
    node.connection_class(**node.connection_kwargs)
    await client.aclose()


def test_a_plain_cluster_client_is_plain() -> None:
    client = connect(load(RedisSettings, url="redis://127.0.0.1:7001", cluster=True))
    node = client.startup_nodes[0]  # type: ignore[union-attr]
    assert node.connection_class is FastConnection


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"JOBQ_REDIS_TLS_CA_FILE": "<ca>"}, "JOBQ_REDIS_TLS_CA_FILE needs TLS: set JOBQ_REDIS_TLS=true"),
        ({"JOBQ_REDIS_URL": "unix:///s.sock", "JOBQ_REDIS_TLS": "true"}, "not unix://"),
        ({"JOBQ_REDIS_TLS": "true", "JOBQ_REDIS_TLS_KEY_FILE": "<key>"}, "needs JOBQ_REDIS_TLS_CERT_FILE"),
        ({"JOBQ_REDIS_TLS": "true", "JOBQ_REDIS_TLS_CA_FILE": "/no/ca.pem"}, "/no/ca.pem does not exist"),
        (
            {"JOBQ_REDIS_URL": f"redis://:{SECRET}@r:1/0", "JOBQ_REDIS_PASSWORD": SECRET},
            "give it once",
        ),
        ({"JOBQ_REDIS_URL": f"redis://r:1/0?password={SECRET}"}, "set JOBQ_REDIS_PASSWORD instead"),
        ({"JOBQ_REDIS_URL": "redis://a:x@r:1/0", "JOBQ_REDIS_USERNAME": "b"}, "another user"),
    ],
)
def test_redis_validation_names_the_problem(
    monkeypatch: pytest.MonkeyPatch, pem: Callable[[str], str], env: dict[str, str], problem: str
) -> None:
    _env(monkeypatch, env, pem)
    with pytest.raises(ConfigError) as info:
        load(RedisSettings)
    assert problem in info.value.message
    assert SECRET not in info.value.message


def test_a_password_in_the_redis_url_never_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", f"rediss://default:{SECRET}@r:6380/0")
    settings = load(RedisSettings)
    assert settings.url == "rediss://r:6380/0"
    assert (settings.username, settings.password and settings.password.get_secret_value()) == (
        "default",
        SECRET,
    )
    assert SECRET not in repr(settings)


# ---- Consul: py-consul --------------------------------------------------------------------------------

CONSUL_CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    (
        "http",
        {},
        {"host": "127.0.0.1", "port": 28500, "scheme": "http", "verify": True, "cert": None, "token": None},
    ),
    (
        "https-from-the-address",
        {"CONSUL_HTTP_ADDR": "https://consul:8501", "CONSUL_HTTP_TOKEN": SECRET},
        {"host": "consul", "port": 8501, "scheme": "https", "verify": True, "cert": None, "token": SECRET},
    ),
    (
        "https-scheme-ca",
        {"JOBQ_CONSUL_ADDR": "consul:8501", "JOBQ_CONSUL_SCHEME": "https", "JOBQ_CONSUL_CA_FILE": "<ca>"},
        {"host": "consul", "port": 8501, "scheme": "https", "verify": "<ca>", "cert": None, "token": None},
    ),
    (
        "mtls",
        {
            "JOBQ_CONSUL_ADDR": "https://consul:8501",
            "CONSUL_CACERT": "<ca>",
            "JOBQ_CONSUL_CERT_FILE": "<cert>",
            "CONSUL_CLIENT_KEY": "<key>",
            "JOBQ_CONSUL_TOKEN": SECRET,
        },
        {
            "host": "consul",
            "port": 8501,
            "scheme": "https",
            "verify": "<ca>",
            "cert": ("<cert>", "<key>"),
            "token": SECRET,
        },
    ),
    (
        "no-verify",
        {"JOBQ_CONSUL_ADDR": "https://consul:8501", "JOBQ_CONSUL_VERIFY": "false"},
        {"host": "consul", "port": 8501, "scheme": "https", "verify": False, "cert": None, "token": None},
    ),
]


@pytest.mark.parametrize(("env", "kwargs"), [c[1:] for c in CONSUL_CASES], ids=[c[0] for c in CONSUL_CASES])
async def test_consul_maps_to_py_consul(
    monkeypatch: pytest.MonkeyPatch, pem: Callable[[str], str], env: dict[str, str], kwargs: dict[str, Any]
) -> None:
    _env(monkeypatch, env, pem)
    settings = load(ConsulSettings)
    expected = _files(kwargs, pem)
    if isinstance(kwargs["cert"], tuple):
        expected["cert"] = tuple(_paths(p, pem) for p in kwargs["cert"])
    assert settings.client_kwargs() == expected
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "the-environment's")  # py-consul would prefer it: we do not
    for client in (consul_client(settings), consul_sync_client(settings)):
        assert client.http.base_uri == f"{expected['scheme']}://{expected['host']}:{expected['port']}"
        assert (client.http.verify, client.http.cert, client.token) == (
            expected["verify"],
            expected["cert"],
            expected["token"],
        )
        if isinstance(client, consul.aio.Consul):
            await close_consul(client)


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        (
            {"JOBQ_CONSUL_ADDR": "https://c:8501", "JOBQ_CONSUL_SCHEME": "http"},
            "is https:// but JOBQ_CONSUL_SCHEME",
        ),
        ({"JOBQ_CONSUL_ADDR": "ftp://c:8501"}, "http:// or https://"),
        ({"JOBQ_CONSUL_CA_FILE": "<ca>"}, "JOBQ_CONSUL_CA_FILE needs https"),
        (
            {"JOBQ_CONSUL_ADDR": "https://c:1", "JOBQ_CONSUL_CA_FILE": "<ca>", "JOBQ_CONSUL_VERIFY": "false"},
            "JOBQ_CONSUL_VERIFY is false",
        ),
        ({"JOBQ_CONSUL_ADDR": "https://c:1", "JOBQ_CONSUL_KEY_FILE": "<key>"}, "needs JOBQ_CONSUL_CERT_FILE"),
        ({"JOBQ_CONSUL_ADDR": "https://c:1", "JOBQ_CONSUL_CA_FILE": "/no/ca"}, "/no/ca does not exist"),
    ],
)
def test_consul_validation_names_the_problem(
    monkeypatch: pytest.MonkeyPatch, pem: Callable[[str], str], env: dict[str, str], problem: str
) -> None:
    _env(monkeypatch, env, pem)
    with pytest.raises(ConfigError) as info:
        load(ConsulSettings)
    assert problem in info.value.message


# ---- secrets: *_FILE, never shown ---------------------------------------------------------------------

SECRET_FIELDS: list[tuple[type[BaseSettings], str, str, dict[str, str]]] = [
    (RedisSettings, "JOBQ_REDIS_PASSWORD", "password", {}),
    (ConsulSettings, "JOBQ_CONSUL_TOKEN", "token", {}),
    (ConsulSettings, "CONSUL_HTTP_TOKEN", "token", {}),
    (
        KafkaSettings,
        "JOBQ_KAFKA_SASL_PASSWORD",
        "sasl_password",
        {k: v for k, v in SCRAM.items() if "PASSWORD" not in k},
    ),
    (
        KafkaSettings,
        "JOBQ_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET",
        "sasl_oauthbearer_client_secret",
        {k: v for k, v in OIDC.items() if "SECRET" not in k},
    ),
    (
        KafkaSettings,
        "JOBQ_KAFKA_SSL_KEY_PASSWORD",
        "ssl_key_password",
        {k: v for k, v in MTLS.items() if "PASSWORD" not in k},
    ),
]
SECRET_IDS = [f[1] for f in SECRET_FIELDS]


@pytest.mark.parametrize(("cls", "var", "field", "env"), SECRET_FIELDS, ids=SECRET_IDS)
def test_a_secret_comes_from_its_file(
    monkeypatch: pytest.MonkeyPatch,
    pem: Callable[[str], str],
    tmp_path: Path,
    cls: type[BaseSettings],
    var: str,
    field: str,
    env: dict[str, str],
) -> None:
    _env(monkeypatch, env, pem)
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\r\n")  # as `echo` or a Windows editor leaves it
    monkeypatch.setenv(f"{var}_FILE", str(secret_file))
    settings = load(cls)
    assert getattr(settings, field).get_secret_value() == SECRET
    for shown in (repr(settings), str(settings), str(settings.model_dump()), settings.model_dump_json()):
        assert SECRET not in shown


@pytest.mark.parametrize(("cls", "var", "field", "env"), SECRET_FIELDS, ids=SECRET_IDS)
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read {path} (No such file or directory)"),
        ("\n", "{path} is empty"),
        (b"\xff\xfe", "{path} is not UTF-8 text"),
    ],
)
def test_a_bad_secret_file_is_a_settings_error(
    monkeypatch: pytest.MonkeyPatch,
    pem: Callable[[str], str],
    tmp_path: Path,
    cls: type[BaseSettings],
    var: str,
    field: str,
    env: dict[str, str],
    content: str | bytes | None,
    problem: str,
) -> None:
    _env(monkeypatch, env, pem)
    path = tmp_path / "secret"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    monkeypatch.setenv(f"{var}_FILE", str(path))
    with pytest.raises(ConfigError) as info:
        load(cls)
    assert (
        f"{var.replace('CONSUL_HTTP_', 'JOBQ_CONSUL_')}_FILE: {problem.format(path=path)}"
        in info.value.message
    )


@pytest.mark.parametrize(("cls", "var", "field", "env"), SECRET_FIELDS, ids=SECRET_IDS)
def test_a_secret_given_twice_is_refused(
    monkeypatch: pytest.MonkeyPatch,
    pem: Callable[[str], str],
    tmp_path: Path,
    cls: type[BaseSettings],
    var: str,
    field: str,
    env: dict[str, str],
) -> None:
    _env(monkeypatch, env, pem)
    (tmp_path / "secret").write_text("other")
    monkeypatch.setenv(var, SECRET)
    monkeypatch.setenv(f"{var}_FILE", str(tmp_path / "secret"))
    with pytest.raises(ConfigError, match="are both set: give the secret once") as info:
        load(cls)
    assert SECRET not in info.value.message


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (RedisSettings, {"password": SECRET, "socket_timeout_s": -1}),
        (RedisSettings, {"url": f"redis://u:{SECRET}@h:1/0", "tls_cert_file": "/x"}),
        (KafkaSettings, {"sasl_password": SECRET, "security_protocol": "SASL_SSL"}),
        (KafkaSettings, {"sasl_oauthbearer_client_secret": SECRET, "security_protocol": "TLS"}),
        (KafkaSettings, {"config": f'{{"sasl.password": "{SECRET}"}}', "security_protocol": "SASL_SSL"}),
        (ConsulSettings, {"token": SECRET, "addr": "nope"}),
        (ConsulSettings, {"token": SECRET, "ca_file": "/x"}),
    ],
)
def test_validation_errors_never_show_a_secret(cls: type[BaseSettings], kwargs: dict[str, Any]) -> None:
    """Neither through ``load`` (a ConfigError) nor as pydantic's own ValidationError (whose text would
    show the input without ``hide_input_in_errors``)."""
    with pytest.raises(ValidationError) as raw:
        cls(**kwargs)
    assert SECRET not in str(raw.value)
    assert SECRET not in repr(raw.value)
    assert SECRET not in repr(raw.value.errors(include_input=False))
    with pytest.raises(ConfigError) as info:
        load(cls, **kwargs)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    "mapping",
    [
        lambda: load(
            KafkaSettings, **{k.removeprefix("JOBQ_KAFKA_").lower(): v for k, v in OIDC.items()}
        ).client_config(),
        lambda: spark_kafka_options(
            load(KafkaSettings, **{k.removeprefix("JOBQ_KAFKA_").lower(): v for k, v in OIDC.items()})
        ),
        lambda: load(RedisSettings, password=SECRET).client_kwargs(),
        lambda: load(ConsulSettings, token=SECRET).client_kwargs(),
        lambda: load(
            KafkaSettings, config=f'{{"ssl.key.pem": "{SECRET}", "sasl.oauthbearer.config": "{SECRET}"}}'
        ).client_config(),
    ],
    ids=["librdkafka", "spark", "redis-py", "py-consul", "librdkafka-pass-through"],
)
def test_a_mapping_shows_no_secret(mapping: Callable[[], dict[str, Any]]) -> None:
    config = mapping()
    assert SECRET in "".join(str(v) for v in config.values()), "the client itself gets the secret"
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert f"{config!r}".count(MASK) >= 1


async def test_building_clients_logs_no_secret(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Every client built from secured settings, with logging at debug in JSON: nothing jobq, librdkafka
    (its own stderr lines: the broker is unreachable) or py-consul writes holds a secret."""
    saved = structlog.get_config()
    log.configure(LogSettings(level="debug", format="json"))
    caplog.set_level(logging.DEBUG)
    kafka = load(
        KafkaSettings,
        bootstrap="127.0.0.1:9",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="gate",
        sasl_password=SECRET,
    )
    producer = AsyncProducer(kafka, delivery_timeout_ms=1000)
    producer.close(0.5)
    redis = connect(load(RedisSettings, url=f"redis://worker:{SECRET}@127.0.0.1:9/0"))
    await redis.aclose()
    consul_settings = load(ConsulSettings, addr="https://127.0.0.1:9", token=SECRET)
    await close_consul(consul_client(consul_settings))
    consul_sync_client(consul_settings)
    log.get_logger("test").info("clients built", kafka=kafka, redis=redis, consul=consul_settings)
    out, err = capfd.readouterr()
    structlog.configure(**saved)
    assert "clients built" in out + err
    assert SECRET not in out + err + caplog.text
