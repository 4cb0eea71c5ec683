"""Typed settings, read from the environment once at start-up.

Every service builds one settings object from these parts. Names follow ``JOBQ_<SECTION>_<FIELD>``;
the standard names of the ecosystems are honoured as well (``CONSUL_HTTP_ADDR``, ``CONSUL_HTTP_TOKEN``,
``REDIS_URL``, ``KAFKA_BOOTSTRAP_SERVERS``). Secrets are :class:`pydantic.SecretStr`: they never appear in
``repr``, logs or ``jobq stack env``. Cross-field checks run at construction, so a bad combination stops
the service at start-up with a :class:`~jqcore.errors.ConfigError` naming the setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import orjson
from pydantic import (
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
    "TraceSettings",
    "load",
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


class RedisSettings(BaseSettings):
    """Where the execution state lives (``JOBQ_REDIS_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_REDIS_", extra="ignore", use_attribute_docstrings=True, populate_by_name=True
    )

    url: str = Field(DEFAULT_REDIS_URL, validation_alias=AliasChoices("JOBQ_REDIS_URL", "REDIS_URL"))
    """Redis holding the execution state: ``redis://``, ``rediss://`` (TLS) or ``unix://``."""
    cluster: bool = False
    """Connect with the Redis Cluster protocol (``url`` names any one node)."""
    username: str | None = None
    """Redis ACL user."""
    password: SecretStr | None = None
    """Redis ACL password."""
    tls: bool = False
    """TLS to Redis with a ``redis://`` URL (``rediss://`` is TLS anyway)."""
    tls_ca_file: str | None = None
    """CA bundle (a path) checking Redis's TLS certificate."""
    socket_timeout_s: float = Field(35.0, gt=0)
    """Per-command socket timeout; blocking waits stay 1 s below it (so idle workers block ~34 s)."""
    allow_eviction: bool = False
    """Start even when Redis's ``maxmemory-policy`` is not ``noeviction`` (services refuse otherwise: an
    evicting Redis drops jobs silently). A Redis that refuses ``CONFIG GET`` is trusted, with a warning."""

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``redis.asyncio.Redis.from_url`` (secrets included, never logged)."""
        kw: dict[str, Any] = {"socket_timeout": self.socket_timeout_s, "socket_connect_timeout": 5.0}
        if self.username:
            kw["username"] = self.username
        if self.password is not None:
            kw["password"] = self.password.get_secret_value()
        if self.tls and self.url.startswith("redis://"):
            kw["ssl"] = True
        if self.tls_ca_file:
            kw["ssl_ca_certs"] = self.tls_ca_file
        return kw


class KafkaSettings(BaseSettings):
    """The Kafka cluster (``JOBQ_KAFKA_*``); ``JOBQ_KAFKA_CONFIG`` passes librdkafka options through."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_KAFKA_", extra="ignore", use_attribute_docstrings=True, populate_by_name=True
    )

    bootstrap: str = Field(
        DEFAULT_KAFKA_BOOTSTRAP,
        validation_alias=AliasChoices("JOBQ_KAFKA_BOOTSTRAP", "KAFKA_BOOTSTRAP_SERVERS"),
    )
    """Kafka bootstrap servers, ``host:port,...``."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """librdkafka's ``security.protocol``."""
    sasl_mechanism: str | None = None
    """librdkafka's ``sasl.mechanism``; the SASL protocols need it and ``JOBQ_KAFKA_SASL_USERNAME``."""
    sasl_username: str | None = None
    """librdkafka's ``sasl.username``."""
    sasl_password: SecretStr | None = None
    """librdkafka's ``sasl.password``."""
    ssl_ca_location: str | None = None
    """CA bundle (a path), librdkafka's ``ssl.ca.location``."""
    config: Annotated[dict[str, str], JsonText] = Field(default_factory=dict)
    """Extra librdkafka properties as a JSON object, e.g. ``{"socket.keepalive.enable": "true"}``."""
    replication: int | None = Field(default=None, ge=1)
    """Replication factor of every jobq topic (``jqcore/topics.py``), and the least an existing one may
    have; ``min.insync.replicas`` is this − 1 (at least 1). Empty: ``min(3, brokers in the cluster)``."""
    create_topics: bool = True
    """Services create the missing topics they own from the declaration (development). ``false`` (production;
    the Helm chart sets it): a missing topic stops the service at start-up, naming ``jobq topics create``."""

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL") and not (self.sasl_mechanism and self.sasl_username):
            raise ValueError("SASL protocols need JOBQ_KAFKA_SASL_MECHANISM and JOBQ_KAFKA_SASL_USERNAME")
        return self

    def client_config(self) -> dict[str, str]:
        """librdkafka configuration common to producers, consumers and admin clients."""
        conf: dict[str, str] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        conf.update(self.config)
        return conf


class ConsulSettings(BaseSettings):
    """The Consul agent (``CONSUL_HTTP_ADDR`` / ``CONSUL_HTTP_TOKEN`` honoured)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_CONSUL_", extra="ignore", use_attribute_docstrings=True, populate_by_name=True
    )

    addr: str = Field(
        DEFAULT_CONSUL_ADDR, validation_alias=AliasChoices("JOBQ_CONSUL_ADDR", "CONSUL_HTTP_ADDR")
    )
    """The Consul agent's HTTP address, ``host:port``."""
    token: SecretStr | None = Field(
        None, validation_alias=AliasChoices("JOBQ_CONSUL_TOKEN", "CONSUL_HTTP_TOKEN")
    )
    """Consul ACL token."""
    scheme: Literal["http", "https"] = "http"
    """How the agent's HTTP API is reached."""

    @field_validator("addr")
    @classmethod
    def _host_port(cls, v: str) -> str:
        host, _, port = v.split("://", 1)[-1].rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be host:port, e.g. 127.0.0.1:8500")
        return v

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

    @property
    def root(self) -> Path:
        return Path(self.path).expanduser() if self.path else stack_dir("default") / "history"


class MetricsSettings(BaseSettings):
    """Where relays, workers and canaries serve ``/metrics`` (``JOBQ_METRICS_HOST``); the port is each
    command's ``--metrics-port``. Loopback by default; ``0.0.0.0`` in containers."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_METRICS_", extra="ignore", use_attribute_docstrings=True
    )

    host: str = "127.0.0.1"
    """The address ``/metrics`` is served on."""


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
            f"{_setting_name(prefix, err['loc']) or cls.__name__}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid {cls.__name__}: {problems}", code="config_invalid") from exc


def _setting_name(prefix: str, loc: tuple[int | str, ...]) -> str:
    """The environment variable a validation error is about (``JOBQ_WORKER_APP``), when there is one."""
    if not loc:
        return ""
    field = ".".join(str(p) for p in loc)
    return f"{prefix}{str(loc[0]).upper()} ({field})" if prefix else field
