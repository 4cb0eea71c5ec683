"""The Kafka cluster's settings (``JOBQ_KAFKA_*``): brokers, TLS and SASL (PLAIN, SCRAM, OAUTHBEARER over
OIDC, GSSAPI), the tables of what each mechanism needs, and their mapping to librdkafka
(``docs/security.md``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings.common import (
    DEFAULT_KAFKA_BOOTSTRAP,
    ClientConfig,
    JsonText,
    _blank_is_unset,
    _check_files,
    _env_name,
    _masked_config,
    _read_secret_file,
)

__all__ = ["Compression", "KafkaSettings", "ProduceBatching", "SaslMechanism", "librdkafka_key"]


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
    sasl_username_file: str | None = None
    """A file holding the SASL user name instead (trailing newline stripped): a mounted Secret's key beside
    the password's (the Helm chart mounts both, so no credential is in the environment)."""
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
    """Extra librdkafka properties as a JSON object, e.g. ``{"socket.keepalive.enable": "true"}`` (they win
    over the settings above; values of secret-looking keys are masked wherever the settings are shown). Set it
    for a librdkafka option no setting here names (keepalives, timeouts your network needs)."""

    replication: int | None = Field(default=None, ge=1)
    """Replication factor of every jobq topic (``jqcore/topics.py``), and the least an existing one may have;
    ``min.insync.replicas`` is this − 1 (at least 1). Empty: ``min(3, brokers in the cluster)``. Set it when
    your cluster's durability policy asks for another factor than that."""
    create_topics: bool = True
    """Services create the missing topics they own from the declaration (development). ``false`` (production;
    the Helm chart sets it): a missing topic stops the service at start-up, naming ``jobq topics create``."""

    _blank = field_validator(
        *_KAFKA_MAPPED,
        *(f"{f}_file" for f in _KAFKA_SECRETS),
        "sasl_username_file",
        "replication",
        mode="before",
    )(_blank_is_unset)

    @model_validator(mode="after")
    def _secured(self) -> KafkaSettings:
        _read_secret_file(self, "sasl_username", kind="text")
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


Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]


class ProduceBatching(BaseModel):
    """How a service's Kafka producer batches its records (librdkafka's ``linger.ms``, ``batch.size``,
    ``batch.num.messages``, ``compression.type``): the fields of the settings classes of the services that
    produce a lot (the gateway, the event shipper). Delivery stays ``acks=all`` with idempotence."""

    produce_linger_ms: int = Field(2, ge=0, le=1000)
    """How long the producer waits for more records before it sends a batch to a partition's leader
    (librdkafka's ``linger.ms``): longer waits make fewer, larger requests (less CPU per record in the
    service and in Kafka) and add up to this much to each write's latency (the gateway's 202)."""
    produce_batch_bytes: int = Field(1_000_000, ge=1024, le=2_097_152)
    """The largest batch of records the producer sends to one partition (librdkafka's ``batch.size``, bytes).
    At most ``KAFKA_MAX_MESSAGE_BYTES`` (2 MiB), the largest request Kafka takes from jobq. Raise it (with the
    linger) when full batches, not the linger, end the batches of a busy producer."""
    produce_batch_messages: int = Field(10_000, ge=1, le=1_000_000)
    """The most records in one batch (librdkafka's ``batch.num.messages``). Raise it when batches of small
    records reach this count before their bytes limit."""
    produce_compression: Compression = "lz4"
    """How batches are compressed (librdkafka's ``compression.type``): ``none``, ``gzip``, ``snappy``,
    ``lz4``, ``zstd``. ``zstd`` saves network and disk for more CPU; ``none`` saves CPU where bandwidth is
    free."""

    def produce_options(self) -> dict[str, str | int]:
        """These settings as librdkafka producer options."""
        return {
            "linger.ms": self.produce_linger_ms,
            "batch.size": self.produce_batch_bytes,
            "batch.num.messages": self.produce_batch_messages,
            "compression.type": self.produce_compression,
        }
