"""Spark's Kafka options from jobq's Kafka settings: the one mapping of
:class:`~jqcore.settings.kafka.KafkaSettings` to the Java client inside Spark's Kafka connector (its
``kafka.``-prefixed options), used by the history reader (:func:`jqspark.history.start_history`) and the
sink (:func:`jqspark.write_batch`, :func:`jqspark.write_stream`).

It translates the librdkafka configuration the services use (:meth:`KafkaSettings.client_config`, so
``JOBQ_KAFKA_CONFIG`` counts too) into the Java client's terms: SASL credentials become a JAAS
``sasl.jaas.config``, OAUTHBEARER over OIDC the login callback handler and token endpoint, GSSAPI a
``Krb5LoginModule`` with the keytab; a PEM CA bundle a PEM truststore; a client certificate and key a PEM
keystore. The result is a :class:`~jqcore.settings.common.ClientConfig`: its ``repr`` masks the JAAS
config, the key and the passwords (and :func:`jqspark.spark_session` adds them to Spark's own
redaction).
"""

from __future__ import annotations

from pathlib import Path

from jqcore.errors import ConfigError
from jqcore.settings.common import ClientConfig
from jqcore.settings.kafka import KafkaSettings

__all__ = ["OAUTH_CALLBACK_HANDLER", "jaas_config", "kafka_settings", "spark_kafka_options"]

_PASSWORD_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_CALLBACK_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
"""The Java client's OIDC client-credentials login (kafka-clients ≥ 3.4; Spark 4.2's connector has 3.9)."""
_KRB5_MODULE = "com.sun.security.auth.module.Krb5LoginModule"


def kafka_settings(kafka: KafkaSettings | str | None) -> KafkaSettings | None:
    """``kafka`` as settings: a bare ``host:port,...`` string is a plaintext cluster (the environment is not
    read for it)."""
    if isinstance(kafka, str):
        return KafkaSettings.model_construct(bootstrap=kafka)
    return kafka


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jaas_config(module: str, **options: str | bool | None) -> str:
    """A JAAS line, ``<module> required key="value" ...;`` (values quoted and escaped; ``None`` left out)."""
    parts = [module, "required"]
    for key, value in options.items():
        if isinstance(value, bool):
            parts.append(f"{key}={str(value).lower()}")
        elif value is not None:
            parts.append(f"{key}={_quoted(value)}")
    return " ".join(parts) + ";"


def spark_kafka_options(kafka: KafkaSettings) -> ClientConfig:
    """The ``kafka.*`` options that make Spark's Kafka source and sink connect as ``kafka`` describes.
    Raises :class:`~jqcore.errors.ConfigError` for what the Java client cannot be given (OAUTHBEARER
    without OIDC, an unreadable certificate or key)."""
    conf = kafka.client_config()
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    opts = ClientConfig(
        {"kafka.bootstrap.servers": conf["bootstrap.servers"], "kafka.security.protocol": protocol}
    )
    if protocol.startswith("SASL_"):
        mechanism = str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "")
        opts["kafka.sasl.mechanism"] = mechanism
        opts.update(_sasl(conf, mechanism))
    if protocol.endswith("SSL"):
        opts.update(_tls(conf))
    return opts


def _sasl(conf: ClientConfig, mechanism: str) -> dict[str, str]:
    if mechanism in _PASSWORD_MODULES:
        module = _PASSWORD_MODULES[mechanism]
        return {
            "kafka.sasl.jaas.config": jaas_config(
                module, username=conf["sasl.username"], password=conf["sasl.password"]
            )
        }
    if mechanism == "OAUTHBEARER":
        if conf.get("sasl.oauthbearer.method") != "oidc":
            raise ConfigError(
                "Spark's Kafka client needs OAUTHBEARER over OIDC: set "
                "JOBQ_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL, _CLIENT_ID and _CLIENT_SECRET",
                code="config_invalid",
            )
        jaas = jaas_config(
            _OAUTH_MODULE,
            clientId=conf["sasl.oauthbearer.client.id"],
            clientSecret=conf["sasl.oauthbearer.client.secret"],
            scope=conf.get("sasl.oauthbearer.scope"),
        )
        return {
            "kafka.sasl.login.callback.handler.class": OAUTH_CALLBACK_HANDLER,
            "kafka.sasl.oauthbearer.token.endpoint.url": conf["sasl.oauthbearer.token.endpoint.url"],
            "kafka.sasl.jaas.config": jaas,
        }
    if mechanism == "GSSAPI":
        keytab, principal = conf.get("sasl.kerberos.keytab"), conf.get("sasl.kerberos.principal")
        login = (
            {"useKeyTab": True, "storeKey": True, "keyTab": keytab, "principal": principal}
            if keytab
            else {"useTicketCache": True, "principal": principal}
        )
        return {
            "kafka.sasl.kerberos.service.name": conf["sasl.kerberos.service.name"],
            "kafka.sasl.jaas.config": jaas_config(_KRB5_MODULE, **login),
        }
    raise ConfigError(f"no Spark Kafka options for SASL mechanism {mechanism!r}", code="config_invalid")


def _tls(conf: ClientConfig) -> dict[str, str]:
    opts: dict[str, str] = {}
    if conf.get("ssl.ca.location"):
        opts |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": conf["ssl.ca.location"]}
    cert, key = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
    if cert and key:
        opts["kafka.ssl.keystore.type"] = "PEM"
        if cert == key:  # one file holding the key and the certificate chain: the Java client reads it itself
            opts["kafka.ssl.keystore.location"] = cert
        else:  # two files: the Java client takes their PEM text (kafka.ssl.keystore.key is masked everywhere)
            opts["kafka.ssl.keystore.certificate.chain"] = _pem(cert, "JOBQ_KAFKA_SSL_CERTIFICATE_LOCATION")
            opts["kafka.ssl.keystore.key"] = _pem(key, "JOBQ_KAFKA_SSL_KEY_LOCATION")
        if conf.get("ssl.key.password"):
            opts["kafka.ssl.key.password"] = conf["ssl.key.password"]
    if str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        opts["kafka.ssl.endpoint.identification.algorithm"] = ""
    return opts


def _pem(path: str, setting: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not PEM text"
        raise ConfigError(f"{setting}: cannot read {path} ({reason})", code="config_invalid") from None
