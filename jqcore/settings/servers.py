"""The servers' settings besides Kafka's (``jqcore.settings.kafka``): Redis (``JOBQ_REDIS_*``) and Consul
(``JOBQ_CONSUL_*``), with TLS, ACL users/tokens and ``*_FILE`` secrets (``docs/security.md``)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings.common import (
    DEFAULT_CONSUL_ADDR,
    DEFAULT_REDIS_URL,
    ClientConfig,
    _blank_is_unset,
    _check_files,
    _env_name,
    _read_secret_file,
)

__all__ = ["ConsulSettings", "RedisSettings"]


class RedisSettings(BaseSettings):
    """Where the execution state lives (``JOBQ_REDIS_*``): TLS (a ``rediss://`` URL or ``JOBQ_REDIS_TLS``)
    and an ACL user are mapped to redis-py by :meth:`client_kwargs` and ``jqengine.redisconn`` for every
    client (``docs/security.md``)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_REDIS_",
        extra="ignore",
        populate_by_name=True,
        hide_input_in_errors=True,
    )

    url: str = Field(DEFAULT_REDIS_URL, validation_alias=AliasChoices("JOBQ_REDIS_URL", "REDIS_URL"))
    """Redis holding the execution state: ``redis://``, ``rediss://`` (TLS) or ``unix://``. A user and
    password written in the URL are moved to ``JOBQ_REDIS_USERNAME``/``JOBQ_REDIS_PASSWORD`` (so the URL
    can be shown)."""
    cluster: bool = False
    """Connect with the Redis Cluster protocol (``url`` names any one node). Set it when Redis is a
    Cluster."""
    username: str | None = None
    """Redis ACL user (unset: the ``default`` user)."""
    username_file: str | None = None
    """A file holding the ACL user instead (trailing newline stripped): a mounted Secret's key beside the
    password's (the Helm chart mounts both, so no credential is in the environment)."""
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
    """Per-command socket timeout; blocking waits stay 1 s below it (so idle workers block ~34 s). Raise it
    when the network or a proxy to Redis stalls commands longer; lower it to find a dead Redis sooner."""
    allow_eviction: bool = False
    """Start even when Redis's ``maxmemory-policy`` is not ``noeviction`` (services refuse otherwise: an
    evicting Redis drops jobs silently). A Redis that refuses ``CONFIG GET`` is trusted, with a warning. Set
    it only for a Redis whose policy you cannot change (a managed one), accepting that risk."""

    _blank = field_validator(
        "username",
        "username_file",
        "password",
        "password_file",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        mode="before",
    )(_blank_is_unset)

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v

    @model_validator(mode="after")
    def _secured(self) -> RedisSettings:
        _read_secret_file(self, "username", kind="text")
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


class ConsulSettings(BaseSettings):
    """The Consul agent (``JOBQ_CONSUL_*``; Consul's own ``CONSUL_HTTP_ADDR``, ``CONSUL_HTTP_TOKEN``,
    ``CONSUL_CACERT``... honoured): HTTPS from an ``https://`` address, CA, client certificate and ACL token
    mapped to py-consul by :meth:`client_kwargs` (``docs/security.md``)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_CONSUL_",
        extra="ignore",
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
    """How the agent's HTTP API is reached when ``JOBQ_CONSUL_ADDR`` names no scheme. Set ``https`` when the
    agent serves TLS and the address is written without a scheme."""
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
