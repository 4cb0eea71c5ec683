"""Typed settings, read from the environment once at start-up.

Every service builds one settings object from these parts. Names follow ``JOBQ_<SECTION>_<FIELD>``;
the standard names of the ecosystems are honoured as well (``CONSUL_HTTP_ADDR``, ``CONSUL_HTTP_TOKEN``,
``REDIS_URL``, ``KAFKA_BOOTSTRAP_SERVERS``). Secrets are :class:`pydantic.SecretStr`: they never appear in
``repr``, logs or ``jobq stack env``. Cross-field checks run at construction, so a bad combination stops
the service at start-up with a :class:`~jqcore.errors.ConfigError` naming the setting.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import orjson
from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from jqcore.errors import ConfigError
from jqstack.paths import stack_dir

__all__ = [
    "DEFAULT_CONSUL_ADDR",
    "DEFAULT_KAFKA_BOOTSTRAP",
    "DEFAULT_REDIS_URL",
    "MASK",
    "ClientConfig",
    "CommaList",
    "CommaSecrets",
    "ConsulSettings",
    "CronSettings",
    "EventSettings",
    "FarSettings",
    "HistorySettings",
    "JsonText",
    "KafkaSettings",
    "LogSettings",
    "MetricsSettings",
    "RedisSettings",
    "RelayKeys",
    "SaslMechanism",
    "TraceSettings",
    "is_secret_key",
    "librdkafka_key",
    "load",
    "load_env",
]

_S = TypeVar("_S", bound=BaseSettings)


def _comma_split(v: object) -> object:
    if isinstance(v, str):
        return [t.strip() for t in v.split(",") if t.strip()]
    return v


CommaList = Annotated[list[str], NoDecode, BeforeValidator(_comma_split)]
"""A list setting written ``a,b,c`` in the environment (a Python list is accepted too)."""
CommaSecrets = Annotated[list[SecretStr], NoDecode, BeforeValidator(_comma_split)]
"""The same for secrets (never shown in ``repr`` or logs)."""


def _json_text(v: object) -> object:
    if isinstance(v, str | bytes):
        return orjson.loads(v)
    return v


JsonText = BeforeValidator(_json_text)
"""Marks a structured setting (``Annotated[dict[str, str], JsonText]``) that may arrive as JSON text
(a constructor argument, a compose file) as well as already parsed."""

DEFAULT_REDIS_URL = "redis://127.0.0.1:26379/0"
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:29092"
DEFAULT_CONSUL_ADDR = "127.0.0.1:28500"

MASK = "**********"
"""What a secret looks like wherever it is shown (pydantic's own mask for ``SecretStr``)."""

_SECRET_KEY = re.compile(
    r"(?i)password|secret|token|jaas|credential|key\.pem|keystore\.key|oauthbearer\.config"
)


def is_secret_key(key: str) -> bool:
    """Whether a client option holds a secret (``sasl.password``, ``kafka.sasl.jaas.config``, ``token``,
    ``ssl.key.pem``...)."""
    return bool(_SECRET_KEY.search(key))


class ClientConfig(dict[str, Any]):
    """What a settings object hands to a client library (librdkafka properties, Spark's Kafka options,
    redis-py or py-consul keyword arguments): a plain ``dict`` to the library, whose ``repr`` and ``str``
    mask the values of secret keys (:func:`is_secret_key`), so printing or logging one shows no secret."""

    def __repr__(self) -> str:
        return repr({k: MASK if v is not None and is_secret_key(k) else v for k, v in self.items()})

    __str__ = __repr__


def _masked_config(v: dict[str, str]) -> ClientConfig:
    return ClientConfig(v)


def _blank_is_unset(v: object) -> object:
    """An optional setting written empty (``JOBQ_REDIS_TLS_CA_FILE=``, a compose ``${VAR:-}``) is unset."""
    return None if v == "" else v


def _env_name(model: BaseSettings, field: str) -> str:
    return f"{model.model_config.get('env_prefix') or ''}{field}".upper()


def _read_secret_file(model: BaseSettings, field: str) -> None:
    """Fill the secret ``field`` from the file its ``<field>_file`` setting names (trailing newlines
    stripped: a mounted Kubernetes/Docker secret or ``echo x > file``). Both set, or a file that cannot be
    read or is empty, is a settings error naming the variable (never the secret)."""
    path = getattr(model, f"{field}_file")
    if not path:
        return
    name = _env_name(model, field)
    if getattr(model, field) is not None:
        raise ValueError(f"{name} and {name}_FILE are both set: give the secret once")
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ValueError(f"{name}_FILE: cannot read {path} ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{name}_FILE: {path} is not UTF-8 text") from None
    if not text:
        raise ValueError(f"{name}_FILE: {path} is empty")
    setattr(model, field, SecretStr(text))


def _check_files(model: BaseSettings, fields: Sequence[str]) -> None:
    """Each of ``fields`` that is set must name a readable file (a CA bundle, a certificate, a key, a
    keytab): found at start-up with the variable's name, not at the first TLS handshake."""
    for field in fields:
        path = getattr(model, field)
        if path and not os.access(Path(path).expanduser(), os.R_OK):
            problem = "is not readable" if Path(path).expanduser().is_file() else "does not exist"
            raise ValueError(f"{_env_name(model, field)}: {path} {problem}")


class RedisSettings(BaseSettings):
    """Where the execution state lives (``JOBQ_REDIS_*``): TLS (a ``rediss://`` URL or ``JOBQ_REDIS_TLS``)
    and an ACL user are mapped to redis-py by :meth:`client_kwargs` and ``jqcore.redisconn`` for every
    client (``docs/security.md``)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_REDIS_",
        extra="ignore",
        use_attribute_docstrings=True,
        populate_by_name=True,
        hide_input_in_errors=True,
    )

    url: str = Field(DEFAULT_REDIS_URL, validation_alias=AliasChoices("JOBQ_REDIS_URL", "REDIS_URL"))
    """Redis holding the execution state: ``redis://``, ``rediss://`` (TLS) or ``unix://``. A user and
    password written in the URL are moved to ``JOBQ_REDIS_USERNAME``/``JOBQ_REDIS_PASSWORD`` (so the URL
    can be shown)."""
    cluster: bool = False
    """Connect with the Redis Cluster protocol (``url`` names any one node)."""
    username: str | None = None
    """Redis ACL user (unset: the ``default`` user)."""
    password: SecretStr | None = None
    """Redis ACL password (or ``requirepass``)."""
    password_file: str | None = None
    """A file holding the password instead (trailing newline stripped), e.g. a mounted secret."""
    tls: bool = False
    """TLS to Redis with a ``redis://`` URL (``rediss://`` is TLS anyway)."""
    tls_ca_file: str | None = None
    """CA bundle (a path) checking Redis's TLS certificate (unset: the system's CAs)."""
    tls_cert_file: str | None = None
    """Client certificate (a PEM path) for a Redis that asks for one (``tls-auth-clients``)."""
    tls_key_file: str | None = None
    """The client certificate's private key (a PEM path; unset: it is in ``JOBQ_REDIS_TLS_CERT_FILE``)."""
    socket_timeout_s: float = Field(35.0, gt=0)
    """Per-command socket timeout; blocking waits stay 1 s below it (so idle workers block ~34 s)."""
    allow_eviction: bool = False
    """Start even when Redis's ``maxmemory-policy`` is not ``noeviction`` (services refuse otherwise: an
    evicting Redis drops jobs silently). A Redis that refuses ``CONFIG GET`` is trusted, with a warning."""

    _blank = field_validator(
        "username", "password", "password_file", "tls_ca_file", "tls_cert_file", "tls_key_file", mode="before"
    )(_blank_is_unset)

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v

    @model_validator(mode="after")
    def _secured(self) -> RedisSettings:
        self._credentials_out_of_url()
        _read_secret_file(self, "password")
        tls_files = [f for f in ("tls_ca_file", "tls_cert_file", "tls_key_file") if getattr(self, f)]
        if self.url.startswith("unix://") and (self.tls or tls_files):
            raise ValueError(
                "JOBQ_REDIS_TLS and JOBQ_REDIS_TLS_* need a redis:// or rediss:// URL, not unix://"
            )
        if tls_files and not self.uses_tls:
            raise ValueError(
                f"{_env_name(self, tls_files[0])} needs TLS: set JOBQ_REDIS_TLS=true or use a rediss:// URL"
            )
        if self.tls_key_file and not self.tls_cert_file:
            raise ValueError("JOBQ_REDIS_TLS_KEY_FILE needs JOBQ_REDIS_TLS_CERT_FILE (the key's certificate)")
        _check_files(self, tls_files)
        return self

    def _credentials_out_of_url(self) -> None:
        parts = urlsplit(self.url)
        if "password" in parse_qs(parts.query):
            raise ValueError("the Redis URL's query holds a password: set JOBQ_REDIS_PASSWORD instead")
        userinfo, at, host = parts.netloc.rpartition("@")
        if not at:
            return
        user, colon, password = userinfo.partition(":")
        if colon and password:
            if self.password is not None or self.password_file:
                raise ValueError(
                    "the Redis URL holds a password and JOBQ_REDIS_PASSWORD(_FILE) is set too: give it once"
                )
            self.password = SecretStr(unquote(password))
        if user:
            if self.username and self.username != unquote(user):
                raise ValueError("the Redis URL names another user than JOBQ_REDIS_USERNAME")
            self.username = unquote(user)
        self.url = urlunsplit(parts._replace(netloc=host))

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.url.startswith("rediss://")

    def client_url(self) -> str:
        """``url`` as redis-py is given it: ``rediss://`` when TLS is on (redis-py picks its TLS
        connection by the URL's scheme; an ``ssl=True`` keyword next to a ``redis://`` URL reaches the
        plain connection class and fails with ``unexpected keyword argument 'ssl'``)."""
        if self.tls and self.url.startswith("redis://"):
            return "rediss://" + self.url.removeprefix("redis://")
        return self.url

    def client_kwargs(self) -> ClientConfig:
        """Keyword arguments for every redis-py client (sync or asyncio, one node or a Cluster) beside
        :meth:`client_url`: timeouts, the ACL user and the TLS files. Its ``repr`` masks the password."""
        kw = ClientConfig(socket_timeout=self.socket_timeout_s, socket_connect_timeout=5.0)
        if self.username:
            kw["username"] = self.username
        if self.password is not None:
            kw["password"] = self.password.get_secret_value()
        for field, key in (
            ("tls_ca_file", "ssl_ca_certs"),
            ("tls_cert_file", "ssl_certfile"),
            ("tls_key_file", "ssl_keyfile"),
        ):
            if getattr(self, field):
                kw[key] = getattr(self, field)
        return kw


SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]

_KAFKA_SECRETS = ("sasl_password", "sasl_oauthbearer_client_secret", "ssl_key_password")
_KAFKA_SASL = {
    "PLAIN": ("sasl_username", "sasl_password"),
    "SCRAM-SHA-256": ("sasl_username", "sasl_password"),
    "SCRAM-SHA-512": ("sasl_username", "sasl_password"),
    "OAUTHBEARER": (
        "sasl_oauthbearer_token_endpoint_url",
        "sasl_oauthbearer_client_id",
        "sasl_oauthbearer_client_secret",
    ),
    "GSSAPI": ("sasl_kerberos_service_name",),
}
"""What each mechanism needs (each from its setting or from ``JOBQ_KAFKA_CONFIG``)."""
_KAFKA_SASL_OPTIONAL = {
    "OAUTHBEARER": ("sasl_oauthbearer_scope",),
    "GSSAPI": ("sasl_kerberos_principal", "sasl_kerberos_keytab"),
}
_KAFKA_TLS = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location", "ssl_key_password")
_KAFKA_MAPPED = (
    "sasl_mechanism",
    *dict.fromkeys(f for fields in (*_KAFKA_SASL.values(), *_KAFKA_SASL_OPTIONAL.values()) for f in fields),
    *_KAFKA_TLS,
)
"""The settings mapped to librdkafka one to one: ``sasl_kerberos_service_name`` is
``sasl.kerberos.service.name``."""


def librdkafka_key(field: str) -> str:
    """The librdkafka property of a :class:`KafkaSettings` field (``ssl_ca_location`` →
    ``ssl.ca.location``)."""
    return field.replace("_", ".")


class KafkaSettings(BaseSettings):
    """The Kafka cluster (``JOBQ_KAFKA_*``): its brokers and how to reach them (TLS, SASL PLAIN/SCRAM,
    OAUTHBEARER over OIDC, GSSAPI), mapped to librdkafka by :meth:`client_config` and to Spark's Kafka
    options by ``jqspark.options`` (``docs/security.md``); ``JOBQ_KAFKA_CONFIG`` passes librdkafka
    options through."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_KAFKA_",
        extra="ignore",
        use_attribute_docstrings=True,
        populate_by_name=True,
        hide_input_in_errors=True,
    )

    bootstrap: str = Field(
        DEFAULT_KAFKA_BOOTSTRAP,
        validation_alias=AliasChoices("JOBQ_KAFKA_BOOTSTRAP", "KAFKA_BOOTSTRAP_SERVERS"),
    )
    """Kafka bootstrap servers, ``host:port,...``."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """``security.protocol``: ``SSL``/``SASL_SSL`` encrypt (``JOBQ_KAFKA_SSL_*``), ``SASL_*`` authenticate
    (``JOBQ_KAFKA_SASL_MECHANISM``)."""
    sasl_mechanism: SaslMechanism | None = None
    """``sasl.mechanism``: ``PLAIN`` and ``SCRAM-*`` need ``SASL_USERNAME`` and ``SASL_PASSWORD``,
    ``OAUTHBEARER`` the ``SASL_OAUTHBEARER_*`` settings (OIDC client credentials), ``GSSAPI`` (Kerberos)
    ``SASL_KERBEROS_SERVICE_NAME``; each may come from ``JOBQ_KAFKA_CONFIG`` instead."""
    sasl_username: str | None = None
    """``sasl.username`` (PLAIN, SCRAM)."""
    sasl_password: SecretStr | None = None
    """``sasl.password`` (PLAIN, SCRAM)."""
    sasl_password_file: str | None = None
    """A file holding the SASL password instead (trailing newline stripped)."""
    sasl_oauthbearer_token_endpoint_url: str | None = None
    """OAUTHBEARER: the OIDC token endpoint (``sasl.oauthbearer.method=oidc``, client credentials)."""
    sasl_oauthbearer_client_id: str | None = None
    """OAUTHBEARER: ``sasl.oauthbearer.client.id``."""
    sasl_oauthbearer_client_secret: SecretStr | None = None
    """OAUTHBEARER: ``sasl.oauthbearer.client.secret``."""
    sasl_oauthbearer_client_secret_file: str | None = None
    """A file holding the OIDC client secret instead (trailing newline stripped)."""
    sasl_oauthbearer_scope: str | None = None
    """OAUTHBEARER: ``sasl.oauthbearer.scope`` (optional)."""
    sasl_kerberos_service_name: str | None = None
    """GSSAPI: the brokers' Kerberos service name (``kafka`` as a rule)."""
    sasl_kerberos_principal: str | None = None
    """GSSAPI: this client's Kerberos principal (with a keytab)."""
    sasl_kerberos_keytab: str | None = None
    """GSSAPI: the keytab (a path) holding the principal's key; unset: the ticket cache (``kinit``)."""
    ssl_ca_location: str | None = None
    """CA bundle (a PEM path) checking the brokers' certificates (unset: the system's CAs)."""
    ssl_certificate_location: str | None = None
    """Client certificate (a PEM path) for brokers that authenticate clients by TLS."""
    ssl_key_location: str | None = None
    """The client certificate's private key (a PEM path)."""
    ssl_key_password: SecretStr | None = None
    """Passphrase of an encrypted private key."""
    ssl_key_password_file: str | None = None
    """A file holding the key's passphrase instead (trailing newline stripped)."""
    config: Annotated[dict[str, str], JsonText, AfterValidator(_masked_config)] = Field(default_factory=dict)
    """Extra librdkafka properties as a JSON object, e.g. ``{"socket.keepalive.enable": "true"}`` (they
    win over the settings above; values of secret-looking keys are masked wherever the settings are shown)."""

    replication: int | None = Field(default=None, ge=1)
    """Replication factor of every jobq topic (``jqcore/topics.py``), and the least an existing one may
    have; ``min.insync.replicas`` is this − 1 (at least 1). Empty: ``min(3, brokers in the cluster)``."""
    create_topics: bool = True
    """Services create the missing topics they own from the declaration (development). ``false`` (production;
    the Helm chart sets it): a missing topic stops the service at start-up, naming ``jobq topics create``."""

    _blank = field_validator(
        *_KAFKA_MAPPED, *(f"{f}_file" for f in _KAFKA_SECRETS), "replication", mode="before"
    )(_blank_is_unset)

    @model_validator(mode="after")
    def _secured(self) -> KafkaSettings:
        for field in _KAFKA_SECRETS:
            _read_secret_file(self, field)
        self._check_sasl()
        self._check_tls()
        return self

    def _check_sasl(self) -> None:
        protocol, mechanism = self.security_protocol, self.mechanism
        sasl_set = [f for f in _KAFKA_MAPPED if f.startswith("sasl_") and getattr(self, f) is not None]
        if not protocol.startswith("SASL_"):
            if sasl_set:
                raise ValueError(
                    f"{_env_name(self, sasl_set[0])} needs JOBQ_KAFKA_SECURITY_PROTOCOL SASL_PLAINTEXT or "
                    f"SASL_SSL (it is {protocol})"
                )
            return
        if mechanism is None:
            raise ValueError(
                f"JOBQ_KAFKA_SECURITY_PROTOCOL {protocol} needs JOBQ_KAFKA_SASL_MECHANISM (PLAIN, "
                "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or GSSAPI)"
            )
        needed = _KAFKA_SASL.get(mechanism, ())
        if mechanism == "OAUTHBEARER" and self.config.get("sasl.oauthbearer.method", "oidc") != "oidc":
            needed = ()  # librdkafka's unsecured JWT or an application's callback, set up in CONFIG
        missing = [f for f in needed if not self.has(f)]
        if missing:
            names = ", ".join(_env_name(self, f) for f in missing)
            raise ValueError(
                f"SASL mechanism {mechanism} needs {names} (or the same librdkafka keys in JOBQ_KAFKA_CONFIG)"
            )
        used = {"sasl_mechanism", *_KAFKA_SASL.get(mechanism, ()), *_KAFKA_SASL_OPTIONAL.get(mechanism, ())}
        foreign = [f for f in sasl_set if f not in used]
        if foreign:
            raise ValueError(f"{_env_name(self, foreign[0])} is not used by SASL mechanism {mechanism}")

    def _check_tls(self) -> None:
        protocol = self.security_protocol
        tls_set = [f for f in _KAFKA_TLS if getattr(self, f) is not None]
        if not protocol.endswith("SSL") and tls_set:
            raise ValueError(
                f"{_env_name(self, tls_set[0])} needs JOBQ_KAFKA_SECURITY_PROTOCOL SSL or SASL_SSL "
                f"(it is {protocol})"
            )
        if self.ssl_key_location and not self.ssl_certificate_location:
            raise ValueError("JOBQ_KAFKA_SSL_KEY_LOCATION needs JOBQ_KAFKA_SSL_CERTIFICATE_LOCATION")
        if self.ssl_key_password is not None and not self.ssl_key_location:
            raise ValueError("JOBQ_KAFKA_SSL_KEY_PASSWORD needs JOBQ_KAFKA_SSL_KEY_LOCATION")
        _check_files(
            self, ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location", "sasl_kerberos_keytab")
        )

    @property
    def mechanism(self) -> str | None:
        """The SASL mechanism in force: the setting, else ``JOBQ_KAFKA_CONFIG``'s ``sasl.mechanism(s)``."""
        return self.sasl_mechanism or self.config.get("sasl.mechanism") or self.config.get("sasl.mechanisms")

    def has(self, field: str) -> bool:
        """Whether ``field`` is given, by its setting or by its librdkafka key in ``JOBQ_KAFKA_CONFIG``."""
        return getattr(self, field) is not None or librdkafka_key(field) in self.config

    def client_config(self) -> ClientConfig:
        """librdkafka configuration common to producers, consumers and admin clients: every setting set
        under its librdkafka name, ``sasl.oauthbearer.method=oidc`` for OAUTHBEARER, then
        ``JOBQ_KAFKA_CONFIG``. Its ``repr`` masks the secrets."""
        conf = ClientConfig(
            {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        )
        for field in _KAFKA_MAPPED:
            v = getattr(self, field)
            if v is not None:
                conf[librdkafka_key(field)] = v.get_secret_value() if isinstance(v, SecretStr) else v
        if self.mechanism == "OAUTHBEARER" and self.has("sasl_oauthbearer_token_endpoint_url"):
            conf["sasl.oauthbearer.method"] = "oidc"
        conf.update(self.config)
        return conf


class ConsulSettings(BaseSettings):
    """The Consul agent (``JOBQ_CONSUL_*``; Consul's own ``CONSUL_HTTP_ADDR``, ``CONSUL_HTTP_TOKEN``,
    ``CONSUL_CACERT``... honoured): HTTPS from an ``https://`` address, CA, client certificate and ACL token
    mapped to py-consul by :meth:`client_kwargs` (``docs/security.md``)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_CONSUL_",
        extra="ignore",
        use_attribute_docstrings=True,
        populate_by_name=True,
        hide_input_in_errors=True,
    )

    addr: str = Field(
        DEFAULT_CONSUL_ADDR, validation_alias=AliasChoices("JOBQ_CONSUL_ADDR", "CONSUL_HTTP_ADDR")
    )
    """The agent's HTTP API, ``host:port`` or ``http(s)://host:port`` (a scheme given here is the
    scheme)."""
    token: SecretStr | None = Field(
        None, validation_alias=AliasChoices("JOBQ_CONSUL_TOKEN", "CONSUL_HTTP_TOKEN")
    )
    """Consul ACL token."""
    token_file: str | None = Field(
        None, validation_alias=AliasChoices("JOBQ_CONSUL_TOKEN_FILE", "CONSUL_HTTP_TOKEN_FILE")
    )
    """A file holding the ACL token instead (trailing newline stripped)."""
    scheme: Literal["http", "https"] = "http"
    """How the agent's HTTP API is reached when ``JOBQ_CONSUL_ADDR`` names no scheme."""
    ca_file: str | None = Field(None, validation_alias=AliasChoices("JOBQ_CONSUL_CA_FILE", "CONSUL_CACERT"))
    """CA bundle (a PEM path) checking the agent's certificate (unset: the system's CAs); needs https."""
    cert_file: str | None = Field(
        None, validation_alias=AliasChoices("JOBQ_CONSUL_CERT_FILE", "CONSUL_CLIENT_CERT")
    )
    """Client certificate (a PEM path) for an agent that verifies clients (``verify_incoming``)."""
    key_file: str | None = Field(
        None, validation_alias=AliasChoices("JOBQ_CONSUL_KEY_FILE", "CONSUL_CLIENT_KEY")
    )
    """The client certificate's private key (a PEM path; unset: it is in ``JOBQ_CONSUL_CERT_FILE``)."""
    verify: bool = Field(True, validation_alias=AliasChoices("JOBQ_CONSUL_VERIFY", "CONSUL_HTTP_SSL_VERIFY"))
    """Check the agent's TLS certificate (``false`` only for a throw-away test agent)."""

    _blank = field_validator("token", "token_file", "ca_file", "cert_file", "key_file", mode="before")(
        _blank_is_unset
    )

    @field_validator("addr")
    @classmethod
    def _host_port(cls, v: str) -> str:
        scheme, sep, rest = v.rpartition("://")
        if sep and scheme not in ("http", "https"):
            raise ValueError("the scheme must be http:// or https://")
        host, _, port = rest.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be host:port or http(s)://host:port, e.g. 127.0.0.1:8500")
        return v

    @model_validator(mode="after")
    def _secured(self) -> ConsulSettings:
        _read_secret_file(self, "token")
        scheme, sep, _ = self.addr.rpartition("://")
        if sep:
            if "scheme" in self.model_fields_set and self.scheme != scheme:
                raise ValueError(f"JOBQ_CONSUL_ADDR is {scheme}:// but JOBQ_CONSUL_SCHEME is {self.scheme}")
            self.scheme = "https" if scheme == "https" else "http"
        tls_files = [f for f in ("ca_file", "cert_file", "key_file") if getattr(self, f)]
        if tls_files and self.scheme != "https":
            raise ValueError(
                f"{_env_name(self, tls_files[0])} needs https (JOBQ_CONSUL_ADDR https://host:port or "
                "JOBQ_CONSUL_SCHEME=https)"
            )
        if self.ca_file and not self.verify:
            raise ValueError("JOBQ_CONSUL_CA_FILE is set but JOBQ_CONSUL_VERIFY is false: which is meant?")
        if self.key_file and not self.cert_file:
            raise ValueError("JOBQ_CONSUL_KEY_FILE needs JOBQ_CONSUL_CERT_FILE (the key's certificate)")
        _check_files(self, tls_files)
        return self

    @property
    def host(self) -> str:
        return self._split()[0]

    @property
    def port(self) -> int:
        return self._split()[1]

    def _split(self) -> tuple[str, int]:
        addr = self.addr.split("://", 1)[-1]
        host, _, port = addr.rpartition(":")
        return (host or "127.0.0.1"), int(port or 8500)

    def client_kwargs(self) -> ClientConfig:
        """Keyword arguments for py-consul's clients (``consul.Consul``, ``consul.aio.Consul``): address,
        scheme, ``verify`` (the CA path, or whether to check), ``cert`` (a path or ``(cert, key)``) and the
        token. Its ``repr`` masks the token."""
        cert: str | tuple[str, str] | None = self.cert_file
        if self.cert_file and self.key_file:
            cert = (self.cert_file, self.key_file)
        return ClientConfig(
            host=self.host,
            port=self.port,
            scheme=self.scheme,
            verify=self.ca_file or self.verify,
            cert=cert,
            token=self.token.get_secret_value() if self.token is not None else None,
        )


class LogSettings(BaseSettings):
    """Logging (``JOBQ_LOG_LEVEL``, ``JOBQ_LOG_FORMAT``)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_LOG_", extra="ignore", use_attribute_docstrings=True)

    level: Literal["debug", "info", "warning", "error"] = "info"
    """The lowest level logged."""
    format: Literal["console", "json"] = "console"
    """``json``: JSON lines, for production."""


class RelayKeys(BaseSettings):
    """Where the relays keep their state (``JOBQ_RELAY_*``): read by the relay itself (which adds its own
    settings, ``jqrelay.settings``) and by whoever shows or changes it (``jobq status``, the dashboard)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_RELAY_", extra="ignore", use_attribute_docstrings=True, populate_by_name=True
    )

    topics: CommaList = Field(default_factory=list)
    """Topics to relay (comma-separated); empty: every topic of the routes (JOBQ_ROUTES)."""
    kv_prefix: str = "jobq"
    """Consul KV root: locks at ``<prefix>/locks/<topic>``, rate limits at ``<prefix>/rates/<topic>`` (per
topic) and ``<prefix>/queue-rates/<queue>`` (per queue)."""
    group_prefix: str = "jobq-relay"
    """Kafka consumer group per topic: ``<group_prefix>.<topic>`` (offsets are committed there)."""

    def lock_key(self, topic: str) -> str:
        return f"{self.kv_prefix}/locks/{topic}"

    def rate_key(self, topic: str) -> str:
        return f"{self.kv_prefix}/rates/{topic}"

    def queue_rates_folder(self) -> str:
        """Per-queue limits: one key per queue, ``<prefix>/queue-rates/<queue>``."""
        return f"{self.kv_prefix}/queue-rates/"

    def queue_rate_key(self, queue: str) -> str:
        return f"{self.queue_rates_folder()}{queue}"

    def group(self, topic: str) -> str:
        return f"{self.group_prefix}.{topic}"


class CronSettings(BaseSettings):
    """Where cron schedules live (Consul KV ``<kv_prefix>/cron/<name>``): read by the scheduler service,
    written by ``jobq cron`` and the gateway's ``/v1/cron`` routes."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_CRON_", extra="ignore", use_attribute_docstrings=True)

    kv_prefix: str = Field("jobq", min_length=1)
    """Consul KV root: schedules at ``<prefix>/cron/<name>``, their state at ``<prefix>/cron-state/<name>``
    (the scheduler, the gateway and ``jobq cron``)."""


class FarSettings(BaseSettings):
    """The far-future tier (``docs/scheduler.md``): jobs due later than ``horizon_s`` are kept in the
    compacted ``topic`` instead of Redis. Relays split them off, scheduler instances
    move them into the engine once they are due within the horizon, the gateway unschedules them."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_FAR_", extra="ignore", use_attribute_docstrings=True)

    horizon_s: float = Field(3600.0, ge=0)
    """Jobs due further ahead than this go to the tier (0: the tier is off, every job goes to Redis)."""
    topic: str = Field("jobq.schedule", min_length=1)
    """The compacted schedule topic, keyed ``<queue>/<id>``."""
    partitions: int = Field(6, ge=1, le=1000)
    """Partitions of the schedule topic when jobq creates it (the unit the schedulers share)."""
    rescan_s: float = Field(600.0, gt=0)
    """How often an owner reads its partitions whole, moving what came within the horizon (below
    ``JOBQ_FAR_HORIZON_S``)."""

    @model_validator(mode="after")
    def _rescan_within_horizon(self) -> FarSettings:
        if self.horizon_s and self.rescan_s >= self.horizon_s:
            raise ValueError(
                "JOBQ_FAR_RESCAN_S must be below JOBQ_FAR_HORIZON_S (a job must be moved before it is due)"
            )
        return self

    @property
    def enabled(self) -> bool:
        return self.horizon_s > 0


class EventSettings(BaseSettings):
    """Lifecycle events (``docs/history.md``): every transition of a job is recorded in its queue's Redis
    stream by the script that makes it; scheduler instances ship each owned queue's stream to ``topic``
    (keyed by job id) and trim what Kafka acknowledged."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_EVENTS_", extra="ignore", use_attribute_docstrings=True
    )

    topic: str = Field("jobq.events", min_length=1)
    """The lifecycle events topic (``docs/history.md``), keyed by job id."""
    partitions: int = Field(6, ge=1, le=1000)
    """Partitions of the events topic when jobq creates it."""
    batch: int = Field(1000, ge=1, le=100_000)
    """Events read from one queue's stream and produced per round."""


class HistorySettings(BaseSettings):
    """The history tables (``docs/history.md``): built by ``jobq history run`` (PySpark), read by the CLI
    and the gateway's archive through DuckDB."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_HISTORY_", extra="ignore", use_attribute_docstrings=True
    )

    path: str = ""
    """Folder of the tables ('' = the default local stack's: ``<JOBQ_HOME>/stacks/default/history``,
    where `jobq demo` keeps the history of that stack's events)."""
    retention_days: int = Field(30, ge=1)
    """Days of events kept in the historic table (and of finished jobs in the current table)."""
    trigger_s: float = Field(5.0, gt=0)
    """How often the streaming query picks up new events."""
    metrics_port: int | None = Field(None, ge=1, le=65_535)
    """``jobq history run`` serves Prometheus ``/metrics`` on ``JOBQ_METRICS_HOST``:PORT (the history's lag
    behind the events topic: ``jobq_history_lag_records``, ``jobq_history_progress_timestamp_seconds``)."""

    @property
    def root(self) -> Path:
        return Path(self.path).expanduser() if self.path else stack_dir("default") / "history"


class MetricsSettings(BaseSettings):
    """Where relays, schedulers, workers and canaries serve ``/healthz``, ``/readyz`` and ``/metrics``
    (``JOBQ_METRICS_HOST``); the port is each one's metrics port (``JOBQ_RELAY_METRICS_PORT``,
    ``JOBQ_SCHEDULER_METRICS_PORT``, ``JOBQ_WORKER_METRICS_PORT``, ``JOBQ_CANARY_METRICS_PORT`` or the
    command's ``--metrics-port``). Loopback by default; ``0.0.0.0`` in containers (probes come from
    outside)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_METRICS_", extra="ignore", use_attribute_docstrings=True
    )

    host: str = "127.0.0.1"
    """The address the health and metrics routes are served on."""
    loop_stale_s: float = Field(10.0, ge=2)
    """``/healthz`` answers 503 ``loop_stalled`` once the process's event loop has not run for this long
    (a blocking call or a runaway handler wedged it)."""


class TraceSettings(BaseSettings):
    """OpenTelemetry traces across the hops (``jqcore/tracing.py``, ``docs/history.md`` "Traces"): off
    unless ``otlp_endpoint`` is set; then the gateway, relays and workers export their spans there over
    OTLP/HTTP (protobuf)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_TRACE_", extra="ignore", use_attribute_docstrings=True)

    otlp_endpoint: str = ""
    """Collector base URL (``http://collector:4318``; ``/v1/traces`` is added unless given); '' = off."""
    service_name: str = ""
    """``service.name`` of this process's spans ('' = the service's own: kafkagate, jqrelay, worker)."""
    sample_ratio: float = Field(1.0, ge=0, le=1)
    """Share of new traces recorded; a span with a parent follows the parent's decision."""

    @field_validator("otlp_endpoint")
    @classmethod
    def _url(cls, v: str) -> str:
        if v and not v.startswith(("http://", "https://")):
            raise ValueError("must be empty (off) or start with http:// or https://")
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.otlp_endpoint)


def load(cls: type[_S], **overrides: Any) -> _S:
    """Build a settings object, turning validation failures into one readable ConfigError."""
    try:
        return cls(**overrides)
    except SettingsError as exc:
        raise ConfigError(f"invalid {cls.__name__}: {exc}", code="config_invalid") from exc
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix") or "")
        problems = "; ".join(
            f"{name}: {err['msg']}" if (name := _setting_name(prefix, err["loc"])) else err["msg"]
            for err in exc.errors(include_input=False)
        )
        raise ConfigError(f"invalid {cls.__name__}: {problems}", code="config_invalid") from exc


def load_env(cls: type[_S], env: Mapping[str, str]) -> _S:
    """:func:`load` ``cls`` from the environment ``env`` (a child process's, say) instead of this process's:
    every field is given, from its environment name in ``env`` (the field's aliases, else the prefix and
    its name) or its default, so nothing of ``os.environ`` mixes in."""
    prefix = str(cls.model_config.get("env_prefix") or "")
    given: dict[str, Any] = {}
    for name, info in cls.model_fields.items():
        alias = info.validation_alias
        names = (
            [str(c) for c in alias.choices]
            if isinstance(alias, AliasChoices)
            else [f"{prefix}{name}".upper()]
        )
        found = next((env[n] for n in names if n in env), None)
        given[name] = found if found is not None else info.get_default(call_default_factory=True)
    return load(cls, **given)


def _setting_name(prefix: str, loc: tuple[int | str, ...]) -> str:
    """The environment variable a validation error is about (``JOBQ_WORKER_APP``), when there is one."""
    if not loc:
        return ""
    field = ".".join(str(p) for p in loc)
    return f"{prefix}{str(loc[0]).upper()} ({field})" if prefix else field
